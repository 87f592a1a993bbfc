// Host tier: first-use verification (PlannerOptions::first_use, runtime/first_use.h). A fake backend says
// which plans are wrong; the Planner must never hand one to a caller, check each plan once, and keep a
// failed verdict.
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "runtime/first_use.h"

namespace kiln {
namespace {

class CountingExecutor : public PlanExecutor {
 public:
  explicit CountingExecutor(std::atomic<int>* runs) : runs_(runs) {}
  Status run(cudaStream_t, const std::map<int, void*>&, void*) const override {
    ++*runs_;
    return Status::ok();
  }

 private:
  std::atomic<int>* runs_;
};

// Heuristics give eng1; a store record (tuned or not) gives eng7; verify_first_use is scripted.
class VerifyingBackend : public PlanBackend {
 public:
  std::set<std::string> wrong;        // identities that fail the check
  std::atomic<int> errors_first{0};   // this many checks fail with a backend error first
  std::atomic<int> verifications{0};  // checks asked for
  std::atomic<int> caller_runs{0};    // executions of the plans made here
  bool stored = false;                // the store holds eng7 for every key

  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    if (!stored) {
      *why = "no record";
      return std::shared_ptr<const ExecutablePlan>();
    }
    return make(g, sig, EngineConfig{7, {}}, PlanSource::kStore);
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return std::vector<TunedShape>{}; }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    return make(g, sig, config ? *config : EngineConfig{1, {}}, source);
  }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    ++verifications;
    if (errors_first > 0) {
      --errors_first;
      return unavailable("out of device memory (injected)");
    }
    if (wrong.count(plan.identity())) return FirstUseVerdict{false, true, "y: Incorrect max_abs=1.0e+00 (injected)"};
    return FirstUseVerdict{true, true, "y: Passed (fake)"};
  }

 private:
  std::shared_ptr<const ExecutablePlan> make(const Graph& g, const GraphSignature& sig, EngineConfig c, PlanSource s) {
    return std::make_shared<ExecutablePlan>(g, sig, std::move(c), 0, s,
                                            std::make_unique<CountingExecutor>(&caller_runs));
  }
};

// A backend that cannot check: the base class's verify_first_use.
class UncheckingBackend : public PlanBackend {
 public:
  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph&, const GraphSignature&,
                                                             std::string* why) override {
    *why = "no record";
    return std::shared_ptr<const ExecutablePlan>();
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return std::vector<TunedShape>{}; }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>&, PlanSource s) override {
    return std::shared_ptr<const ExecutablePlan>(
        std::make_shared<ExecutablePlan>(g, sig, EngineConfig{1, {}}, 0, s, std::make_unique<CountingExecutor>(&runs)));
  }
  std::atomic<int> runs{0};
};

Graph relu_graph() {
  auto g = parse_spec_string(R"({"name": "relu", "io_dtype": "fp32", "tensors": {"x": {"dims": [1, 4, 8]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "relu.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

struct Fixture {
  VerifyingBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
  explicit Fixture(FirstUse mode = FirstUse::kVerify) {
    auto b = std::make_unique<VerifyingBackend>();
    backend = b.get();
    PlannerOptions o;
    o.first_use = mode;
    o.new_shapes = NewShapes::kBuildNow;
    planner = Planner::create_with_backend(std::move(b), o);
  }
};

TEST(FirstUse, APlanIsCheckedOnceBeforeItServes) {
  Fixture f;
  auto a = f.planner->obtain(relu_graph());
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kHeuristics);
  EXPECT_EQ(f.backend->verifications, 1);
  auto b = f.planner->obtain(relu_graph());
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(f.backend->verifications, 1) << "checked again on a memory hit";
  PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.first_use_checks, 1);
  EXPECT_EQ(st.first_use_refused, 0);
  EXPECT_NE(st.text().find("1 checked before first use"), std::string::npos) << st.text();
}

// The acceptance case: a wrong plan is never handed to a caller, the refusal names it and the gate's words,
// and the failed verdict is kept (no second check, no second chance).
TEST(FirstUse, AWrongPlanIsRefusedAndNeverServed) {
  Fixture f;
  f.backend->wrong.insert("eng1");
  for (int i = 0; i < 3; ++i) {
    auto r = f.planner->obtain(relu_graph());
    ASSERT_FALSE(r.is_ok()) << "call " << i << " served a plan that failed verification";
    EXPECT_EQ(r.status().code(), StatusCode::kCheckFailed);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("graph 'relu': plan eng1 (from heuristics) failed first-use verification in this environment"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("y: Incorrect max_abs=1.0e+00 (injected)"), std::string::npos) << m;
  }
  EXPECT_EQ(f.backend->verifications, 1);
  EXPECT_EQ(f.backend->caller_runs, 0);
  PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.first_use_refused, 3);
  EXPECT_EQ(st.cached, 0) << "a refused plan was held";
  EXPECT_NE(st.last_first_use_failure.find("eng1 for graph 'relu'"), std::string::npos) << st.last_first_use_failure;
  // A pinned configuration that passes is served beside it.
  auto pg = f.planner->prepare(relu_graph());
  ASSERT_TRUE(pg.is_ok());
  auto pinned = f.planner->obtain_pinned(*pg, EngineConfig{3, {}});
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
  EXPECT_EQ(f.backend->verifications, 2);
  // A wrong pinned one is refused as well.
  f.backend->wrong.insert("eng5");
  auto bad = f.planner->obtain_pinned(*pg, EngineConfig{5, {}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCheckFailed);
}

TEST(FirstUse, StorePlansAreCheckedUnlessTheBackendKnowsThemTuned) {
  Fixture f;
  f.backend->stored = true;
  f.backend->wrong.insert("eng7");
  auto r = f.planner->obtain(relu_graph());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("plan eng7 (from store) failed"), std::string::npos) << r.status().message();
}

// A backend error (out of memory) is no verdict: the plan is not served, and the next call checks again.
TEST(FirstUse, ABackendErrorIsNotKeptAsAVerdict) {
  Fixture f;
  f.backend->errors_first = 1;
  auto r = f.planner->obtain(relu_graph());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("first-use verification of plan eng1"), std::string::npos)
      << r.status().message();
  auto again = f.planner->obtain(relu_graph());
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(f.backend->verifications, 2);
}

TEST(FirstUse, OffServesUnverified) {
  Fixture f(FirstUse::kOff);
  f.backend->wrong.insert("eng1");
  auto r = f.planner->obtain(relu_graph());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(f.backend->verifications, 0);
  EXPECT_EQ(f.planner->stats().first_use_checks, 0);
}

// A backend that cannot check refuses to serve under the default, and says how to opt out.
TEST(FirstUse, ABackendThatCannotCheckServesNothingByDefault) {
  auto b = std::make_unique<UncheckingBackend>();
  UncheckingBackend* raw = b.get();
  auto planner = Planner::create_with_backend(std::move(b), PlannerOptions{});
  auto r = planner->obtain(relu_graph());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(r.status().message().find("PlannerOptions::first_use"), std::string::npos) << r.status().message();
  EXPECT_EQ(raw->runs, 0);
}

// Which sources are known to pass without a check: tuned plans and the stopgaps made of them; every other
// source is checked.
TEST(FirstUse, TunedPlansAndTheirStopgapsAreNotChecked) {
  VerifyingBackend backend;
  backend.wrong.insert("eng1");
  runtime_detail::FirstUseGate gate(FirstUse::kVerify, &backend);
  Graph g = relu_graph();
  auto sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  auto plan = backend.build(g, *sig, std::nullopt, PlanSource::kHeuristics);
  ASSERT_TRUE(plan.is_ok());
  for (PlanSource s : {PlanSource::kTuned, PlanSource::kSplit, PlanSource::kPadded})
    EXPECT_TRUE(gate.admit(**plan, s, "relu").is_ok()) << plan_source_name(s);
  EXPECT_EQ(backend.verifications, 0);
  for (PlanSource s : {PlanSource::kStore, PlanSource::kDynamic, PlanSource::kBucket, PlanSource::kHeuristics,
                       PlanSource::kPinned, PlanSource::kSegments})
    EXPECT_EQ(gate.admit(**plan, s, "relu").code(), StatusCode::kCheckFailed) << plan_source_name(s);
  EXPECT_EQ(backend.verifications, 1) << "one verdict per (structure, shape, configuration)";
  EXPECT_EQ(gate.checks(), 1);
  EXPECT_EQ(gate.refused(), 6);
}

// Heuristics that offer eng1 (their choice), then eng3 and eng5.
class ListingBackend : public VerifyingBackend {
 public:
  StatusOr<std::vector<EngineConfig>> heuristic_configs(const Graph&) override {
    return std::vector<EngineConfig>{EngineConfig{1, {}}, EngineConfig{3, {}}, EngineConfig{5, {}}};
  }
};

std::unique_ptr<Planner> listing_planner(ListingBackend** out) {
  auto b = std::make_unique<ListingBackend>();
  *out = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  return Planner::create_with_backend(std::move(b), o);
}

// The heuristics' choice fails the gate: the next configuration they offer that passes serves instead (the
// sweep's fp32 GEMVs whose first choice was off by 1e-3), each one checked first, and the why says so.
TEST(FirstUse, AFailedHeuristicChoiceGivesWayToTheNextThatPasses) {
  ListingBackend* b = nullptr;
  auto planner = listing_planner(&b);
  b->wrong = {"eng1", "eng3"};
  auto a = planner->obtain(relu_graph());
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->plan->identity(), "eng5");
  EXPECT_EQ(a->source, PlanSource::kHeuristics);
  EXPECT_NE(a->why.find("heuristics' choice eng1 failed first-use verification, eng5 (their choice 3) passed"),
            std::string::npos)
      << a->why;
  EXPECT_EQ(b->verifications, 3);
  EXPECT_EQ(b->caller_runs, 0) << "a plan ran for the caller during the checks";
  auto again = planner->obtain(relu_graph());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->plan->identity(), "eng5");
  EXPECT_EQ(b->verifications, 3);
  PlannerStats st = planner->stats();
  EXPECT_EQ(st.heuristic_fall_throughs, 1);
  EXPECT_NE(st.text().find("1 served by a later heuristic configuration"), std::string::npos) << st.text();
}

// None passes: refused, saying how many were tried; a pinned configuration never falls through.
TEST(FirstUse, WhenEveryHeuristicConfigurationFailsTheRefusalStands) {
  ListingBackend* b = nullptr;
  auto planner = listing_planner(&b);
  b->wrong = {"eng1", "eng3", "eng5"};
  auto r = planner->obtain(relu_graph());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCheckFailed);
  EXPECT_NE(r.status().message().find("so did the next 2 configurations cuDNN's heuristics offer"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(b->caller_runs, 0);
  EXPECT_EQ(planner->stats().heuristic_fall_throughs, 0);

  ListingBackend* b2 = nullptr;
  auto p2 = listing_planner(&b2);
  b2->wrong = {"eng3"};
  auto pg = p2->prepare(relu_graph());
  ASSERT_TRUE(pg.is_ok());
  auto pinned = p2->obtain_pinned(*pg, EngineConfig{3, {}});
  ASSERT_FALSE(pinned.is_ok()) << "a pinned configuration that failed was replaced by another";
  EXPECT_EQ(pinned.status().code(), StatusCode::kCheckFailed);
}

}  // namespace
}  // namespace kiln
