// The memory source (runtime/plan_cache.h): keys, holding, replacing a stopgap, forgetting a structure, and single
// flight.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::Built;
using runtime_detail::PlanCache;

std::shared_ptr<const ExecutablePlan> plan_of(const PreparedGraph& pg, PlanSource source) {
  return std::make_shared<ExecutablePlan>(*pg.graph, pg.signature, EngineConfig{3, {}}, 0, source,
                                          std::make_unique<RecordingExecutor>(nullptr));
}

TEST(PlanCache, KeysDifferByShapeAndNamesNotBySymbolOrder) {
  SourceFixture f;
  const std::string a = PlanCache::key(f.pg, {{"tokens", 64}});
  EXPECT_NE(a, PlanCache::key(f.pg, {{"tokens", 65}}));
  PreparedGraph renamed = f.pg;
  renamed.names_key += "x";
  EXPECT_NE(a, PlanCache::key(renamed, {{"tokens", 64}}));
  EXPECT_EQ(a.rfind(f.pg.signature.structure + "|", 0), 0u) << a;  // forget() drops by this prefix
}

TEST(PlanCache, HoldsOnceAndNotAcrossAGeneration) {
  SourceFixture f;
  PlanCache c;
  const uint64_t g0 = c.generation();
  bool inserted = false;
  auto first = plan_of(f.pg, PlanSource::kHeuristics);
  EXPECT_EQ(c.hold("k", first, g0, &inserted), first);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(c.hold("k", plan_of(f.pg, PlanSource::kBucket), g0, &inserted), first);  // the one held stays
  EXPECT_FALSE(inserted);
  EXPECT_EQ(c.find("k"), first);
  EXPECT_EQ(c.held(), 1);
  c.forget("another-structure");  // bumps the generation, drops nothing here
  EXPECT_EQ(c.held(), 1);
  EXPECT_EQ(c.hold("k2", plan_of(f.pg, PlanSource::kHeuristics), g0, &inserted), nullptr);  // stale: not held
  EXPECT_FALSE(inserted);
  EXPECT_NE(c.hold("k3", plan_of(f.pg, PlanSource::kStore), PlanCache::kAnyGeneration), nullptr);
}

TEST(PlanCache, APromotionReplacesOnlyItsOwnStopgapAndForgetDropsTheStructure) {
  SourceFixture f;
  PlanCache c;
  const std::string key = PlanCache::key(f.pg, {{"tokens", 64}});
  auto stopgap = plan_of(f.pg, PlanSource::kPadded);
  c.hold(key, stopgap, c.generation());
  EXPECT_EQ(c.stopgaps(), 1);
  auto other = plan_of(f.pg, PlanSource::kDynamic);
  EXPECT_FALSE(c.replace(key, other, plan_of(f.pg, PlanSource::kBucket), c.generation()));  // not what is held
  EXPECT_FALSE(c.replace(key, stopgap, plan_of(f.pg, PlanSource::kBucket), c.generation() + 1));
  EXPECT_EQ(c.stopgaps(), 1);
  auto promoted = plan_of(f.pg, PlanSource::kBucket);
  EXPECT_TRUE(c.replace(key, stopgap, promoted, c.generation()));
  EXPECT_EQ(c.find(key), promoted);
  EXPECT_EQ(c.stopgaps(), 0);
  c.hold(PlanCache::key(f.pg, {{"tokens", 8}}), plan_of(f.pg, PlanSource::kSplit), c.generation());
  EXPECT_EQ(c.held(), 2);
  EXPECT_EQ(c.stopgaps(), 1);
  c.forget(f.pg.signature.structure);
  EXPECT_EQ(c.held(), 0);
  EXPECT_EQ(c.stopgaps(), 0);
  EXPECT_EQ(c.find(key), nullptr);
}

// A chain of parts (segments, an unfused chain) is held under the whole graph's key: a new plan for one of its parts'
// structures (a notice, a job's store) drops the chain too, and leaves a plan unrelated to it.
TEST(PlanCache, ForgettingAPartsStructureDropsTheChainsThatRunIt) {
  SourceFixture f;
  PlanCache c;
  GraphSignature part_sig = f.pg.signature;
  part_sig.structure = "part-structure";
  auto part = std::make_shared<ExecutablePlan>(*f.pg.graph, part_sig, EngineConfig{3, {}}, 0, PlanSource::kHeuristics,
                                               std::make_unique<RecordingExecutor>(nullptr));
  auto chain = std::make_shared<ExecutablePlan>(*f.pg.graph, f.pg.signature, EngineConfig{3, {}}, 0,
                                                PlanSource::kSegments, std::make_unique<RecordingExecutor>(nullptr));
  chain->set_parts({part});
  const std::string key = PlanCache::key(f.pg, {{"tokens", 64}});
  c.hold(key, chain, c.generation());
  c.hold(PlanCache::key(f.pg, {{"tokens", 32}}), plan_of(f.pg, PlanSource::kStore), c.generation());
  c.forget("another-structure");
  EXPECT_EQ(c.held(), 2);
  c.forget("part-structure");
  EXPECT_EQ(c.held(), 1);
  EXPECT_EQ(c.find(key), nullptr) << "the chain running the part's old plan is still held";
  EXPECT_NE(c.find(PlanCache::key(f.pg, {{"tokens", 32}})), nullptr);
}

TEST(PlanCache, SingleFlightBuildsOnceForManyCallers) {
  SourceFixture f;
  PlanCache c;
  std::atomic<int> makes{0}, leaders{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&] {
      bool leader = false;
      std::shared_ptr<const ExecutablePlan> held;
      StatusOr<Built> r = c.single_flight(
          "k",
          [&]() -> StatusOr<Built> {
            ++makes;
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            Built b;
            b.plan = plan_of(f.pg, PlanSource::kHeuristics);
            c.hold("k", b.plan, PlanCache::kAnyGeneration);
            return b;
          },
          &leader, &held);
      EXPECT_TRUE(r.is_ok());
      EXPECT_TRUE(held || (r.is_ok() && r->plan));
      if (leader) ++leaders;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(makes.load(), 1);
  EXPECT_EQ(leaders.load(), 1);
}

TEST(PlanCache, AFailureReachesTheWaitersAndIsNotKept) {
  PlanCache c;
  bool leader = false;
  std::shared_ptr<const ExecutablePlan> held;
  StatusOr<Built> r = c.single_flight(
      "k", [] { return StatusOr<Built>(unavailable("busy (injected)")); }, &leader, &held);
  EXPECT_FALSE(r.is_ok());
  EXPECT_TRUE(leader);
  EXPECT_EQ(c.find("k"), nullptr);
  int again = 0;
  r = c.single_flight(
      "k",
      [&] {
        ++again;
        return StatusOr<Built>(unavailable("still busy"));
      },
      &leader, &held);
  EXPECT_EQ(again, 1);  // asked again: the failure was not kept
}

}  // namespace
}  // namespace kiln
