// The unfused chain as one plan (kiln/runtime/unfused_plan.h): which buffer each part's tensors get, where the
// workspace puts what crosses between parts, and the parts that do not fit the graph.
#include <gtest/gtest.h>

#include <memory>

#include "kiln/graph/decompose.h"
#include "kiln/runtime/unfused_plan.h"
#include "kiln/spec/spec.h"
#include "runtime/planner_test_util.h"

namespace kiln {
namespace {

struct PartRun {
  std::string graph;
  std::map<std::string, void*> by_name;
  void* workspace = nullptr;
};

// Records every run: the part's graph name, its pointers by tensor name, its workspace.
class Recorder : public PlanExecutor {
 public:
  Recorder(const Graph& g, std::shared_ptr<std::vector<PartRun>> log) : graph_(g), log_(std::move(log)) {}
  Status run(cudaStream_t, const std::map<int, void*>& pointers, void* workspace) const override {
    PartRun r{graph_.name, {}, workspace};
    for (const auto& [t, p] : pointers) r.by_name[graph_.tensors[static_cast<size_t>(t)].name] = p;
    log_->push_back(std::move(r));
    return Status::ok();
  }

 private:
  Graph graph_;
  std::shared_ptr<std::vector<PartRun>> log_;
};

struct Chain {
  Graph graph = token_graph(64);
  GraphSignature sig;
  std::vector<GraphPart> parts;
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  std::shared_ptr<std::vector<PartRun>> log = std::make_shared<std::vector<PartRun>>();
  explicit Chain(std::vector<int64_t> part_workspaces = {0, 4096, 100}) {
    auto s = compute_signature(graph);
    EXPECT_TRUE(s.is_ok());
    sig = *s;
    auto p = decompose_graph(graph, DataType::kFloat16);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    parts = *p;
    for (size_t i = 0; i < parts.size(); ++i) {
      auto ps = compute_signature(parts[i].graph);
      EXPECT_TRUE(ps.is_ok());
      plans.push_back(std::make_shared<ExecutablePlan>(
          parts[i].graph, *ps, EngineConfig{static_cast<int64_t>(10 + i), {}}, part_workspaces[i], PlanSource::kStore,
          std::make_unique<Recorder>(parts[i].graph, log)));
    }
  }
};

TEST(UnfusedPlan, RunsThePartsInOrderOnTheCallersBuffersAndTheWorkspace) {
  Chain c;
  ASSERT_EQ(c.parts.size(), 3u);
  auto plan = make_unfused_plan(c.graph, c.sig, c.parts, c.plans, PlanSource::kStore);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const ExecutablePlan& p = **plan;
  EXPECT_EQ(p.parts().size(), 3u);
  EXPECT_EQ(p.identity(), "unfused[eng10 + eng11 + eng12]");
  EXPECT_EQ(p.built_from(), PlanSource::kStore);
  // Two fp16 intermediates of 64x256 (h, hb), each aligned, then the largest part workspace (4096).
  const int64_t inter = 64 * 256 * 2;
  EXPECT_EQ(p.workspace_bytes(), 2 * inter + 4096);
  auto layout = unfused_layout(c.graph, c.parts, c.plans);
  ASSERT_TRUE(layout.is_ok());
  EXPECT_EQ(layout->parts_workspace_offset, 2 * inter);

  // It binds the fused graph's inputs and outputs, nothing else: an intermediate cannot be bound.
  alignas(256) static char x[64 * 128 * 2], w[128 * 256 * 2], b[256 * 2], y[64 * 256 * 2];
  alignas(256) static char ws[2 * 64 * 256 * 2 + 4096];
  TensorBindings bind = {{"x", {x, sizeof x}}, {"w", {w, sizeof w}}, {"b", {b, sizeof b}}, {"y", {y, sizeof y}}};
  TensorBindings extra = bind;
  extra["h"] = {x, 0};
  EXPECT_EQ(p.check_bindings(extra).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.execute(nullptr, bind, nullptr).code(), StatusCode::kInvalidArgument);  // needs its workspace
  ASSERT_TRUE(c.log->empty());
  ASSERT_TRUE(p.execute(nullptr, bind, ws).is_ok());

  ASSERT_EQ(c.log->size(), 3u);
  const PartRun& mm = (*c.log)[0];
  const PartRun& bias = (*c.log)[1];
  const PartRun& gelu = (*c.log)[2];
  EXPECT_EQ(mm.graph, c.parts[0].graph.name);
  EXPECT_EQ(gelu.graph, c.parts[2].graph.name);
  // Graph inputs and outputs: the caller's buffers.
  EXPECT_EQ(mm.by_name.at("x"), x);
  EXPECT_EQ(mm.by_name.at("w"), w);
  EXPECT_EQ(bias.by_name.at("b"), b);
  EXPECT_EQ(gelu.by_name.at("y"), y);
  // What crosses: the producer's output is the consumer's input, in the workspace, apart.
  EXPECT_EQ(mm.by_name.at("h"), bias.by_name.at("h"));
  EXPECT_EQ(bias.by_name.at("hb"), gelu.by_name.at("hb"));
  char* h = static_cast<char*>(mm.by_name.at("h"));
  char* hb = static_cast<char*>(bias.by_name.at("hb"));
  EXPECT_GE(h, ws);
  EXPECT_GE(hb, ws);
  EXPECT_LE(h + inter, ws + 2 * inter);
  EXPECT_LE(hb + inter, ws + 2 * inter);
  EXPECT_TRUE(h + inter <= hb || hb + inter <= h) << "intermediates overlap";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % kBindingAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(hb) % kBindingAlignment, 0u);
  // The parts' own workspace after the intermediates; none for a part that needs none.
  EXPECT_EQ(mm.workspace, nullptr);
  EXPECT_EQ(bias.workspace, ws + 2 * inter);
  EXPECT_EQ(gelu.workspace, ws + 2 * inter);
}

TEST(UnfusedPlan, PartsThatDoNotFitTheGraphAreRefused) {
  Chain c;
  auto fewer = c.plans;
  fewer.pop_back();
  auto a = make_unfused_plan(c.graph, c.sig, c.parts, fewer, PlanSource::kStore);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("3 parts but 2 plans"), std::string::npos) << a.status().message();
  // A part's plan for another graph (the fused one, not the part).
  auto swapped = c.plans;
  swapped[1] = std::make_shared<ExecutablePlan>(c.graph, c.sig, EngineConfig{1, {}}, 0, PlanSource::kStore,
                                                std::make_unique<Recorder>(c.graph, c.log));
  auto b = make_unfused_plan(c.graph, c.sig, c.parts, swapped, PlanSource::kStore);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("part 1"), std::string::npos) << b.status().message();
  // One part is no chain.
  std::vector<GraphPart> one(c.parts.begin(), c.parts.begin() + 1);
  auto d = make_unfused_plan(c.graph, c.sig, one, {c.plans[0]}, PlanSource::kStore);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  // An intermediate whose producer and consumer disagree on its size: the consumer built for 32 tokens.
  Chain small(std::vector<int64_t>{0, 0, 0});
  Graph g32 = token_graph(32);
  auto p32 = decompose_graph(g32, DataType::kFloat16);
  ASSERT_TRUE(p32.is_ok());
  auto mixed = small.plans;
  auto s32 = compute_signature((*p32)[1].graph);
  mixed[1] = std::make_shared<ExecutablePlan>((*p32)[1].graph, *s32, EngineConfig{1, {}}, 0, PlanSource::kStore,
                                              std::make_unique<Recorder>((*p32)[1].graph, small.log));
  auto e = make_unfused_plan(small.graph, small.sig, small.parts, mixed, PlanSource::kStore);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("bytes in an earlier part"), std::string::npos) << e.status().message();
  EXPECT_TRUE(small.log->empty());
}

// Where every tensor between parts is also a graph output, nothing lives in the workspace: a chain whose
// parts need none has workspace_bytes() 0 and runs without one (found by review).
TEST(UnfusedPlan, AChainWithNothingBetweenItsPartsNeedsNoWorkspace) {
  auto g = parse_spec_string(R"({"name": "both", "io_dtype": "fp16",
    "tensors": {"x": {"dims": [1, 64, 128]}, "w": {"dims": [1, 128, 256]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
              {"name": "act", "op": "relu", "inputs": ["h"], "outputs": ["y"]}],
    "outputs": ["h", "y"]})",
                             "both.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto sig = compute_signature(*g);
  auto parts = decompose_graph(*g, DataType::kFloat16);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  auto log = std::make_shared<std::vector<PartRun>>();
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  for (const GraphPart& p : *parts)
    plans.push_back(std::make_shared<ExecutablePlan>(p.graph, *compute_signature(p.graph), EngineConfig{1, {}}, 0,
                                                     PlanSource::kStore, std::make_unique<Recorder>(p.graph, log)));
  auto plan = make_unfused_plan(*g, *sig, *parts, plans, PlanSource::kStore);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ((*plan)->workspace_bytes(), 0);
  alignas(256) static char x[64 * 128 * 2], w[128 * 256 * 2], h[64 * 256 * 2], y[64 * 256 * 2];
  TensorBindings bind = {{"x", {x, 0}}, {"w", {w, 0}}, {"h", {h, 0}}, {"y", {y, 0}}};
  Status st = (*plan)->execute(nullptr, bind, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(log->size(), 2u);
  EXPECT_EQ((*log)[0].by_name.at("h"), h);
  EXPECT_EQ((*log)[1].by_name.at("h"), h);
}

}  // namespace
}  // namespace kiln
