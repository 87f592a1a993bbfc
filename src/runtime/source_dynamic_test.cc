// The dynamic source and the promotions of stopgaps (runtime/plan_sources.h DynamicSource, runtime/promotions.h),
// and the kernel caches a dynamic stopgap leaves, through the Planner with a fake backend.
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

// A new shape: a dynamic-shape stopgap at once, then its bucket's tuned configuration swapped in.
TEST(PlannerStopgap, NewShapeServedByAStopgapThenPromotedToItsBucketsConfiguration) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kDynamic);
  EXPECT_NE(a->why.find("dynamic: a stopgap"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan->built_from(), PlanSource::kBucket);
  EXPECT_EQ(b->plan->config().identity(), "eng41_k2=4");
  EXPECT_NE(b->plan.get(), a->plan.get());
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kDynamic)], 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotion_failures, 0);
  EXPECT_EQ(st.cached, 1);
  EXPECT_EQ(st.builds, 2);  // the stopgap and its static plan
  EXPECT_NE(st.text().find("dynamic 1"), std::string::npos) << st.text();
  EXPECT_NE(st.text().find("0 stopgaps, 1 promoted"), std::string::npos) << st.text();
}

TEST(PlannerStopgap, StoredShapesNeverGetAStopgap) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=64");
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kStore);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
}

TEST(PlannerStopgap, AGraphWithoutDynamicDimsIsBuiltStatically) {
  Fixture f("", NewShapes::kStopgap);
  Graph g = token_graph();
  g.dynamic_dims.clear();
  for (TensorDesc& t : g.tensors)
    for (Dim& d : t.dims) d.symbol.clear();
  auto pg = f.planner->prepare(g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kHeuristics);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
}

TEST(PlannerStopgap, NoDynamicEngineFallsBackToTheStaticBuildAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->dynamic_ok = false;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kBucket);
  EXPECT_NE(a->why.find("dynamic: no engine supports dynamic shapes"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();  // nothing queued: returns at once
  EXPECT_EQ(f.planner->stats().promotions, 0);
  EXPECT_EQ(f.planner->stats().stopgaps, 0);
}

TEST(PlannerStopgap, AFailedPromotionKeepsTheStopgapAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->fail_heuristics = 1;  // no tuned shape: the promotion is a heuristics build, which fails once
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 300}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  f.planner->wait_for_promotions();
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotion_failures, 1);
  EXPECT_EQ(st.stopgaps, 1);
  EXPECT_NE(st.last_promotion_failure.find("cuDNN is busy (injected)"), std::string::npos) << st.last_promotion_failure;
  EXPECT_NE(st.text().find("1 promotions failed"), std::string::npos) << st.text();
  auto b = f.planner->obtain(*pg, {{"tokens", 300}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan.get(), a->plan.get());  // still the stopgap
}

TEST(PlannerStopgap, ManyThreadsOneStopgapAndOnePromotionPerShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 20;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r)
        if (!f.planner->obtain(*pg, {{"tokens", 100 + (i + r) % 4}}).is_ok()) ++errors;
    });
  for (auto& t : threads) t.join();
  f.planner->wait_for_promotions();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 4);
  EXPECT_EQ(f.backend->heuristic_builds.load(), 4);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 4);
  EXPECT_EQ(st.stopgaps, 0);
  for (int t = 100; t < 104; ++t) {
    auto r = f.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->plan->built_from(), PlanSource::kHeuristics) << t;
  }
}

// Destroying a Planner with promotions still queued neither hangs nor touches freed state.
TEST(PlannerStopgap, DestroyedWithPromotionsQueued) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 30;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int t = 200; t < 206; ++t) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", t}}).is_ok());
  const auto t0 = std::chrono::steady_clock::now();
  f.planner.reset();
  // At most the promotion in progress finishes; the five queued behind it are dropped.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Where static builds of a structure take under 5 ms (a precompiled engine), its new shapes are built at
// once; where they are dear, every new shape gets a stopgap.
TEST(PlannerStopgap, AStructureWhoseStaticBuildsAreCheapSkipsTheStopgap) {
  Fixture f("", NewShapes::kStopgap);
  f.backend->dynamic_delay_ms = 40;  // static builds: no delay
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  f.planner->wait_for_promotions();  // its static build, timed: cheap
  auto r = f.planner->obtain(*pg, {{"tokens", 102}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
  EXPECT_NE(r->why.find("dynamic: skipped, static builds of this structure take under 5 ms"), std::string::npos)
      << r->why;
  EXPECT_EQ(f.backend->dynamic_builds.load(), 1);
}

TEST(PlannerStopgap, AStructureWhoseStaticBuildsAreDearKeepsItsStopgaps) {
  Fixture f("", NewShapes::kStopgap);
  f.backend->build_delay_ms = 20;  // every build, static ones included, costs 20 ms
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int t : {100, 101, 102}) {
    auto r = f.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->source, PlanSource::kDynamic) << t;
    f.planner->wait_for_promotions();
  }
}

TEST(PlannerStopgap, PromotionOffKeepsStopgapsAndCountsThem) {
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  PlannerOptions o;
  o.promote = false;
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 70}}).is_ok());
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 71}}).is_ok());
  planner->wait_for_promotions();
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.stopgaps, 2);
  EXPECT_EQ(st.promotions, 0);
  EXPECT_EQ(backend->heuristic_builds.load(), 0);
  auto again = planner->obtain(*pg, {{"tokens", 70}});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->plan->built_from(), PlanSource::kDynamic);
}

// A backend that counts the kernel caches it is asked to keep (the cuDNN backend writes them to the store).
class KernelCacheBackend : public FakeBackend {
 public:
  std::mutex kc_mu;
  std::vector<std::string> saved;  // graph names, in order
  bool save_fails = false;
  Status save_kernel_cache(const GraphSignature& sig, const std::string& graph_name) override {
    std::lock_guard<std::mutex> lock(kc_mu);
    if (save_fails) return unavailable("the store is busy (injected)");
    saved.push_back(graph_name + "/" + sig.structure);
    return Status::ok();
  }
  KernelCacheCounts kernel_cache_counts() const override {
    KernelCacheCounts k;
    k.loaded = 1;
    k.saved = 2;
    k.last_note = "a note (injected)";
    return k;
  }
};

std::unique_ptr<Planner> kernel_cache_planner(KernelCacheBackend** backend, bool save, bool promote = true) {
  auto b = std::make_unique<KernelCacheBackend>();
  *backend = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kStopgap;
  o.save_kernel_caches = save;
  o.promote = promote;
  return Planner::create_with_backend(std::move(b), o);
}

TEST(PlannerKernelCaches, ADynamicStopgapsKernelCacheIsKeptAfterItsPromotionWhenAsked) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/true);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->source, PlanSource::kDynamic);
  planner->wait_for_promotions();
  {
    std::lock_guard<std::mutex> lock(b->kc_mu);
    ASSERT_EQ(b->saved.size(), 1u);
    EXPECT_EQ(b->saved[0], token_graph().name + "/" + pg->signature.structure);
  }
  // A shape served from memory compiles nothing: nothing more to keep.
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  planner->wait_for_promotions();
  EXPECT_EQ(b->saved.size(), 1u);
  // The stats carry the backend's counts and its last problem.
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.kernel_caches_loaded, 1);
  EXPECT_EQ(st.kernel_caches_saved, 2);
  EXPECT_NE(st.text().find("kernel caches: 1 loaded, 2 kept (last problem: a note (injected))"), std::string::npos)
      << st.text();
  // save_kernel_caches() asks again for every structure a dynamic stopgap was built for.
  EXPECT_TRUE(planner->save_kernel_caches().is_ok());
  EXPECT_EQ(b->saved.size(), 2u);
  b->save_fails = true;
  Status failed = planner->save_kernel_caches();
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.message().find("the store is busy"), std::string::npos) << failed.message();
}

TEST(PlannerKernelCaches, NothingIsKeptUnlessAsked) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/false);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 100}})->source, PlanSource::kDynamic);
  planner->wait_for_promotions();
  EXPECT_TRUE(b->saved.empty());
  Status st = planner->save_kernel_caches();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("save_kernel_caches is off"), std::string::npos) << st.message();
}

TEST(PlannerKernelCaches, WithoutPromotionsTheCallerKeepsThemWithSaveKernelCaches) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/true, /*promote=*/false);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 100}})->source, PlanSource::kDynamic);
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 200}})->source, PlanSource::kDynamic);
  EXPECT_TRUE(b->saved.empty());  // no promotion: nothing kept on its own
  EXPECT_TRUE(planner->save_kernel_caches().is_ok());
  EXPECT_EQ(b->saved.size(), 1u);  // one structure, one cache
}

}  // namespace
}  // namespace kiln
