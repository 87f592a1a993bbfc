// decompose_graph: the unfused alternative keeps the graph's inputs and outputs, materializes every
// intermediate once, and gives each node a graph of its own that validates.
#include <gtest/gtest.h>

#include "kiln/decompose.h"
#include "kiln/spec.h"

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

}  // namespace
}  // namespace kiln
