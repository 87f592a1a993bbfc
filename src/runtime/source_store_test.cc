// The store source (runtime/plan_sources.h StoreSource) asked directly, over a fake backend.
#include <gtest/gtest.h>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::Built;
using runtime_detail::StoreSource;
using runtime_detail::TunedSource;

TEST(StoreSource, AStoredKeyServesAndAMissSaysWhy) {
  SourceFixture f;
  TunedSource tuned(*f.state);
  StoreSource store(*f.state, tuned, /*after_stopgaps=*/false);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto r = f.request(shape);
  Built out;
  auto served = store.serve(r, &out);
  ASSERT_TRUE(served.is_ok());
  EXPECT_FALSE(*served);
  ASSERT_EQ(r.why.size(), 1u);
  EXPECT_EQ(r.why[0], "store: miss");
  f.backend->stored.insert("tokens=64");
  auto r2 = f.request(shape);
  served = store.serve(r2, &out);
  ASSERT_TRUE(served.is_ok());
  EXPECT_TRUE(*served);
  EXPECT_EQ(out.source, PlanSource::kStore);
  EXPECT_EQ(out.plan->config().engine_id, 7);
}

TEST(StoreSource, AskedJustBeforeIsNotAskedAgain) {
  SourceFixture f;
  TunedSource tuned(*f.state);
  StoreSource store(*f.state, tuned, /*after_stopgaps=*/false);
  f.backend->stored.insert("tokens=64");
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto r = f.request(shape, /*allow_stopgap=*/false, /*store_asked=*/true);
  Built out;
  auto served = store.serve(r, &out);
  ASSERT_TRUE(served.is_ok());
  EXPECT_FALSE(*served);
  EXPECT_EQ(f.backend->store_calls.load(), 0);
  EXPECT_EQ(r.joined(), "store: asked just before (no plan)");
}

// Of the two store steps exactly one asks: the one after the stopgaps where the tuned shapes do not list the key
// and a stopgap with no build may serve (with promotions on), the first one otherwise.
TEST(StoreSource, ExactlyOneOfTheTwoStepsAsks) {
  for (bool listed : {false, true}) {
    SourceFixture f(PlannerOptions::serving());
    if (listed) f.backend->tuned.push_back(TunedShape{"tokens=64", {{"tokens", 64}}, EngineConfig{41, {}}});
    f.backend->stored.insert("tokens=64");
    TunedSource tuned(*f.state);
    StoreSource first(*f.state, tuned, false), after(*f.state, tuned, true);
    std::map<std::string, int64_t> shape = {{"tokens", 64}};
    auto r = f.request(shape);
    EXPECT_EQ(r.store_after_stopgaps(), !listed);
    Built out;
    auto a = first.serve(r, &out);
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(*a, listed);
    auto b = after.serve(r, &out);
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ(*b, !listed);
    EXPECT_EQ(f.backend->store_calls.load(), 1);
  }
}

}  // namespace
}  // namespace kiln
