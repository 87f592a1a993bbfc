// The Planner's jobs on the host (kiln/runtime/planner_jobs.h, kiln/runtime/plan_keeping.h): keep_plan's companions and
// error policy, tune_and_store's incumbent, skip, partial and memory rules over a fake backend and tuner,
// and the deviceless compile() against the built-in H200 profile with the real cuDNN backend.
#include <gtest/gtest.h>

#include "kiln/core/engine_config.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "kiln/graph/decompose.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/workshop.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/runtime/retune.h"
#include "kiln/spec/spec.h"
#include "runtime/planner_test_util.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::TempDir;

// Runs nothing; counts its runs by the graph's name (an unfused chain runs its parts in order).
class NullExecutor : public PlanExecutor {
 public:
  NullExecutor(std::string name = "", std::shared_ptr<std::vector<std::string>> runs = nullptr)
      : name_(std::move(name)), runs_(std::move(runs)) {}
  Status run(cudaStream_t, const std::map<int, void*>&, void*) const override {
    if (runs_) runs_->push_back(name_);
    return Status::ok();
  }

 private:
  std::string name_;
  std::shared_ptr<std::vector<std::string>> runs_;
};

// Plans from a real store (the record's engine id as the plan's configuration) and from "heuristics".
class StoreBackedFake : public PlanBackend {
 public:
  explicit StoreBackedFake(std::string path) : path_(std::move(path)) {}
  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    std::lock_guard<std::mutex> lock(mu_);
    KILN_RETURN_IF_ERROR(open());
    KILN_ASSIGN_OR_RETURN(LookupResult look, store_->get(sig.structure, sig.shape_key, store_test::h200()));
    if (!look.runnable() || !look.record) {
      *why = lookup_outcome_name(look.outcome);
      return std::shared_ptr<const ExecutablePlan>();
    }
    return plan(g, sig, EngineConfig{look.record->engine_id, {}}, PlanSource::kStore);
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return tuned; }
  std::vector<TunedShape> tuned;  // what the store says was tuned for the structure (the candidate budget's priors)
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan&) override {
    return FirstUseVerdict{true, true, "fake plan: nothing to compute"};
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& c, PlanSource s) override {
    if (s != PlanSource::kDynamic && static_build_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(static_build_ms));
    return plan(g, sig, c ? *c : EngineConfig{1, {}}, s);
  }
  StatusOr<EnvFingerprint> environment() const override { return store_test::h200(); }
  StatusOr<std::optional<FusionRecord>> fusion_record(const GraphSignature& sig) override {
    std::lock_guard<std::mutex> lock(mu_);
    KILN_RETURN_IF_ERROR(open());
    return store_->get_fusion_record(sig.structure, sig.shape_key, store_test::h200());
  }
  std::shared_ptr<std::vector<std::string>> runs = std::make_shared<std::vector<std::string>>();
  int static_build_ms = 0;   // a static build takes this long (a promotion still building)
  bool writes_fail = false;  // with_writable_store: the store refuses
  Status with_writable_store(const std::function<Status(PlanStore&)>& fn) override {
    if (writes_fail) return unavailable("the disk is full (injected)");
    std::lock_guard<std::mutex> lock(mu_);
    KILN_RETURN_IF_ERROR(open());
    return fn(*store_);
  }

 private:
  Status open() {
    if (!store_) {
      KILN_ASSIGN_OR_RETURN(store_, PlanStore::open(path_));
    }
    return Status::ok();
  }
  std::shared_ptr<const ExecutablePlan> plan(const Graph& g, const GraphSignature& sig, EngineConfig c,
                                             PlanSource s) const {
    return std::make_shared<ExecutablePlan>(g, sig, std::move(c), 0, s, std::make_unique<NullExecutor>(g.name, runs));
  }
  std::string path_;
  std::mutex mu_;
  std::unique_ptr<PlanStore> store_;
};

// A tuner that returns one passed, timed winner (engine `engine`, `median_ms`) and records what it was given.
struct FakeTuner {
  int64_t engine = 5;
  double median_ms = 0.25;
  bool cut_short = false;  // the time budget ran out
  bool none = false;       // no correct candidate
  std::vector<TuneOptions> calls;
  std::function<StatusOr<TuneResult>(const Graph&, const TuneOptions&)> fn() {
    return [this](const Graph& g, const TuneOptions& o) -> StatusOr<TuneResult> {
      calls.push_back(o);
      TuneResult tr;
      tr.graph_name = g.name;
      CandidateResult c;
      c.config.engine_id = engine;
      c.disposition = Disposition::kPassed;
      c.median_ms = c.min_ms = c.max_ms = median_ms;
      c.samples = 10;
      tr.candidates.push_back(c);
      if (!none) {
        tr.winner = 0;
        tr.winner_config = EngineConfig{engine, {}};
        tr.winner_plan = {1, 2, 3, 4};
        tr.winner_check = "max abs err 0 (injected)";
      }
      tr.budget_exhausted = cut_short;
      return tr;
    };
  }
};

// An unfused alternative as tune_unfused reports it (the graph's real parts and signatures), each part's
// winner engine 100 + i, the chain timed at `chain_ms` and passed.
struct FakeUnfused {
  double chain_ms = 0.10;
  int calls = 0;
  std::vector<int> groups;  // the chosen decomposition's (partition_graph's numbers); empty: each node alone
  std::function<StatusOr<UnfusedResult>(const Graph&, const UnfusedOptions&)> fn() {
    return [this](const Graph& g, const UnfusedOptions&) -> StatusOr<UnfusedResult> {
      ++calls;
      UnfusedResult u;
      u.materialized = DataType::kFloat16;
      u.groups = groups;
      KILN_ASSIGN_OR_RETURN(std::vector<GraphPart> parts, groups.empty() ? decompose_graph(g, u.materialized)
                                                                         : partition_graph(g, groups, u.materialized));
      for (size_t i = 0; i < parts.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(GraphSignature ps, compute_signature(parts[i].graph));
        UnfusedPartResult pr;
        pr.name = parts[i].graph.name;
        pr.structure_sig = ps.structure;
        pr.shape_key = ps.shape_key;
        CandidateResult c;
        c.config.engine_id = 100 + static_cast<int64_t>(i);
        c.disposition = Disposition::kPassed;
        c.median_ms = c.min_ms = c.max_ms = chain_ms / static_cast<double>(parts.size());
        c.samples = 10;
        pr.tune.graph_name = pr.name;
        pr.tune.candidates.push_back(c);
        pr.tune.winner = 0;
        pr.tune.winner_config = c.config;
        pr.tune.winner_plan = {9};
        u.identities.push_back(c.identity());
        u.parts.push_back(std::move(pr));
      }
      u.chain.config.engine_id = -1;
      u.chain.disposition = Disposition::kPassed;
      u.chain.median_ms = u.chain.min_ms = u.chain.max_ms = chain_ms;
      u.chain.samples = 10;
      return u;
    };
  }
};

struct Jobs {
  TempDir dir;
  std::string db = dir.file("plans.db");
  std::unique_ptr<Planner> planner;
  FakeTuner tuner;
  StoreBackedFake* backend = nullptr;
  explicit Jobs(bool writable = true, NewShapes new_shapes = NewShapes::kBuildNow, const EnvPolicy& policy = {}) {
    PlannerOptions o;
    o.policy = policy;
    o.store_path = db;
    o.store_writable = writable;
    o.new_shapes = new_shapes;  // the static sources only, unless a test asks
    o.padded = false;
    auto b = std::make_unique<StoreBackedFake>(db);
    backend = b.get();
    planner = Planner::create_with_backend(std::move(b), o);
  }
  TuneJob job() {
    TuneJob j;
    j.tuner = tuner.fn();
    j.unfused = false;  // needs a GPU
    return j;
  }
  std::unique_ptr<PlanStore> store() {
    auto s = PlanStore::open(db);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s).value() : nullptr;
  }
};

PlanRecord record_for(const Graph& g, bool tuned) {
  auto sig = compute_signature(g);
  EXPECT_TRUE(sig.is_ok());
  PlanRecord r;
  r.structure_sig = sig->structure;
  r.shape_key = sig->shape_key;
  r.fingerprint = store_test::h200();
  r.plan_bytes = "plan";
  r.engine_id = 3;
  r.tuned = tuned;
  r.stats.median_ms = 0.5;
  return r;
}

TEST(KeepPlan, StoresTheGraphSpecAndDequeuesOnlyATunedPlan) {
  TempDir dir;
  auto store = PlanStore::open(dir.file("p.db"));
  ASSERT_TRUE(store.is_ok());
  Graph g = token_graph();
  ASSERT_TRUE(queue_retune(**store, g, store_test::h200(), "store miss").is_ok());

  auto untuned = keep_plan(**store, g, record_for(g, false));
  ASSERT_TRUE(untuned.is_ok()) << untuned.status().to_string();
  EXPECT_FALSE(untuned->dequeued);
  EXPECT_TRUE(untuned->warnings.empty());
  EXPECT_EQ((*store)->list_retune_queue()->size(), 1u) << "an untuned plan does not serve a re-tune request";
  auto sig = compute_signature(g);
  auto spec = (*store)->get_graph_spec(sig->structure, sig->shape_key);
  ASSERT_TRUE(spec.is_ok() && spec->has_value()) << "the graph's spec is kept beside its plan";
  EXPECT_EQ((*spec)->graph_name, "mlp");

  auto tuned = keep_plan(**store, g, record_for(g, true));
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  EXPECT_TRUE(tuned->dequeued);
  EXPECT_TRUE(tuned->record.tuned);
  EXPECT_TRUE((*store)->list_retune_queue()->empty());
}

// Under the verify and shadow policies a tuned winner that would replace an active plan of another configuration
// waits beside it; a key's first plan, the same configuration again, and an untuned record are stored at once.
TEST(KeepPlan, RolloutPoliciesHoldANewWinnerBack) {
  for (RolloutPolicy policy : {RolloutPolicy::kVerify, RolloutPolicy::kShadow}) {
    TempDir dir;
    auto store = PlanStore::open(dir.file("p.db"));
    ASSERT_TRUE(store.is_ok());
    Graph g = token_graph();
    PlanRecord first = record_for(g, true);
    auto kept = keep_plan(**store, g, first, policy);
    ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
    EXPECT_EQ(kept->state, PlanState::kActive) << "a key's first plan has nothing to protect";
    auto same = keep_plan(**store, g, first, policy);
    ASSERT_TRUE(same.is_ok());
    EXPECT_EQ(same->state, PlanState::kActive);
    PlanRecord next = first;
    next.engine_id = 9;
    auto held = keep_plan(**store, g, next, policy, "tuned by a test");
    ASSERT_TRUE(held.is_ok()) << held.status().to_string();
    const PlanState want = policy == RolloutPolicy::kVerify ? PlanState::kCandidate : PlanState::kShadow;
    EXPECT_EQ(held->state, want);
    auto active = (*store)->read(first.structure_sig, first.shape_key, first.fingerprint_key());
    ASSERT_TRUE(active.is_ok());
    EXPECT_EQ(active->engine_id, first.engine_id) << "the active plan still serves";
    auto entry = (*store)->rollout_entry({first.structure_sig, first.shape_key, first.fingerprint_key()},
                                         plan_identity(9, first.knobs));
    ASSERT_TRUE(entry.is_ok()) << entry.status().to_string();
    EXPECT_EQ(entry->state, want);
    PlanRecord untuned = next;
    untuned.engine_id = 11;
    untuned.tuned = false;
    auto plain = keep_plan(**store, g, untuned, policy);
    ASSERT_TRUE(plain.is_ok());
    EXPECT_EQ(plain->state, PlanState::kActive) << "an untuned record is never a candidate";
  }
}

TEST(KeepPlan, ReadOnlyStoreIsRefusedNamingTheGraph) {
  TempDir dir;
  { ASSERT_TRUE(PlanStore::open(dir.file("p.db")).is_ok()); }
  StoreOpenOptions so;
  so.read_only = true;
  auto ro = PlanStore::open(dir.file("p.db"), so);
  ASSERT_TRUE(ro.is_ok());
  Graph g = token_graph();
  auto kept = keep_plan(**ro, g, record_for(g, true));
  ASSERT_FALSE(kept.is_ok());
  EXPECT_EQ(kept.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(kept.status().message().find("'mlp'"), std::string::npos) << kept.status().message();
}

TEST(TuningIsComplete, OnlyWhenNeitherInterruptedNorCutByTheBudget) {
  TuneResult tr;
  EXPECT_TRUE(tuning_is_complete(tr));
  tr.budget_exhausted = true;
  EXPECT_FALSE(tuning_is_complete(tr));
  tr.budget_exhausted = false;
  tr.cancelled = true;
  EXPECT_FALSE(tuning_is_complete(tr));
}

TEST(PlannerJobs, TuneAndStoreUsesTheStoredWinnerAsIncumbentAndDequeues) {
  Jobs j;
  Graph g = token_graph();
  {
    auto s = j.store();
    ASSERT_TRUE(queue_retune(*s, g, store_test::h200(), "store miss").is_ok());
  }
  auto first = j.planner->workshop().tune(g, j.job());
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_EQ(j.tuner.calls.size(), 1u);
  EXPECT_FALSE(j.tuner.calls[0].incumbent.has_value()) << "nothing stored yet";
  ASSERT_TRUE(first->kept.has_value());
  EXPECT_TRUE(first->kept->record.tuned);
  EXPECT_TRUE(first->kept->dequeued);
  EXPECT_EQ(first->environment.gpu_name, "NVIDIA H200");

  j.tuner.engine = 8;
  auto second = j.planner->workshop().tune(g, j.job());
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  ASSERT_EQ(j.tuner.calls.size(), 2u);
  ASSERT_TRUE(j.tuner.calls[1].incumbent.has_value());
  EXPECT_EQ(j.tuner.calls[1].incumbent->identity, plan_identity(5, {}));
  EXPECT_DOUBLE_EQ(j.tuner.calls[1].incumbent->median_ms, 0.25);

  TuneJob skip = j.job();
  skip.untuned_only = true;
  auto skipped = j.planner->workshop().tune(g, skip);
  ASSERT_TRUE(skipped.is_ok());
  EXPECT_TRUE(skipped->skipped);
  EXPECT_EQ(j.tuner.calls.size(), 2u) << "a key stored tuned is not tuned again with untuned_only";
}

// The candidate budget starts from what won at other shapes of the structure, most often first; the tuned shape's
// own record is no prior (it is the incumbent), and an exhaustive tune takes none.
TEST(PlannerJobs, TheStoresWinnersAtOtherShapesAreTheBudgetsPriors) {
  Jobs j;
  Graph g = token_graph(64);
  const EngineConfig a{41, {{"k2", 4}}}, b{12, {}}, own{99, {}};
  j.backend->tuned = {TunedShape{"tokens=512", {{"tokens", 512}}, b}, TunedShape{"tokens=128", {{"tokens", 128}}, a},
                      TunedShape{"tokens=256", {{"tokens", 256}}, a}, TunedShape{"tokens=64", {{"tokens", 64}}, own}};
  ASSERT_TRUE(j.planner->workshop().tune(g, j.job()).is_ok());
  ASSERT_EQ(j.tuner.calls.size(), 1u);
  EXPECT_EQ(j.tuner.calls[0].budget.prior, (std::vector<std::string>{"eng41_k2=4", "eng12"}));
  TuneJob all = j.job();
  all.tune.budget.exhaustive = true;
  ASSERT_TRUE(j.planner->workshop().tune(g, all).is_ok());
  ASSERT_EQ(j.tuner.calls.size(), 2u);
  EXPECT_TRUE(j.tuner.calls[1].budget.prior.empty());
  // The key now has a stored winner (the fake tuner's, eng5): a budgeted re-tune times it first, so that the
  // incumbent rule can keep it rather than replace it with a slower configuration it never timed.
  ASSERT_TRUE(j.planner->workshop().tune(g, j.job()).is_ok());
  ASSERT_EQ(j.tuner.calls.size(), 3u);
  ASSERT_TRUE(j.tuner.calls[2].incumbent.has_value());
  EXPECT_EQ(j.tuner.calls[2].budget.prior,
            (std::vector<std::string>{j.tuner.calls[2].incumbent->identity, "eng41_k2=4", "eng12"}));
}

// A record another environment tuned, runnable here under a relaxed policy, is no incumbent: its time was measured
// there (a winner replaces a stored one only when faster beyond noise in the same environment).
TEST(PlannerJobs, AnotherEnvironmentsWinnerIsNoIncumbent) {
  EnvPolicy relaxed;
  relaxed.set_rule(FingerprintField::kCudnnVersion, FieldRule::kInformational);
  Jobs j(/*writable=*/true, NewShapes::kBuildNow, relaxed);
  Graph g = token_graph();
  auto sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  PlanRecord elsewhere = store_test::make_record(0);
  elsewhere.structure_sig = sig->structure;
  elsewhere.shape_key = sig->shape_key;
  elsewhere.fingerprint.cudnn_version = 92000;  // another key; the relaxed policy lets it run here
  elsewhere.engine_id = 3;
  elsewhere.knobs.clear();
  elsewhere.stats.median_ms = 0.01;
  {
    auto s = j.store();
    ASSERT_TRUE(s->put(elsewhere).is_ok());
    auto look = s->get(sig->structure, sig->shape_key, store_test::h200(), relaxed);
    ASSERT_TRUE(look.is_ok());
    ASSERT_TRUE(look->runnable()) << "the test needs the other environment's record to pass the relaxed policy";
  }
  auto tuned = j.planner->workshop().tune(g, j.job());
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  ASSERT_EQ(j.tuner.calls.size(), 1u);
  EXPECT_FALSE(j.tuner.calls[0].incumbent.has_value()) << j.tuner.calls[0].incumbent->identity;
}

TEST(PlannerJobs, ATuningCutShortIsStoredUntunedAndNoWinnerStoresNothing) {
  Jobs j;
  Graph g = token_graph();
  j.tuner.cut_short = true;
  auto cut = j.planner->workshop().tune(g, j.job());
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  ASSERT_TRUE(cut->kept.has_value());
  EXPECT_FALSE(cut->kept->record.tuned);

  Graph other = token_graph(32);
  j.tuner.cut_short = false;
  j.tuner.none = true;
  auto none = j.planner->workshop().tune(other, j.job());
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_FALSE(none->kept.has_value());
  auto sig = compute_signature(other);
  auto s = j.store();
  auto look = s->get(sig->structure, sig->shape_key, store_test::h200());
  ASSERT_TRUE(look.is_ok());
  EXPECT_EQ(look->outcome, LookupOutcome::kMiss);
}

TEST(PlannerJobs, AStoredPlanReplacesTheOneHeldInMemory) {
  Jobs j;
  auto pg = j.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = j.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kHeuristics);
  EXPECT_EQ(j.planner->obtain(*pg)->source, PlanSource::kMemory);

  ASSERT_TRUE(j.planner->workshop().tune(token_graph(), j.job()).is_ok());
  auto b = j.planner->obtain(*pg);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b->source, PlanSource::kStore) << "the tuned plan, not the heuristic one held before";
  EXPECT_EQ(b->plan->config().engine_id, 5);
  EXPECT_EQ(j.planner->stats().cached, 1);
}

TEST(PlannerJobs, JobsThatNeedWhatThePlannerLacksAreRefused) {
  Jobs ro(/*writable=*/false);
  auto t = ro.planner->workshop().tune(token_graph(), ro.job());
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("store_writable"), std::string::npos) << t.status().message();
  EXPECT_EQ(ro.tuner.calls.size(), 0u) << "refused before tuning";
  auto r = ro.planner->workshop().retune_queued(RetuneOptions{});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  auto c = ro.planner->workshop().compile(token_graph());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("PlannerOptions::target"), std::string::npos) << c.status().message();
}

// A promotion still building when a job stores a plan for the structure does not replace the job's plan:
// the stopgap it was to replace is gone (forget), and the next obtain serves the stored plan.
TEST(PlannerJobs, APromotionFinishingAfterAJobStoredDoesNotReplaceItsPlan) {
  Jobs j(/*writable=*/true, NewShapes::kStopgap);
  j.backend->static_build_ms = 150;
  auto pg = j.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto stopgap = j.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(stopgap.is_ok()) << stopgap.status().to_string();
  ASSERT_EQ(stopgap->source, PlanSource::kDynamic) << stopgap->why;
  auto at100 = reshape_graph(*pg->graph, {{"tokens", 100}});
  ASSERT_TRUE(at100.is_ok());
  // The promotion has asked the store (a miss) and is building its heuristic plan when the job stores.
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  auto tuned = j.planner->workshop().tune(*at100, j.job());
  ASSERT_TRUE(tuned.is_ok()) << tuned.status().to_string();
  auto reloaded = j.planner->obtain(*pg, {{"tokens", 100}});  // the stored plan, held again at once
  ASSERT_TRUE(reloaded.is_ok());
  EXPECT_EQ(reloaded->source, PlanSource::kStore) << reloaded->why;
  j.planner->wait_for_promotions();
  auto after = j.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->source, PlanSource::kMemory) << after->why;
  EXPECT_EQ(after->plan->config().engine_id, 5) << "the job's tuned plan, not the promotion's build";
  const PlannerStats st = j.planner->stats();
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_EQ(st.promotions, 0) << "the promotion's plan was dropped";
  EXPECT_EQ(st.cached, 1);
}

// The command's deadline: a key that would be skipped is skipped; one to tune is not tuned once it passed.
TEST(PlannerJobs, APassedDeadlineTunesNothingButASkipIsStillASkip) {
  Jobs j;
  TuneJob late = j.job();
  late.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  auto spent = j.planner->workshop().tune(token_graph(), late);
  ASSERT_TRUE(spent.is_ok()) << spent.status().to_string();
  EXPECT_TRUE(spent->budget_spent);
  EXPECT_TRUE(j.tuner.calls.empty());

  ASSERT_TRUE(j.planner->workshop().tune(token_graph(), j.job()).is_ok());
  late.untuned_only = true;
  auto skipped = j.planner->workshop().tune(token_graph(), late);
  ASSERT_TRUE(skipped.is_ok());
  EXPECT_TRUE(skipped->skipped);
  EXPECT_FALSE(skipped->budget_spent);

  TuneJob soon = j.job();
  soon.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  soon.tune.time_budget_s = 0;
  ASSERT_TRUE(j.planner->workshop().tune(token_graph(16), soon).is_ok());
  ASSERT_EQ(j.tuner.calls.size(), 2u);
  EXPECT_GT(j.tuner.calls.back().time_budget_s, 0);
  EXPECT_LE(j.tuner.calls.back().time_budget_s, 30);
}

// A winner the store refuses is still returned (to be reported), with the store's error beside it.
TEST(PlannerJobs, AStoreThatRefusesTheWinnerLeavesTheResultToReport) {
  Jobs j;
  j.backend->writes_fail = true;
  TuneJob job = j.job();
  auto t = j.planner->workshop().tune(token_graph(), job);
  // The incumbent lookup needs the store too: it fails first, before any tuning.
  ASSERT_FALSE(t.is_ok());
  EXPECT_TRUE(j.tuner.calls.empty());
  j.backend->writes_fail = false;
  job.tuner = [&](const Graph& g, const TuneOptions& o) {
    j.backend->writes_fail = true;  // the disk fills while tuning
    return j.tuner.fn()(g, o);
  };
  t = j.planner->workshop().tune(token_graph(), job);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_TRUE(t->result.winner.has_value());
  EXPECT_FALSE(t->kept.has_value());
  EXPECT_FALSE(t->store_status.is_ok());
  EXPECT_NE(t->store_status.message().find("disk is full"), std::string::npos) << t->store_status.message();
}

// Without a GPU a writable Planner does not start, creates no store, and leaves no -wal/-shm beside one.
TEST(PlannerJobs, AWritablePlannerThatCannotStartLeavesNoStoreBehind) {
  // Decided by the driver, without asking CUDA for its devices (a host test does not touch a GPU): where a
  // driver is installed a GPU may be too, and a writable Planner would start on it.
  if (test::cuda_driver_installed()) GTEST_SKIP() << "a CUDA driver is installed (a host test does not touch a GPU)";
  TempDir dir;
  PlannerOptions o;
  o.store_path = dir.file("new/plans.db");
  o.store_writable = true;
  EXPECT_EQ(Planner::create(o).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(o.store_path));
  o.store_path = dir.file("old.db");
  { ASSERT_TRUE(PlanStore::open(o.store_path).is_ok()); }
  EXPECT_EQ(Planner::create(o).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(o.store_path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(o.store_path + "-shm"));
}

// Review: the existing store opens on a thread of its own while the GPU is checked; where both fail the store's
// error is the one returned (a wrong path is the caller's on any machine), as before, for every kind of store
// failure, read-only or writable.
TEST(PlannerJobs, AStoreThatCannotOpenIsReportedBeforeTheMissingGpu) {
  if (test::cuda_driver_installed()) GTEST_SKIP() << "a CUDA driver is installed (a host test does not touch a GPU)";
  TempDir dir;
  std::filesystem::create_directories(dir.file("folder.db"));
  { std::ofstream(dir.file("junk.db")) << "not a database"; }
  struct Case {
    std::string path;
    bool writable;
    StatusCode code;
    std::string message;
  };
  for (const Case& c : {Case{dir.file("missing.db"), false, StatusCode::kNotFound, "does not exist"},
                        Case{dir.file("folder.db"), false, StatusCode::kInvalidArgument, "is a folder"},
                        Case{dir.file("folder.db"), true, StatusCode::kInvalidArgument, "is a folder"},
                        Case{dir.file("junk.db"), false, StatusCode::kCorruption, "is not a SQLite database"},
                        Case{dir.file("junk.db"), true, StatusCode::kCorruption, "is not a SQLite database"}}) {
    PlannerOptions o;
    o.store_path = c.path;
    o.store_writable = c.writable;
    auto p = Planner::create(o);
    ASSERT_FALSE(p.is_ok()) << c.path;
    EXPECT_EQ(p.status().code(), c.code) << c.path << ": " << p.status().to_string();
    EXPECT_NE(p.status().message().find(c.message), std::string::npos) << p.status().message();
  }
}

// The real backend, deviceless: the precompiled conv engine builds without a GPU (kiln compile's host test).
TEST(PlannerJobs, DevicelessPlannerCompilesIntoTheStoreAndServesNothing) {
  TempDir dir;
  auto profile = builtin_h200_profile();
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  PlannerOptions o;
  o.store_path = dir.file("aot.db");
  o.target = *profile;
  auto planner = Planner::create(o);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto c = (*planner)->workshop().compile(*g);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ASSERT_EQ(c->parts.size(), 1u);
  EXPECT_EQ(c->outcome, CompileOutcome::kCompiled) << c->why;
  EXPECT_GT(c->parts[0].plan_bytes, 0u);

  auto s = PlanStore::open(o.store_path);
  ASSERT_TRUE(s.is_ok());
  auto sig = compute_signature(*g);
  auto look = (*s)->get(sig->structure, sig->shape_key, fingerprint_for_profile(*profile));
  ASSERT_TRUE(look.is_ok());
  ASSERT_TRUE(look->runnable()) << lookup_outcome_name(look->outcome);
  EXPECT_FALSE(look->record->tuned);
  auto spec = (*s)->get_graph_spec(sig->structure, sig->shape_key);
  EXPECT_TRUE(spec.is_ok() && spec->has_value());

  auto pg = (*planner)->prepare(*g);
  ASSERT_TRUE(pg.is_ok());
  EXPECT_EQ((*planner)->obtain(*pg).status().code(), StatusCode::kFailedPrecondition);
  TuneJob job;
  EXPECT_EQ((*planner)->workshop().tune(*g, job).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// kiln tune --shapes: a structure's recorded shapes, hottest first, as bucket representatives, each once.
TEST(ShapesToTune, HottestFirstAsRepresentativesEachOnceAtMostN) {
  const std::string s = "0123456789abcdef0123456789abcdef", other = "fedcba9876543210fedcba9876543210";
  std::vector<RecordedShape> rec = {{s, "tokens=7", "mlp", 3, {}},
                                    {s, "tokens=100", "mlp", 50, {}},
                                    {other, "tokens=1", "x", 99, {}},
                                    {s, "tokens=120", "mlp", 40, {}},
                                    {s, "tokens=300", "mlp", 2, {}}};
  auto exact = shapes_to_tune(rec, s, BucketPolicy{});
  ASSERT_TRUE(exact.is_ok()) << exact.status().to_string();
  ASSERT_EQ(exact->size(), 4u);
  EXPECT_EQ((*exact)[0].at("tokens"), 100);
  EXPECT_EQ((*exact)[1].at("tokens"), 120);
  EXPECT_EQ((*exact)[3].at("tokens"), 300);

  auto pow2 = BucketPolicy::parse("tokens=pow2");
  ASSERT_TRUE(pow2.is_ok());
  auto reps = shapes_to_tune(rec, s, *pow2);
  ASSERT_TRUE(reps.is_ok());
  ASSERT_EQ(reps->size(), 3u) << "100 and 120 share the bucket 65-128";
  EXPECT_EQ((*reps)[0].at("tokens"), 128);
  EXPECT_EQ((*reps)[1].at("tokens"), 8);
  EXPECT_EQ((*reps)[2].at("tokens"), 512);

  auto two = shapes_to_tune(rec, s, *pow2, 2);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(two->size(), 2u);

  rec.push_back({s, "tokens=oops", "mlp", 1000, {}});
  auto bad = shapes_to_tune(rec, s, BucketPolicy{});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// ---- Fused or unfused, in service ----------------------------------------------------------------

// A Planner (the fake backend over a real store) that serves what tune_and_store stored for the key.
StatusOr<Obtained> serve(Jobs& j, const Graph& g) {
  PlannerOptions o;
  o.store_path = j.db;
  o.new_shapes = NewShapes::kBuildNow;
  o.padded = false;
  auto b = std::make_unique<StoreBackedFake>(j.db);
  b->runs = j.backend->runs;
  auto planner = Planner::create_with_backend(std::move(b), o);
  KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner->prepare(g));
  return planner->obtain(pg);
}

// Runs a served plan of token_graph on host buffers (the fake backend records each part it runs in j.runs, cleared
// first).
Status run_served(Jobs& j, const ExecutablePlan& plan) {
  j.backend->runs->clear();
  std::vector<std::unique_ptr<char[]>> bufs;
  TensorBindings bind;
  for (const char* name : {"x", "w", "b", "y"}) {
    bufs.emplace_back(new char[1 << 17]);
    // 16-byte aligned: new[] of char gives max_align_t alignment (16 on x86-64).
    bind[name] = {bufs.back().get(), 0};
  }
  std::vector<char> ws(static_cast<size_t>(plan.workspace_bytes()) + 16);
  void* wsp = ws.data() + (16 - reinterpret_cast<uintptr_t>(ws.data()) % 16) % 16;
  return plan.execute(nullptr, bind, wsp);
}

TEST(FusionInService, TheChainThatWinsIsStoredAndServedAndAFusedWinRemovesIt) {
  Jobs j;
  Graph g = token_graph();
  FakeUnfused unfused;  // 0.10 ms against the fused 0.25 ms
  TuneJob job = j.job();
  job.unfused = true;
  job.unfused_tuner = unfused.fn();
  auto t = j.planner->workshop().tune(g, job);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(unfused.calls, 1);
  ASSERT_TRUE(t->fusion && t->fusion->is_ok());
  EXPECT_FALSE((*t->fusion)->use_fused);
  ASSERT_TRUE(t->kept.has_value()) << "the fused winner is stored too (the bucket's representative)";
  ASSERT_TRUE(t->kept_fusion.has_value()) << t->fusion_status.to_string();
  EXPECT_TRUE(t->fusion_status.is_ok());
  ASSERT_EQ(t->kept_parts.size(), 3u);
  EXPECT_EQ(t->kept_fusion->parts.size(), 3u);
  EXPECT_EQ(t->kept_fusion->materialized, "fp16");
  EXPECT_DOUBLE_EQ(t->kept_fusion->fused_ms, 0.25);
  EXPECT_DOUBLE_EQ(t->kept_fusion->unfused_ms, 0.10);
  EXPECT_EQ(t->kept_parts[0].record.engine_id, 100);

  // A new process's Planner serves the chain: the parts' stored plans, in order, on the fused graph's names.
  auto got = serve(j, g);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kStore);
  ASSERT_EQ(got->plan->parts().size(), 3u);
  EXPECT_EQ(got->plan->identity(), "unfused[eng100 + eng101 + eng102]");
  ASSERT_TRUE(run_served(j, *got->plan).is_ok());
  ASSERT_EQ(j.backend->runs->size(), 3u);
  EXPECT_EQ((*j.backend->runs)[0], "mlp/mm");
  EXPECT_EQ((*j.backend->runs)[2], "mlp/gelu");

  // Tuned again where the fused plan wins: the decision goes, the fused plan serves.
  unfused.chain_ms = 0.50;
  auto again = j.planner->workshop().tune(g, job);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE((*again->fusion)->use_fused);
  EXPECT_FALSE(again->kept_fusion.has_value());
  EXPECT_TRUE(again->fusion_removed);
  auto fused = serve(j, g);
  ASSERT_TRUE(fused.is_ok()) << fused.status().to_string();
  EXPECT_TRUE(fused->plan->parts().empty());
  EXPECT_EQ(fused->plan->identity(), "eng5");
  // Tuned a third time without the unfused alternative: nothing to remove, nothing stored.
  TuneJob plain = j.job();
  auto third = j.planner->workshop().tune(g, plain);
  ASSERT_TRUE(third.is_ok());
  EXPECT_FALSE(third->fusion_removed);
  EXPECT_FALSE(third->kept_fusion.has_value());
}

// A chain of two parts (the graph cut after its bias: the GEMM with its bias, then the GELU) is stored with the
// parts' signatures, and a new process's Planner finds that decomposition again and serves it.
TEST(FusionInService, AGraphCutOnceIsStoredAndServedAsItsTwoParts) {
  Jobs j;
  Graph g = token_graph();
  auto groupings = unfused_groupings(g);
  ASSERT_TRUE(groupings.is_ok()) << groupings.status().to_string();
  ASSERT_EQ(groupings->size(), 3u) << "each node, and cut after each of the first two nodes";
  FakeUnfused unfused;
  unfused.groups = groupings->back();  // cut after the second node
  TuneJob job = j.job();
  job.unfused = true;
  job.unfused_tuner = unfused.fn();
  auto t = j.planner->workshop().tune(g, job);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_TRUE(t->kept_fusion.has_value()) << t->fusion_status.to_string();
  ASSERT_EQ(t->kept_fusion->parts.size(), 2u);
  EXPECT_EQ(t->kept_fusion->parts[0].name, "mlp/mm+1");
  EXPECT_EQ(t->kept_fusion->parts[1].name, "mlp/gelu");
  auto got = serve(j, g);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kStore);
  ASSERT_EQ(got->plan->parts().size(), 2u) << got->why;
  EXPECT_EQ(got->plan->identity(), "unfused[eng100 + eng101]");
  ASSERT_TRUE(run_served(j, *got->plan).is_ok());
  ASSERT_EQ(j.backend->runs->size(), 2u);
  EXPECT_EQ((*j.backend->runs)[0], "mlp/mm+1");
  EXPECT_EQ((*j.backend->runs)[1], "mlp/gelu");
}

TEST(FusionInService, AChainThatCannotBeServedFallsBackToTheFusedPlanAndSaysWhy) {
  Jobs j;
  Graph g = token_graph();
  FakeUnfused unfused;
  TuneJob job = j.job();
  job.unfused = true;
  job.unfused_tuner = unfused.fn();
  auto t = j.planner->workshop().tune(g, job);
  ASSERT_TRUE(t.is_ok() && t->kept_fusion.has_value());
  // A part's record goes (removed by hand, or stale after an upgrade).
  {
    auto s = j.store();
    ListFilter f;
    f.structure_prefix = t->kept_fusion->parts[1].structure_sig;
    ASSERT_EQ(*s->remove(f), 1);
  }
  auto got = serve(j, g);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kStore);
  EXPECT_TRUE(got->plan->parts().empty()) << "the fused plan serves";
  EXPECT_NE(got->why.find("unfused decision"), std::string::npos) << got->why;
  EXPECT_NE(got->why.find("mlp/bias"), std::string::npos) << got->why;
}

TEST(FusionInService, WhereOnlyTheChainPassesTheChainServes) {
  Jobs j;
  Graph g = token_graph();
  j.tuner.none = true;  // no fused candidate passed
  FakeUnfused unfused;
  TuneJob job = j.job();
  job.unfused = true;
  job.unfused_tuner = unfused.fn();
  auto t = j.planner->workshop().tune(g, job);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_FALSE(t->kept.has_value());
  ASSERT_TRUE(t->kept_fusion.has_value()) << t->fusion_status.to_string();
  EXPECT_DOUBLE_EQ(t->kept_fusion->fused_ms, 0.0);
  auto got = serve(j, g);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kStore);
  EXPECT_EQ(got->plan->parts().size(), 3u);
  // gc keeps it: its parts are there, though the fused key has no record.
  auto s = j.store();
  auto gc = s->gc(GcOptions{});
  ASSERT_TRUE(gc.is_ok());
  EXPECT_EQ(gc->fusion_records_removed, 0);
}

}  // namespace
}  // namespace kiln
