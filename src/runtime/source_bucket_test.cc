// The bucket source (runtime/plan_sources.h BucketSource) through the Planner, with a fake backend.
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

TEST(Planner, ExactBucketsNeverBorrowAnotherShapesConfiguration) {
  Fixture f;  // every dim exact
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto r = f.planner->obtain(*pg, {{"tokens", 127}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
}

TEST(Planner, NearestTunedShapeInTheBucketAndABadConfigFallsToHeuristics) {
  Fixture f("tokens=ranges:1-1000");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned = {TunedShape{"tokens=10", {{"tokens", 10}}, EngineConfig{1, {}}},
                      TunedShape{"tokens=500", {{"tokens", 500}}, EngineConfig{2, {}}},
                      TunedShape{"tokens=900", {{"tokens", 900}}, EngineConfig{3, {}}}};
  auto r = f.planner->obtain(*pg, {{"tokens", 400}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kBucket);
  EXPECT_EQ(r->plan->config().identity(), "eng2");  // |log(400/500)| is the smallest distance
  f.backend->bad_configs.insert("eng3");
  auto s = f.planner->obtain(*pg, {{"tokens", 950}});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->source, PlanSource::kHeuristics);
  EXPECT_NE(s->why.find("eng3 (tuned for tokens=900) does not build here"), std::string::npos) << s->why;
}

}  // namespace
}  // namespace kiln
