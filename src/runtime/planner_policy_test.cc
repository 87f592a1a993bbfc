// kiln::Planner on the host, with a fake backend: what obtain() does when the store cannot serve a key
// (PlannerOptions::policy.on_mismatch: queue, re-tune now, fail), pinned plans (obtain_pinned) and graphs
// cuDNN cannot fuse whole (run as their segments). What `kiln run` relies on (kiln/tools/runner.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/graph/decompose.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "runtime/planner_test_util.h"

namespace kiln {
namespace {

class NullExecutor : public PlanExecutor {
 public:
  Status run(cudaStream_t, const std::map<int, void*>&, void*) const override { return Status::ok(); }
};

std::shared_ptr<const ExecutablePlan> plan(const Graph& g, const GraphSignature& sig, int64_t engine,
                                           PlanSource source) {
  return std::make_shared<ExecutablePlan>(g, sig, EngineConfig{engine, {}}, 0, source,
                                          std::make_unique<NullExecutor>());
}

// A store that answers every key with `miss` (or fails with `store_error`), and records what the Planner
// asks of it.
class PolicyBackend : public PlanBackend {
 public:
  std::string miss = "miss";
  Status store_error;  // returned by from_store when set
  std::set<std::string> stored;
  std::mutex mu;
  std::vector<std::string> queued;  // the reasons queue_retune was given
  std::atomic<int> tunes{0}, builds{0}, segment_queries{0};
  bool tune_finds_none = false;
  std::set<int64_t> unbuildable;             // engine ids whose pinned build fails
  std::chrono::milliseconds build_delay{0};  // each build takes this long (concurrent callers overlap it)
  PromotionTuning last_tuning;
  bool split = false;                // segments(): the graph's parts (decompose_graph), as if cuDNN could not fuse it
  std::set<std::string> stale_keys;  // shape keys whose record is stale under kFail (FailedPrecondition)
  std::vector<TunedShape> tuned;     // tuned_shapes(): these, each served by from_store

  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    if (!store_error.is_ok()) return store_error;
    if (stale_keys.count(sig.shape_key))
      return failed_precondition("stored plan for " + sig.shape_key + " is stale: cudnn_version (injected)");
    if (stored.count(g.name)) return plan(g, sig, 7, PlanSource::kStore);
    for (const TunedShape& t : tuned)
      if (t.shape_key == sig.shape_key) return plan(g, sig, 7, PlanSource::kStore);
    *why = miss;
    return std::shared_ptr<const ExecutablePlan>();
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return tuned; }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan&) override {
    return FirstUseVerdict{true, true, "fake plan: nothing to compute"};
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    ++builds;
    if (build_delay.count() > 0) std::this_thread::sleep_for(build_delay);
    if (config && unbuildable.count(config->engine_id))
      return not_supported("engine " + config->identity() + " does not support this graph (injected)");
    return plan(g, sig, config ? config->engine_id : 1, source);
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> tune(const Graph& g, const GraphSignature& sig,
                                                       const PromotionTuning& t, const std::atomic<bool>*,
                                                       std::string* why) override {
    ++tunes;
    last_tuning = t;
    if (tune_finds_none) {
      *why = "no correct candidate of 3 (injected)";
      return std::shared_ptr<const ExecutablePlan>();
    }
    return plan(g, sig, 42, PlanSource::kTuned);
  }
  void queue_retune(const Graph&, const GraphSignature&, const std::string& why_missed, std::string* note) override {
    std::lock_guard<std::mutex> lock(mu);
    queued.push_back(why_missed);
    *note =
        "queued for re-tune (requested " + std::to_string(queued.size()) + " time" + (queued.size() == 1 ? ")" : "s)");
  }
  StatusOr<SegmentDecision> segments(const Graph& g) override {
    ++segment_queries;
    SegmentDecision d;
    if (!split || g.nodes.size() < 2) return d;
    KILN_ASSIGN_OR_RETURN(d.segments, decompose_graph(g, DataType::kFloat16));
    d.why = "cuDNN offers no engine configuration for the whole graph (injected)";
    return d;
  }
};

struct Fixture {
  PolicyBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
};

Fixture make(MismatchPolicy policy, bool with_store = true, bool writable = true) {
  auto b = std::make_unique<PolicyBackend>();
  Fixture f;
  f.backend = b.get();
  PlannerOptions o;
  if (with_store) o.store_path = "/nonexistent/plans.db";  // the fake never opens it
  o.store_writable = writable;
  o.policy.on_mismatch = policy;
  o.new_shapes = NewShapes::kBuildNow;
  o.tuning.time_budget_s = 3;
  o.tuning.top_k = 5;
  o.tuning.candidate_budget_ms = 20;
  f.planner = Planner::create_with_backend(std::move(b), o);
  return f;
}

// The token graph with its token count fixed (no dynamic dims).
Graph static_graph() {
  auto g = parse_spec_string(R"({"name": "mlp_static", "io_dtype": "fp16",
    "tensors": {"x": {"dims": [1, 64, 128]}, "w": {"dims": [1, 128, 256]}, "b": {"dims": [1, 1, 256]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
              {"name": "bias", "op": "bias_add", "inputs": ["h", "b"], "outputs": ["hb"]},
              {"name": "gelu", "op": "gelu_tanh", "inputs": ["hb"], "outputs": ["y"]}],
    "outputs": ["y"]})",
                             "mlp_static.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

TEST(PlannerPolicy, AStaticGraphsMissIsQueuedAndServedByHeuristics) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue);
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kHeuristics);
  EXPECT_NE(got->why.find("store: miss"), std::string::npos) << got->why;
  EXPECT_NE(got->why.find("queued for re-tune (requested 1 time)"), std::string::npos) << got->why;
  ASSERT_EQ(f.backend->queued.size(), 1u);
  EXPECT_EQ(f.backend->queued[0], "miss");
  EXPECT_EQ(f.backend->tunes, 0);
  // The next call is a hit: nothing is queued again.
  auto again = f.planner->obtain(static_graph());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->source, PlanSource::kMemory);
  EXPECT_EQ(f.backend->queued.size(), 1u);
}

TEST(PlannerPolicy, ADynamicGraphsNewShapeIsNotAMismatchButAStaleRecordIs) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue);
  auto pg = f.planner->prepare(token_graph(64));
  ASSERT_TRUE(pg.is_ok());
  // At its own dims (what kiln run obtains, what kiln tune SPEC tunes) a miss is queued.
  auto own = f.planner->obtain(*pg);
  ASSERT_TRUE(own.is_ok()) << own.status().to_string();
  ASSERT_EQ(f.backend->queued.size(), 1u) << own->why;
  f.backend->queued.clear();
  auto got = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_TRUE(f.backend->queued.empty()) << got->why;
  EXPECT_EQ(got->why.find("queued"), std::string::npos) << got->why;

  f.backend->miss = "stale: cudnn_version: recorded 9.14.0, current 9.19.0 (must match)";
  got = f.planner->obtain(*pg, {{"tokens", 200}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(f.backend->queued.size(), 1u) << got->why;
  EXPECT_EQ(f.backend->queued[0], f.backend->miss);
  EXPECT_NE(got->why.find("queued for re-tune"), std::string::npos) << got->why;
}

TEST(PlannerPolicy, WithoutAStoreNothingIsQueuedOrTuned) {
  for (MismatchPolicy p : {MismatchPolicy::kHeuristicsAndQueue, MismatchPolicy::kRetune, MismatchPolicy::kFail}) {
    Fixture f = make(p, /*with_store=*/false);
    auto got = f.planner->obtain(static_graph());
    ASSERT_TRUE(got.is_ok()) << mismatch_policy_name(p) << ": " << got.status().to_string();
    EXPECT_EQ(got->source, PlanSource::kHeuristics) << mismatch_policy_name(p);
    EXPECT_TRUE(f.backend->queued.empty()) << mismatch_policy_name(p);
    EXPECT_EQ(f.backend->tunes, 0) << mismatch_policy_name(p);
  }
}

TEST(PlannerPolicy, RetuneTunesNowWithTheTuningBoundsAndServesTheWinner) {
  Fixture f = make(MismatchPolicy::kRetune);
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kTuned);
  EXPECT_EQ(got->plan->config().engine_id, 42);
  EXPECT_NE(got->why.find("re-tuned now: eng42"), std::string::npos) << got->why;
  EXPECT_NE(got->why.find("stored in /nonexistent/plans.db"), std::string::npos) << got->why;
  EXPECT_EQ(f.backend->tunes, 1);
  EXPECT_TRUE(f.backend->last_tuning.store);  // a writable store keeps the winner
  EXPECT_EQ(f.backend->last_tuning.top_k, 5);
  EXPECT_EQ(f.backend->last_tuning.candidate_budget_ms, 20);
  EXPECT_TRUE(f.backend->queued.empty());  // kRetune never queues
  EXPECT_EQ(f.planner->stats().served[static_cast<int>(PlanSource::kTuned)], 1);
  // Held: the next call is a hit, not another tune.
  auto again = f.planner->obtain(static_graph());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->source, PlanSource::kMemory);
  EXPECT_EQ(f.backend->tunes, 1);
}

TEST(PlannerPolicy, RetuneOnAReadOnlyStoreSaysTheWinnerIsNotStored) {
  Fixture f = make(MismatchPolicy::kRetune, true, /*writable=*/false);
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kTuned);
  EXPECT_FALSE(f.backend->last_tuning.store);
  EXPECT_NE(got->why.find("tuned plan not stored"), std::string::npos) << got->why;
}

TEST(PlannerPolicy, ARetuneWithoutAWinnerFallsThroughToHeuristicsAndSaysWhy) {
  Fixture f = make(MismatchPolicy::kRetune);
  f.backend->tune_finds_none = true;
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kHeuristics);
  EXPECT_NE(got->why.find("re-tune failed, the next sources serve: no correct candidate of 3 (injected)"),
            std::string::npos)
      << got->why;
}

TEST(PlannerPolicy, FailRefusesAStaleRecordButAMissStillBuilds) {
  Fixture f = make(MismatchPolicy::kFail);
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kHeuristics);

  Fixture g = make(MismatchPolicy::kFail);
  g.backend->store_error = failed_precondition("stored plan is stale: cudnn_version: recorded 9.14.0 (injected)");
  auto refused = g.planner->obtain(static_graph());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("cudnn_version: recorded 9.14.0"), std::string::npos)
      << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("mismatch policy: fail"), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ(g.planner->stats().failures, 1);

  // Under the other policies a store that cannot be read is a miss, as before.
  Fixture h = make(MismatchPolicy::kHeuristicsAndQueue);
  h.backend->store_error = unavailable("database is locked (injected)");
  auto served = h.planner->obtain(static_graph());
  ASSERT_TRUE(served.is_ok()) << served.status().to_string();
  EXPECT_EQ(served->source, PlanSource::kHeuristics);
  EXPECT_NE(served->why.find("database is locked"), std::string::npos) << served->why;
}

TEST(PlannerPolicy, APinnedPlanIsBuiltAsAskedAndHeldUnderItsOwnKey) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue);
  auto pg = f.planner->prepare(static_graph());
  ASSERT_TRUE(pg.is_ok());
  auto pinned = f.planner->obtain_pinned(*pg, EngineConfig{12, {{"k2", 1}}});
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
  EXPECT_EQ(pinned->source, PlanSource::kPinned);
  EXPECT_EQ(pinned->plan->config().engine_id, 12);
  EXPECT_EQ(pinned->plan->built_from(), PlanSource::kPinned);
  EXPECT_TRUE(f.backend->queued.empty());  // the store is not asked
  auto again = f.planner->obtain_pinned(*pg, EngineConfig{12, {{"k2", 1}}});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->source, PlanSource::kMemory);
  EXPECT_EQ(again->plan, pinned->plan);
  // The graph's own plan is another entry.
  auto own = f.planner->obtain(*pg);
  ASSERT_TRUE(own.is_ok());
  EXPECT_EQ(own->source, PlanSource::kHeuristics);
  EXPECT_NE(own->plan, pinned->plan);
  // A configuration that does not build is the build's error, not cached.
  f.backend->unbuildable.insert(13);
  auto bad = f.planner->obtain_pinned(*pg, EngineConfig{13, {}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("eng13 does not support this graph"), std::string::npos)
      << bad.status().to_string();
  EXPECT_EQ(f.planner->stats().failures, 1);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kPinned)], 1);
  EXPECT_NE(st.text().find("pinned 1"), std::string::npos) << st.text();
}

// Single flight holds for pinned plans too: 16 threads asking at once for one pinned configuration get one
// build and the same plan; one of them is told it was built as pinned, the others that they waited or hit.
TEST(PlannerPolicy, ConcurrentPinnedCallsBuildOnce) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue);
  f.backend->build_delay = std::chrono::milliseconds(50);
  auto pg = f.planner->prepare(static_graph());
  ASSERT_TRUE(pg.is_ok());
  constexpr int kThreads = 16;
  std::vector<StatusOr<Obtained>> got(kThreads, StatusOr<Obtained>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { got[i] = f.planner->obtain_pinned(*pg, EngineConfig{12, {{"k2", 1}}}); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f.backend->builds.load(), 1);
  int pinned = 0;
  for (const auto& g : got) {
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->plan, got[0]->plan);
    if (g->source == PlanSource::kPinned) ++pinned;
    else EXPECT_EQ(g->source, PlanSource::kMemory);
  }
  EXPECT_EQ(pinned, 1);
  // A failing pinned build is handed to every waiter and not cached: the next call builds again.
  f.backend->unbuildable.insert(13);
  std::vector<StatusOr<Obtained>> bad(4, StatusOr<Obtained>(internal_error("not run")));
  threads.clear();
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { bad[i] = f.planner->obtain_pinned(*pg, EngineConfig{13, {}}); });
  for (std::thread& t : threads) t.join();
  for (const auto& b : bad) EXPECT_FALSE(b.is_ok());
  EXPECT_LE(f.backend->builds.load(), 5);
  const int before = f.backend->builds.load();
  EXPECT_FALSE(f.planner->obtain_pinned(*pg, EngineConfig{13, {}}).is_ok());
  EXPECT_EQ(f.backend->builds.load(), before + 1);
}

TEST(PlannerPolicy, AGraphCuDnnCannotFuseRunsAsItsSegmentsEachObtainedOnItsOwn) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue, /*with_store=*/false);
  f.backend->split = true;
  auto got = f.planner->obtain(static_graph());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kSegments);
  ASSERT_GE(got->plan->parts().size(), 2u);
  for (const auto& part : got->plan->parts()) EXPECT_EQ(part->built_from(), PlanSource::kHeuristics);
  EXPECT_EQ(got->plan->identity().rfind("segments[", 0), 0u) << got->plan->identity();
  EXPECT_NE(got->why.find("whole graph not fusable (cuDNN offers no engine configuration for the whole graph "
                          "(injected)): runs as "),
            std::string::npos)
      << got->why;
  // Bound by the whole graph's own inputs and outputs.
  EXPECT_TRUE(got->plan->tensor_bytes("x").is_ok());
  EXPECT_TRUE(got->plan->tensor_bytes("y").is_ok());
  EXPECT_FALSE(got->plan->tensor_bytes("h").is_ok());  // crosses between parts: in the workspace
  EXPECT_GT(got->plan->workspace_bytes(), 0);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kSegments)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kHeuristics)], 0);  // the segments are the chain's, not served
}

// A segment is never a stopgap (the chain is held whole and not promoted); the store's missing segments are queued at
// the graph's own shape only.
TEST(PlannerPolicy, ADynamicGraphsSegmentsAreStaticPlansAtEveryShapeAndQueuedAtItsOwnShapeOnly) {
  PlannerOptions o;  // stopgaps on (the default), a store
  auto b = std::make_unique<PolicyBackend>();
  PolicyBackend* backend = b.get();
  backend->split = true;
  o.store_path = "/nonexistent/plans.db";
  o.store_writable = true;
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph(64));
  ASSERT_TRUE(pg.is_ok());
  size_t own_parts = 0;
  for (int64_t t : {64, 100, 300}) {
    auto got = planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->source, PlanSource::kSegments);
    for (const auto& part : got->plan->parts()) EXPECT_FALSE(plan_source_is_stopgap(part->built_from()));
    if (t == 64) own_parts = got->plan->parts().size();
  }
  // The own shape's segments queued (the store has none), once each; the other shapes' are the recorder's.
  ASSERT_FALSE(backend->queued.empty());
  for (const std::string& q : backend->queued) EXPECT_NE(q.find("a segment of graph"), std::string::npos) << q;
  EXPECT_EQ(backend->queued.size(), own_parts) << "segments queued at shapes other than the graph's own";
}

TEST(PlannerPolicy, AGraphCuDnnFusesIsAskedAboutOncePerStructure) {
  Fixture f = make(MismatchPolicy::kHeuristicsAndQueue, /*with_store=*/false);
  auto pg = f.planner->prepare(token_graph(64));
  ASSERT_TRUE(pg.is_ok());
  for (int64_t t : {64, 100, 300}) {
    auto got = f.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_NE(got->source, PlanSource::kSegments);
  }
  EXPECT_EQ(f.backend->segment_queries, 1);
}

// Under kFail a stale record is never replaced by a build behind the caller's back: a padded stopgap whose
// shape has a stale record keeps serving (a current plan of a larger shape), and its promotion fails, saying why.
TEST(PlannerPolicy, FailHoldsForAPaddedShapesPromotionToo) {
  auto b = std::make_unique<PolicyBackend>();
  PolicyBackend* backend = b.get();
  backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{7, {}}});
  backend->stale_keys.insert("tokens=100");
  PlannerOptions o;
  o.store_path = "/nonexistent/plans.db";
  o.policy.on_mismatch = MismatchPolicy::kFail;
  auto bp = BucketPolicy::parse("tokens=pow2");
  ASSERT_TRUE(bp.is_ok());
  o.buckets = *bp;
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph(64));
  ASSERT_TRUE(pg.is_ok());
  auto got = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(got->source, PlanSource::kPadded) << got->why;
  planner->wait_for_promotions();
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.promotions, 0) << st.text();
  EXPECT_EQ(st.promotion_failures, 1) << st.text();
  EXPECT_NE(st.last_promotion_failure.find("mismatch policy: fail"), std::string::npos) << st.text();
  auto again = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->plan, got->plan);  // still the stopgap, not a build
  EXPECT_EQ(backend->builds, 0);
}

}  // namespace
}  // namespace kiln
