// decompose_graph: the unfused alternative keeps the graph's inputs and outputs, materializes every
// intermediate once, and gives each node a graph of its own that validates.
#include <gtest/gtest.h>

#include "kiln/graph/decompose.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

Graph load(const std::string& name) {
  auto g = parse_spec_file(kRoot + "/examples/" + name);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? std::move(g).value() : Graph{};
}

TEST(Decompose, MatmulBiasGeluBecomesThreePartsChainedThroughMemory) {
  Graph g = load("matmul_bias_gelu.json");
  auto parts = decompose_graph(g, g.io_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0].graph.name, "matmul_bias_gelu/mm");
  // Every part is one node whose outputs are all it returns.
  for (const GraphPart& p : *parts) {
    ASSERT_EQ(p.graph.nodes.size(), 1u);
    EXPECT_EQ(p.graph.outputs, p.graph.nodes[0].outputs);
    EXPECT_EQ(p.tensor_map.size(), p.graph.tensors.size());
    for (size_t i = 0; i < p.graph.tensors.size(); ++i) EXPECT_FALSE(p.graph.is_virtual(static_cast<int>(i)));
  }
  // The matmul's output, virtual fp32 in the fused graph, is a bf16 output of part 0 and an input of part 1.
  const GraphPart& mm = (*parts)[0];
  const int mm_out = mm.graph.outputs[0];
  const int original = mm.tensor_map[static_cast<size_t>(mm_out)];
  EXPECT_TRUE(g.is_virtual(original));
  EXPECT_EQ(g.dtype_of(original), DataType::kFloat32);
  EXPECT_EQ(mm.graph.dtype_of(mm_out), DataType::kBFloat16);
  const GraphPart& bias = (*parts)[1];
  bool consumed = false;
  for (int t : bias.graph.nodes[0].inputs) consumed |= bias.tensor_map[static_cast<size_t>(t)] == original;
  EXPECT_TRUE(consumed);
  // The last part writes the graph's output, with the graph's dtype.
  const GraphPart& gelu = parts->back();
  EXPECT_EQ(gelu.tensor_map[static_cast<size_t>(gelu.graph.outputs[0])], g.outputs[0]);
  EXPECT_EQ(gelu.graph.dtype_of(gelu.graph.outputs[0]), g.dtype_of(g.outputs[0]));
}

TEST(Decompose, MaterializedDtypeIsTheCallersChoice) {
  Graph g = load("matmul_bias_gelu.json");
  auto parts = decompose_graph(g, DataType::kFloat32);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  EXPECT_EQ((*parts)[0].graph.dtype_of((*parts)[0].graph.outputs[0]), DataType::kFloat32);
}

// A virtual tensor whose dtype the author declared crosses a boundary in that dtype, not the materialized one: an
// sdpa's fp32 statistics, read by a backward pass in another part (found by a hostile review: they crossed as the
// materialized bf16, and the part was refused).
TEST(Decompose, ADeclaredDtypeCrossesTheBoundaryAsDeclared) {
  auto g = parse_spec_string(R"({"name": "train", "io_dtype": "bf16", "intermediate_dtype": "bf16",
    "tensors": {"q": {"dims": [1, 2, 64, 64]}, "k": {"dims": [1, 2, 64, 64]}, "v": {"dims": [1, 2, 64, 64]},
                "do": {"dims": [1, 2, 64, 64]}, "o": {"dtype": "bf16"}, "lse": {"dtype": "float32"}},
    "nodes": [{"name": "fwd", "op": "sdpa", "causal": true, "inputs": ["q", "k", "v"], "outputs": ["o", "lse"]},
              {"name": "bwd", "op": "sdpa_backward", "causal": true, "inputs": ["q", "k", "v", "o", "do", "lse"],
               "outputs": ["dq", "dk", "dv"]}],
    "outputs": ["dq", "dk", "dv"]})",
                             "train.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto parts = decompose_graph(*g, DataType::kBFloat16);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  ASSERT_EQ(parts->size(), 2u);
  const GraphPart& fwd = (*parts)[0];
  ASSERT_EQ(fwd.graph.outputs.size(), 2u);
  EXPECT_EQ(fwd.graph.dtype_of(fwd.graph.outputs[0]), DataType::kBFloat16);
  EXPECT_EQ(fwd.graph.dtype_of(fwd.graph.outputs[1]), DataType::kFloat32);
  EXPECT_EQ((*parts)[1].graph.nodes[0].outputs.size(), 3u);
  // The fused segments cut between the two attention nodes as well: cuDNN runs each as its own operation.
  EXPECT_EQ(split_after_reductions(*g), (std::vector<int>{0, 1}));
}

TEST(Decompose, PartsDeclareOnlyTheDynamicDimsTheyUse) {
  Graph g = load("conv_bias_relu.json");
  ASSERT_EQ(g.dynamic_dims.count("batch"), 1u);
  auto parts = decompose_graph(g, g.io_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  ASSERT_EQ(parts->size(), g.nodes.size());
  for (const GraphPart& p : *parts) {
    EXPECT_EQ(p.graph.dynamic_dims.count("batch"), 1u) << p.graph.name;
    auto sig = compute_signature(p.graph);
    ASSERT_TRUE(sig.is_ok()) << sig.status().message();
    EXPECT_EQ(sig->shape_key, "batch=32") << p.graph.name;
  }
  // The parts are different computations: their structure signatures differ.
  EXPECT_NE(compute_signature((*parts)[0].graph)->structure, compute_signature((*parts)[1].graph)->structure);
}

TEST(Decompose, OutputsThatAreAlsoConsumedStayOutputs) {
  Graph g = load("matmul_amax.json");  // y is an output and the AMAX's input
  auto parts = decompose_graph(g, g.io_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  ASSERT_EQ(parts->size(), 2u);
  const int y = (*parts)[0].tensor_map[static_cast<size_t>((*parts)[0].graph.outputs[0])];
  EXPECT_TRUE(g.is_graph_output(y));
  EXPECT_EQ((*parts)[1].tensor_map[static_cast<size_t>((*parts)[1].graph.nodes[0].inputs[0])], y);
}

TEST(Decompose, SingleNodeGraphIsItsOwnPart) {
  Graph g = load("layer_norm.json");
  auto parts = decompose_graph(g, g.io_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  ASSERT_EQ(parts->size(), 1u);
  EXPECT_EQ(compute_signature((*parts)[0].graph)->structure, compute_signature(g)->structure);
}

// The decompositions kiln tune times: each node alone, then one cut after each of the first N - 1 nodes; every one
// partitions into parts that validate, and a cut's first part keeps its nodes fused (the GEMM with its bias).
TEST(Decompose, UnfusedGroupingsAreEachNodeThenEachCut) {
  Graph g = load("matmul_bias_gelu.json");
  auto groupings = unfused_groupings(g);
  ASSERT_TRUE(groupings.is_ok()) << groupings.status().message();
  ASSERT_EQ(groupings->size(), 3u);
  EXPECT_EQ((*groupings)[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ((*groupings)[1], (std::vector<int>{0, 1, 1}));
  EXPECT_EQ((*groupings)[2], (std::vector<int>{0, 0, 1}));
  std::vector<std::vector<std::string>> names;
  for (const std::vector<int>& groups : *groupings) {
    auto parts = partition_graph(g, groups, g.io_dtype);
    ASSERT_TRUE(parts.is_ok()) << parts.status().message();
    names.emplace_back();
    for (const GraphPart& p : *parts) names.back().push_back(p.graph.name);
  }
  EXPECT_EQ(names[1], (std::vector<std::string>{"matmul_bias_gelu/mm", "matmul_bias_gelu/add_bias+1"}));
  EXPECT_EQ(names[2], (std::vector<std::string>{"matmul_bias_gelu/mm+1", "matmul_bias_gelu/gelu"}));
  // Two nodes: the one cut is each node alone. One node: itself.
  Graph amax = load("matmul_amax.json");
  auto two = unfused_groupings(amax);
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(two->size(), 1u);
  auto one = unfused_groupings(load("layer_norm.json"));
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, (std::vector<std::vector<int>>{{0}}));
}

TEST(Split, Fp8RecipeIsCutAfterTheAmax) {
  Graph g = load("fp8_recipe.json");
  std::vector<int> groups = split_after_reductions(g);
  ASSERT_EQ(groups.size(), 3u);
  auto node = [&](const std::string& name) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].name == name) return groups[i];
    return -1;
  };
  EXPECT_EQ(node("mm"), 0);
  EXPECT_EQ(node("amax"), 0);  // the reduction stays fused behind the GEMM
  EXPECT_EQ(node("fp8_scale"), 1);
  auto parts = partition_graph(g, groups, g.intermediate_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().message();
  ASSERT_EQ(parts->size(), 2u);
  const Graph& first = (*parts)[0].graph;
  const Graph& second = (*parts)[1].graph;
  EXPECT_EQ(first.name, "fp8_recipe/mm+1");
  EXPECT_EQ(first.nodes.size(), 2u);
  // Segment 1 returns y (a graph output) and amax (read by segment 2), kept in fp32.
  ASSERT_EQ(first.outputs.size(), 2u);
  int amax = -1;
  for (int t : first.outputs)
    if (first.tensors[static_cast<size_t>(t)].name == "amax") amax = t;
  ASSERT_GE(amax, 0);
  EXPECT_EQ(first.dtype_of(amax), DataType::kFloat32);
  EXPECT_TRUE(second.is_graph_input(second.find_tensor("amax")));
  EXPECT_EQ(second.outputs.size(), 1u);
  EXPECT_EQ(second.tensors[static_cast<size_t>(second.outputs[0])].name, "scale");
}

TEST(Split, GraphsWithoutAReadReductionStayWhole) {
  for (const char* name : {"matmul_bias_gelu.json", "matmul_amax.json", "conv_bias_relu.json"}) {
    Graph g = load(name);
    std::vector<int> groups = split_after_reductions(g);
    for (int x : groups) EXPECT_EQ(x, 0) << name;
    auto parts = partition_graph(g, groups, g.intermediate_dtype);
    ASSERT_TRUE(parts.is_ok()) << parts.status().message();
    ASSERT_EQ(parts->size(), 1u);
    // One group is the graph itself: same signature.
    EXPECT_EQ(compute_signature((*parts)[0].graph)->structure, compute_signature(g)->structure) << name;
  }
}

TEST(Split, PartitionsThatRunBackwardsAreRefused) {
  Graph g = load("matmul_bias_gelu.json");
  std::vector<int> backwards(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name == "mm") backwards[i] = 1;  // the GEMM after its consumers
  auto parts = partition_graph(g, backwards, g.io_dtype);
  ASSERT_FALSE(parts.is_ok());
  EXPECT_NE(parts.status().message().find("from a later group"), std::string::npos) << parts.status().message();
  auto short_list = partition_graph(g, {0}, g.io_dtype);
  ASSERT_FALSE(short_list.is_ok());
  EXPECT_NE(short_list.status().message().find("1 group numbers for 3 nodes"), std::string::npos);
}

// A conv whose height is dynamic: the fused graph is one structure for every height (its derived extents are
// symbolic), but a part's inputs have extents of their own, so a part that reads the conv's output is
// another structure at another height (its key would otherwise not say which extent its plan was built for).
TEST(Decompose, APartsInputsKeepTheirExtentsWhereTheGraphDerivedThem) {
  auto spec = [](int64_t h) {
    return R"({"name": "cbr", "io_dtype": "fp16", "dynamic": {"h": )" + std::to_string(h) + R"(},
      "tensors": {"x": {"dims": [8, 16, "h", 12], "layout": "NHWC"}, "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"},
                  "b": {"dims": [1, 32, 1, 1], "layout": "NHWC"}},
      "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"], "padding": [1, 1]},
                {"name": "bias", "op": "bias_add", "inputs": ["c", "b"], "outputs": ["y"]}],
      "outputs": ["y"]})";
  };
  auto g12 = parse_spec_string(spec(12), "a.json"), g20 = parse_spec_string(spec(20), "b.json");
  ASSERT_TRUE(g12.is_ok() && g20.is_ok());
  EXPECT_EQ(compute_signature(*g12)->structure, compute_signature(*g20)->structure);
  auto p12 = decompose_graph(*g12, DataType::kFloat16), p20 = decompose_graph(*g20, DataType::kFloat16);
  ASSERT_TRUE(p12.is_ok() && p20.is_ok());
  // The conv part keeps the symbol on its input: one structure.
  EXPECT_EQ(compute_signature((*p12)[0].graph)->structure, compute_signature((*p20)[0].graph)->structure);
  // The bias part's input c has no symbol: its extent (12 or 20) is written, so the structures differ.
  auto s12 = compute_signature((*p12)[1].graph), s20 = compute_signature((*p20)[1].graph);
  EXPECT_NE(s12->structure, s20->structure);
  EXPECT_EQ(s12->canonical.find('~'), std::string::npos) << s12->canonical;
  for (const TensorDesc& d : (*p12)[1].graph.tensors)
    for (const Dim& dim : d.dims) EXPECT_FALSE(dim.derived) << d.name;
}

}  // namespace
}  // namespace kiln
