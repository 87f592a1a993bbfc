// CapturedSequence on the host, with plans from a Planner over a fake backend: every step checked before
// anything runs, the switch (per Planner and per sequence), stream launches when graphs are off, rebind's
// checks keeping the old bindings, the stats' words. Capture, update and replay themselves need a device:
// capture_gpu_test.cc.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "kiln/capture/capture.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

Graph relu_graph(const std::string& name, int cols) {
  const std::string spec = R"({
    "name": ")" + name + R"(", "io_dtype": "fp16",
    "tensors": {"x": {"dims": [4, )" +
                           std::to_string(cols) + R"(]}},
    "nodes": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
    "outputs": ["y"]})";
  auto g = parse_spec_string(spec, name + ".json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

// What the fake plans were asked to run, in order.
struct Call {
  std::string graph;
  cudaStream_t stream;
  std::map<int, void*> pointers;
  void* workspace;
};
struct Log {
  std::mutex mu;
  std::vector<Call> calls;
  int fail_at = -1;  // the call (0-based) that fails, -1: none
};

class LoggingExecutor : public PlanExecutor {
 public:
  LoggingExecutor(Log* log, std::string graph) : log_(log), graph_(std::move(graph)) {}
  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    std::lock_guard<std::mutex> lock(log_->mu);
    if (static_cast<int>(log_->calls.size()) == log_->fail_at) return unavailable("the fake plan fails (injected)");
    log_->calls.push_back({graph_, stream, pointers, workspace});
    return Status::ok();
  }

 private:
  Log* log_;
  std::string graph_;
};

class LoggingBackend : public PlanBackend {
 public:
  explicit LoggingBackend(Log* log, int64_t workspace) : log_(log), workspace_(workspace) {}
  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph&, const GraphSignature&,
                                                             std::string* why) override {
    *why = "no store";
    return std::shared_ptr<const ExecutablePlan>();
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return std::vector<TunedShape>{}; }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan&) override {
    return FirstUseVerdict{true, true, "fake plan: nothing to compute"};
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>&, PlanSource s) override {
    return std::shared_ptr<const ExecutablePlan>(std::make_shared<ExecutablePlan>(
        g, sig, EngineConfig{3, {}}, workspace_, s, std::make_unique<LoggingExecutor>(log_, g.name)));
  }

 private:
  Log* log_;
  int64_t workspace_;
};

void* fake_ptr(uintptr_t k) { return reinterpret_cast<void*>(k * 0x1000); }

struct Fixture {
  Log log;
  std::unique_ptr<Planner> planner;
  std::shared_ptr<const ExecutablePlan> act, other;
  explicit Fixture(bool graphs = true, int64_t workspace = 0) {
    PlannerOptions o;
    o.cuda_graphs = graphs;
    planner = Planner::create_with_backend(std::make_unique<LoggingBackend>(&log, workspace), o);
    auto a = planner->obtain(relu_graph("act", 64));
    EXPECT_TRUE(a.is_ok()) << a.status().to_string();
    if (a.is_ok()) act = a->plan;
    auto b = planner->obtain(relu_graph("other", 128));
    EXPECT_TRUE(b.is_ok()) << b.status().to_string();
    if (b.is_ok()) other = b->plan;
  }
  // A chain of `n` steps of `act`: step i reads buffer base+i and writes base+i+1.
  std::vector<CaptureStep> chain(int n, uintptr_t base = 1, void* ws = nullptr) const {
    std::vector<CaptureStep> s;
    for (int i = 0; i < n; ++i) {
      const uintptr_t k = base + static_cast<uintptr_t>(i);
      s.push_back({act, {{"x", {fake_ptr(k)}}, {"y", {fake_ptr(k + 1)}}}, ws});
    }
    return s;
  }
};

TEST(Capture, AnEmptySequenceIsRefused) {
  Fixture f;
  auto seq = CapturedSequence::create(*f.planner, {});
  ASSERT_FALSE(seq.is_ok());
  EXPECT_EQ(seq.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(seq.status().message().find("at least one step"), std::string::npos) << seq.status().to_string();
}

TEST(Capture, AStepWithoutAPlanIsRefused) {
  Fixture f;
  auto steps = f.chain(2);
  steps[1].plan = nullptr;
  auto seq = CapturedSequence::create(*f.planner, steps);
  ASSERT_FALSE(seq.is_ok());
  EXPECT_NE(seq.status().to_string().find("step 1: no plan"), std::string::npos) << seq.status().to_string();
}

TEST(Capture, ABadBindingIsRefusedBeforeAnythingRunsAndNamesStepAndTensor) {
  Fixture f;
  auto steps = f.chain(3);
  steps[2].tensors.erase("y");
  auto seq = CapturedSequence::create(*f.planner, steps);
  ASSERT_FALSE(seq.is_ok());
  EXPECT_EQ(seq.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = seq.status().to_string();
  EXPECT_NE(msg.find("step 2 (graph 'act')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'y' is not bound"), std::string::npos) << msg;

  steps = f.chain(2);
  steps[0].tensors["x"].ptr = reinterpret_cast<void*>(0x1004);  // misaligned
  seq = CapturedSequence::create(*f.planner, steps);
  ASSERT_FALSE(seq.is_ok());
  EXPECT_NE(seq.status().to_string().find("aligned"), std::string::npos) << seq.status().to_string();
  EXPECT_TRUE(f.log.calls.empty());
}

TEST(Capture, AMissingWorkspaceIsRefused) {
  Fixture f(true, /*workspace=*/1024);
  auto seq = CapturedSequence::create(*f.planner, f.chain(2));
  ASSERT_FALSE(seq.is_ok());
  EXPECT_NE(seq.status().to_string().find("needs a workspace of 1024 bytes"), std::string::npos)
      << seq.status().to_string();
  auto ok = CapturedSequence::create(*f.planner, f.chain(2, 1, fake_ptr(99)));
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
}

TEST(Capture, GraphsOffThePlannerLaunchesTheStepsInOrderOnTheStream) {
  Fixture f(/*graphs=*/false);
  auto seq = CapturedSequence::create(*f.planner, f.chain(3));
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  EXPECT_FALSE((*seq)->uses_graphs());
  EXPECT_EQ((*seq)->size(), 3u);
  ASSERT_TRUE((*seq)->capture(nullptr).is_ok());  // nothing to capture
  EXPECT_FALSE((*seq)->captured());
  auto stream = reinterpret_cast<cudaStream_t>(0x5000);  // never dereferenced by the fake
  for (int r = 0; r < 2; ++r) ASSERT_TRUE((*seq)->replay(stream).is_ok());
  ASSERT_EQ(f.log.calls.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const Call& c = f.log.calls[i];
    EXPECT_EQ(c.stream, stream);
    const uintptr_t k = 1 + i % 3;
    EXPECT_EQ(c.pointers.size(), 2u);
    EXPECT_EQ(c.pointers.begin()->second, fake_ptr(k)) << i;                 // x (tensor 0)
    EXPECT_EQ(std::next(c.pointers.begin())->second, fake_ptr(k + 1)) << i;  // y
  }
  const CaptureStats st = (*seq)->stats();
  EXPECT_FALSE(st.graphs);
  EXPECT_EQ(st.stream_runs, 2);
  EXPECT_EQ(st.captures, 0);
  EXPECT_EQ(st.replays, 0);
  EXPECT_EQ(st.text(), "graphs off: 2 stream runs");
  // The Planner sums its sequences.
  auto second = CapturedSequence::create(*f.planner, f.chain(1));
  ASSERT_TRUE(second.is_ok());
  ASSERT_TRUE((*second)->replay(stream).is_ok());
  const PlannerStats ps = f.planner->stats();
  EXPECT_EQ(ps.graph_stream_runs, 3);
  EXPECT_EQ(ps.graph_replays, 0);
  EXPECT_NE(ps.text().find("; graphs: 0 captures, 0 instantiations, 0 replays, 3 stream runs, 0 updates, 0 refused, "
                           "0 re-instantiations"),
            std::string::npos)
      << ps.text();
}

TEST(Capture, ASequenceMayOutliveItsPlanner) {
  Fixture f(false);
  auto seq = CapturedSequence::create(*f.planner, f.chain(2));
  ASSERT_TRUE(seq.is_ok());
  f.planner.reset();  // the plans (held by the sequence) and the counters stay
  ASSERT_TRUE((*seq)->replay(nullptr).is_ok());
  EXPECT_EQ(f.log.calls.size(), 2u);
}

TEST(Capture, APlannerWithoutSequencesSaysNothingOfGraphs) {
  Fixture f;
  EXPECT_EQ(f.planner->stats().text().find("graphs"), std::string::npos) << f.planner->stats().text();
}

TEST(Capture, ThePerSequenceSwitchOverridesThePlanners) {
  Fixture on(true), off(false);
  CaptureOptions no;
  no.cuda_graphs = false;
  auto a = CapturedSequence::create(*on.planner, on.chain(1), no);
  ASSERT_TRUE(a.is_ok());
  EXPECT_FALSE((*a)->uses_graphs());
  CaptureOptions yes;
  yes.cuda_graphs = true;
  auto b = CapturedSequence::create(*off.planner, off.chain(1), yes);
  ASSERT_TRUE(b.is_ok());
  EXPECT_TRUE((*b)->uses_graphs());
  auto c = CapturedSequence::create(*on.planner, on.chain(1));
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE((*c)->uses_graphs());
  EXPECT_TRUE((*c)->stats().graphs);
}

TEST(Capture, CaptureOnTheLegacyDefaultStreamIsRefusedBeforeAnythingRuns) {
  Fixture f;
  auto seq = CapturedSequence::create(*f.planner, f.chain(2));
  ASSERT_TRUE(seq.is_ok());
  Status st = (*seq)->capture(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("legacy default stream"), std::string::npos) << st.to_string();
  st = (*seq)->replay(nullptr);  // replay captures first: the same refusal
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(f.log.calls.empty());  // not even the warm-up ran
  EXPECT_FALSE((*seq)->captured());
  EXPECT_EQ((*seq)->stats().captures, 0);
}

TEST(Capture, AFailingStepNamesItselfAndTheRunIsNotCounted) {
  Fixture f(false);
  auto seq = CapturedSequence::create(*f.planner, f.chain(3));
  ASSERT_TRUE(seq.is_ok());
  f.log.fail_at = 1;
  Status st = (*seq)->replay(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.to_string().find("step 1 (graph 'act')"), std::string::npos) << st.to_string();
  EXPECT_EQ((*seq)->stats().stream_runs, 0);
}

TEST(Capture, RebindChecksEverythingAndKeepsTheOldBindingsOnARefusal) {
  Fixture f(false);
  auto seq = CapturedSequence::create(*f.planner, f.chain(2));
  ASSERT_TRUE(seq.is_ok());
  // Another number of steps.
  Status st = (*seq)->rebind(f.chain(3, 10), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("changes buffers only"), std::string::npos) << st.to_string();
  // Another plan.
  auto other = f.chain(2, 10);
  other[1].plan = f.other;
  st = (*seq)->rebind(other, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("step 1 (graph 'other'): another plan"), std::string::npos) << st.to_string();
  // A bad binding.
  auto bad = f.chain(2, 10);
  bad[0].tensors["x"].ptr = nullptr;
  st = (*seq)->rebind(bad, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.to_string().find("null pointer"), std::string::npos) << st.to_string();
  // Still the old buffers.
  ASSERT_TRUE((*seq)->replay(nullptr).is_ok());
  ASSERT_EQ(f.log.calls.size(), 2u);
  EXPECT_EQ(f.log.calls[0].pointers.begin()->second, fake_ptr(1));
  EXPECT_EQ((*seq)->stats().rebinds, 0);
  // A good rebind: the new buffers from the next run on.
  ASSERT_TRUE((*seq)->rebind(f.chain(2, 10), nullptr).is_ok());
  ASSERT_TRUE((*seq)->replay(nullptr).is_ok());
  ASSERT_EQ(f.log.calls.size(), 4u);
  EXPECT_EQ(f.log.calls[2].pointers.begin()->second, fake_ptr(10));
  EXPECT_EQ(f.log.calls[3].pointers.begin()->second, fake_ptr(11));
  EXPECT_EQ((*seq)->stats().rebinds, 1);
  EXPECT_EQ((*seq)->stats().updates, 0);  // nothing captured: nothing to update
}

TEST(Capture, RebindBeforeTheFirstCaptureOnlyTakesTheNewBindings) {
  Fixture f(true);
  auto seq = CapturedSequence::create(*f.planner, f.chain(2));
  ASSERT_TRUE(seq.is_ok());
  ASSERT_TRUE((*seq)->rebind(f.chain(2, 20), nullptr).is_ok());  // no stream needed: nothing recorded yet
  const CaptureStats st = (*seq)->stats();
  EXPECT_EQ(st.rebinds, 1);
  EXPECT_EQ(st.captures + st.updates + st.reinstantiations, 0);
  EXPECT_TRUE(f.log.calls.empty());
}

TEST(Capture, StatsSayWhatHappened) {
  CaptureStats s;
  s.captures = 3;
  s.instantiations = 2;
  s.replays = 100;
  s.rebinds = 2;
  s.updates = 1;
  s.update_refusals = 1;
  s.reinstantiations = 1;
  s.last_refusal = "the graph's topology changed";
  EXPECT_EQ(s.text(),
            "graphs: 3 captures, 2 instantiations, 100 replays; 2 rebinds: 1 update, 1 refused, 1 re-instantiation "
            "(last refusal: the graph's topology changed)");
  CaptureStats one;
  one.captures = one.instantiations = one.replays = 1;
  EXPECT_EQ(one.text(),
            "graphs: 1 capture, 1 instantiation, 1 replay; 0 rebinds: 0 updates, 0 refused, 0 re-instantiations");
  EXPECT_STREQ(capture_mode_name(CaptureMode::kThreadLocal), "thread-local");
  EXPECT_STREQ(capture_mode_name(CaptureMode::kRelaxed), "relaxed");
}

}  // namespace
}  // namespace kiln
