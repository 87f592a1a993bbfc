// kiln::Planner on the host, with a fake backend: the walk of the chain of sources, single flight, failures not
// cached, shapes at other dynamic values, and the options check.
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

TEST(Planner, SourcesInOrderMemoryStoreBucketHeuristics) {
  Fixture f("tokens=pow2");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  f.backend->stored.insert("tokens=64");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  // The graph's own shape: in the store.
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kStore);
  // Again: memory, the same plan object.
  auto b = f.planner->obtain(*pg);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan.get(), a->plan.get());
  // 100 tokens: not stored; in the bucket 65-128 of the tuned 128: its configuration, built for 100.
  auto c = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->source, PlanSource::kBucket);
  EXPECT_EQ(c->plan->config().identity(), "eng41_k2=4");
  EXPECT_EQ(c->plan->graph().dynamic_dims.at("tokens"), 100);
  EXPECT_EQ(c->plan->signature().shape_key, "tokens=100");
  EXPECT_NE(c->why.find("tuned for tokens=128"), std::string::npos) << c->why;
  // 1000 tokens: bucket 513-1024 has no tuned shape: heuristics, and why says so.
  auto d = f.planner->obtain(*pg, {{"tokens", 1000}});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->source, PlanSource::kHeuristics);
  EXPECT_NE(d->why.find("bucket tokens=513-1024: no tuned shape"), std::string::npos) << d->why;
  EXPECT_NE(d->why.find("store: miss"), std::string::npos) << d->why;
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kStore)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kMemory)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kBucket)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kHeuristics)], 1);
  EXPECT_EQ(st.builds, 3);
  EXPECT_EQ(st.cached, 3);
}

TEST(Planner, ConcurrentMissesForOneKeyBuildOnce) {
  Fixture f;
  f.backend->build_delay_ms = 50;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  constexpr int kThreads = 32;
  std::vector<std::thread> threads;
  std::vector<const ExecutablePlan*> got(kThreads, nullptr);
  std::atomic<int> errors{0};
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      // Half the threads ask for 64 tokens, half for 96: two keys, each built once.
      auto r = f.planner->obtain(*pg, {{"tokens", i % 2 ? 96 : 64}});
      if (!r.is_ok()) {
        ++errors;
        return;
      }
      got[static_cast<size_t>(i)] = r->plan.get();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(f.backend->heuristic_builds.load(), 2);
  EXPECT_EQ(f.backend->store_calls.load(), 2);
  for (int i = 2; i < kThreads; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], got[static_cast<size_t>(i % 2)]) << i;
  EXPECT_NE(got[0], got[1]);
  const PlannerStats st = f.planner->stats();
  int64_t total = 0;
  for (int64_t n : st.served) total += n;
  EXPECT_EQ(total, kThreads);
  EXPECT_EQ(st.builds, 2);
}

TEST(Planner, AFailureIsReturnedToEveryWaiterAndNotCached) {
  Fixture f;
  f.backend->fail_heuristics = 1;
  f.backend->build_delay_ms = 30;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      auto r = f.planner->obtain(*pg);
      if (!r.is_ok()) {
        ++failed;
        EXPECT_NE(r.status().message().find("cuDNN is busy (injected)"), std::string::npos) << r.status().to_string();
        EXPECT_NE(r.status().message().find("graph 'mlp'"), std::string::npos) << r.status().to_string();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_GE(failed.load(), 1);
  // The next call builds again (the failure was not cached) and succeeds.
  auto r = f.planner->obtain(*pg);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
  EXPECT_GE(f.planner->stats().failures, 1);
}

// Two graphs of one structure whose tensors are named differently: each gets a plan bound by its own names.
TEST(Planner, SameStructureOtherNamesGetTheirOwnPlan) {
  Fixture f;
  Graph a = token_graph(64), b = token_graph(64);
  b.tensors[static_cast<size_t>(b.find_tensor("x"))].name = "activations";
  auto pa = f.planner->prepare(a), pb = f.planner->prepare(b);
  ASSERT_TRUE(pa.is_ok() && pb.is_ok());
  ASSERT_EQ(pa->signature.structure, pb->signature.structure);
  auto ra = f.planner->obtain(*pa), rb = f.planner->obtain(*pb);
  ASSERT_TRUE(ra.is_ok() && rb.is_ok());
  EXPECT_NE(ra->plan.get(), rb->plan.get());
  EXPECT_TRUE(rb->plan->tensor_bytes("activations").is_ok());
  EXPECT_FALSE(rb->plan->tensor_bytes("x").is_ok());
}

TEST(Planner, ShapesNamingOtherSymbolsOrBadValuesAreRefused) {
  Fixture f;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto r = f.planner->obtain(*pg, {{"batch", 4}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not name exactly its dynamic dims (tokens)"), std::string::npos)
      << r.status().to_string();
  r = f.planner->obtain(*pg, {{"tokens", 0}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'tokens' = 0: must be >= 1"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(f.backend->builds.load(), 0);  // nothing was built for a bad request
}

// obtain_held: a memory hit or nothing; it never builds, so a caller holding its own lock (the GIL) may call it.
TEST(Planner, ObtainHeldAnswersOnlyFromMemory) {
  Fixture f;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  EXPECT_FALSE(f.planner->obtain_held(*pg, {{"tokens", 32}}).has_value());
  EXPECT_FALSE(f.planner->obtain_held(*pg, {{"batch", 32}}).has_value());  // a bad shape: obtain() says why
  EXPECT_EQ(f.backend->builds.load(), 0);
  auto built = f.planner->obtain(*pg, {{"tokens", 32}});
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  auto held = f.planner->obtain_held(*pg, {{"tokens", 32}});
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->source, PlanSource::kMemory);
  EXPECT_EQ(held->plan.get(), built->plan.get());
  EXPECT_FALSE(f.planner->obtain_held(*pg, {{"tokens", 33}}).has_value());  // another shape is another plan
  EXPECT_EQ(f.backend->builds.load(), 1);
  EXPECT_EQ(f.planner->stats().served[static_cast<int>(PlanSource::kMemory)], 1);  // counted as obtain() counts
}

// Promotion bounds that cannot hold are refused by create(), before any GPU is looked for.
TEST(PlannerOptionsCheck, PromotionTuningOutOfRangeIsRefusedNamingTheField) {
  auto refused = [](PlannerOptions o, const std::string& expect) {
    auto p = Planner::create(o);
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().to_string();
    EXPECT_NE(p.status().message().find(expect), std::string::npos) << p.status().message();
  };
  PlannerOptions o;
  o.tuning.top_k = -1;
  refused(o, "PromotionTuning::top_k must be >= 0, got -1");
  o = PlannerOptions{};
  o.tuning.time_budget_s = std::numeric_limits<double>::quiet_NaN();
  refused(o, "PromotionTuning::time_budget_s must be finite and >= 0");
  o.tuning.time_budget_s = -1;
  refused(o, "PromotionTuning::time_budget_s must be finite and >= 0");
  o = PlannerOptions{};
  o.tuning.build_threads = 0;
  refused(o, "PromotionTuning::build_threads must be >= 1, got 0");
  o = PlannerOptions{};
  o.promote_by = PromoteBy::kTune;
  o.tuning.store = true;
  refused(o, "PromotionTuning::store needs a store: set PlannerOptions::store_path");
}

}  // namespace
}  // namespace kiln
