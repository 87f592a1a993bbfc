// The tuned source (runtime/plan_sources.h TunedSource) asked directly: the store's mismatch policy after a miss, and
// a promotion's tune.
#include <gtest/gtest.h>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::Built;
using runtime_detail::TunedSource;

PlannerOptions with_policy(MismatchPolicy p) {
  EnvPolicy e;
  e.on_mismatch = p;
  return PlannerOptions::tools().with_store("plans.db", /*writable=*/false).with_policy(e);
}

TEST(TunedSource, APlainMissOfAnotherShapeIsNoMismatch) {
  SourceFixture f(with_policy(MismatchPolicy::kRetune));
  TunedSource tuned(*f.state);
  std::map<std::string, int64_t> other = {{"tokens", 96}};
  auto r = f.request(other);
  auto got = tuned.after_store_miss(r, "no record");
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->plan, nullptr);
  EXPECT_EQ(f.backend->tunes.load(), 0);
  EXPECT_TRUE(r.why.empty());
}

TEST(TunedSource, RetuneTunesTheGraphsOwnShapeNow) {
  SourceFixture f(with_policy(MismatchPolicy::kRetune));
  TunedSource tuned(*f.state);
  std::map<std::string, int64_t> own = {{"tokens", 64}};
  auto r = f.request(own);
  auto got = tuned.after_store_miss(r, "no record");
  ASSERT_TRUE(got.is_ok());
  ASSERT_NE(got->plan, nullptr);
  EXPECT_EQ(got->source, PlanSource::kTuned);
  EXPECT_EQ(f.backend->tunes.load(), 1);
  EXPECT_NE(r.joined().find("re-tuned now: eng99"), std::string::npos) << r.joined();
  EXPECT_NE(r.joined().find("not stored: the Planner's store is read-only"), std::string::npos) << r.joined();
  f.backend->tune_finds_none = true;
  auto r2 = f.request(own);
  got = tuned.after_store_miss(r2, "stale: cudnn_version");
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->plan, nullptr);
  EXPECT_NE(r2.joined().find("re-tune failed, the next sources serve: no correct candidate"), std::string::npos)
      << r2.joined();
}

TEST(TunedSource, HeuristicsAndQueueQueuesAStaleKey) {
  SourceFixture f(with_policy(MismatchPolicy::kHeuristicsAndQueue));
  f.backend->queue_note = "queued for re-tune (requested 1 time)";
  TunedSource tuned(*f.state);
  std::map<std::string, int64_t> other = {{"tokens", 96}};
  auto r = f.request(other);
  auto got = tuned.after_store_miss(r, "stale: cudnn_version");  // not a plain miss: another shape counts too
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->plan, nullptr);
  ASSERT_EQ(f.backend->queued.size(), 1u);
  EXPECT_EQ(f.backend->queued[0], "stale: cudnn_version");
  EXPECT_EQ(r.joined(), "queued for re-tune (requested 1 time)");
}

TEST(TunedSource, APromotionsTuneTakesAStoredPlanFirst) {
  SourceFixture f;
  TunedSource tuned(*f.state);
  std::string why;
  auto got = tuned.tune_for(f.pg, {{"tokens", 64}}, &why);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->source, PlanSource::kTuned);
  f.backend->stored.insert("tokens=128");
  got = tuned.tune_for(f.pg, {{"tokens", 128}}, &why);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->source, PlanSource::kStore);
  EXPECT_EQ(f.backend->tunes.load(), 1);
}

}  // namespace
}  // namespace kiln
