// The pinned source (runtime/plan_sources.h PinnedSource): exactly the configuration asked for, or the build's error.
#include <gtest/gtest.h>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::PinnedSource;

TEST(PinnedSource, BuildsExactlyTheConfigurationAndNothingElse) {
  SourceFixture f;
  f.backend->stored.insert("tokens=64");  // never asked
  PinnedSource pinned(*f.state);
  auto got = pinned.build(f.pg, {{"tokens", 64}}, EngineConfig{12, {{"k2", 1}}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kPinned);
  EXPECT_EQ(got->plan->config().identity(), "eng12_k2=1");
  EXPECT_EQ(got->why, "pinned: eng12_k2=1 as asked (no store, no heuristics)");
  EXPECT_EQ(f.backend->store_calls.load(), 0);
  EXPECT_EQ(f.backend->heuristic_builds.load(), 0);
}

TEST(PinnedSource, AConfigurationThatDoesNotBuildIsTheError) {
  SourceFixture f;
  f.backend->bad_configs.insert("eng5");
  PinnedSource pinned(*f.state);
  auto got = pinned.build(f.pg, {{"tokens", 64}}, EngineConfig{5, {}});
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find("eng5 does not support this shape"), std::string::npos)
      << got.status().to_string();
}

TEST(PinnedSource, AWrongPlanIsRefusedByTheFirstUseGate) {
  SourceFixture f(PlannerOptions::tools().with_first_use(FirstUse::kVerify));
  f.backend->wrong_configs.insert("eng6");
  PinnedSource pinned(*f.state);
  auto got = pinned.build(f.pg, {{"tokens", 64}}, EngineConfig{6, {}});
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCheckFailed) << got.status().to_string();
}

}  // namespace
}  // namespace kiln
