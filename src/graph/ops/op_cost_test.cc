// One cost per op family (kiln/graph/op_cost.h): what the tuner's TFLOP/s and the host reference's cap
// both count.
#include "kiln/graph/op_cost.h"

#include <gtest/gtest.h>

#include "graph/graph_test_util.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

Graph validated(Graph g) {
  Status s = validate_graph(g);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return g;
}

TEST(OpCost, MatmulCountsTwoFlopsPerMultiplyAccumulate) {
  Graph g;
  g.name = "mm";
  int a = add_tensor(g, "a", {4, 8, 16}), b = add_tensor(g, "b", {16, 32});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, "c");
  g.outputs = {g.find_tensor("c")};
  g = validated(g);
  const OpCost c = graph_cost(g);
  EXPECT_DOUBLE_EQ(c.macs, 4.0 * 8 * 32 * 16);
  EXPECT_DOUBLE_EQ(c.flops, 2 * c.macs);
  EXPECT_DOUBLE_EQ(c.bytes, (4.0 * 8 * 16 + 16 * 32 + 4 * 8 * 32) * 2);  // fp16 inputs and output
}

TEST(OpCost, ConvCountsTheSameForEachDirection) {
  // x [2, 8, 10, 10], w [16, 4, 3, 3] (groups 2), y [2, 16, 8, 8]: N*K*out * C/g*filter.
  const double macs = 2.0 * 16 * 8 * 8 * 4 * 3 * 3;
  for (OpKind op : {OpKind::kConvFprop, OpKind::kConvDgrad, OpKind::kConvWgrad}) {
    Graph g;
    g.name = "conv";
    const int x = add_tensor(g, "x", {2, 8, 10, 10}), w = add_tensor(g, "w", {16, 4, 3, 3}),
              y = add_tensor(g, "y", {2, 16, 8, 8});
    Node n;
    n.name = "conv";
    n.op = op;
    n.conv.groups = 2;
    n.inputs = op == OpKind::kConvFprop   ? std::vector<int>{x, w}
               : op == OpKind::kConvDgrad ? std::vector<int>{y, w}
                                          : std::vector<int>{x, y};
    n.outputs = {op == OpKind::kConvFprop ? y : op == OpKind::kConvDgrad ? x : w};
    g.nodes.push_back(n);
    g.outputs = n.outputs;
    g = validated(g);
    SCOPED_TRACE(op_kind_name(op));
    EXPECT_DOUBLE_EQ(node_cost(g, 0).macs, macs);
    EXPECT_DOUBLE_EQ(node_cost(g, 0).flops, 2 * macs);
  }
}

TEST(OpCost, CausalSdpaCountsTheUnmaskedPairs) {
  for (bool causal : {false, true}) {
    Graph g;
    g.name = "attn";
    int q = add_tensor(g, "q", {1, 2, 4, 8}), k = add_tensor(g, "k", {1, 2, 6, 8}),
        v = add_tensor(g, "v", {1, 2, 6, 16});
    add_node(g, "attn", OpKind::kSdpa, {q, k, v}, "o");
    g.nodes[0].sdpa.causal = causal;
    g.outputs = {g.find_tensor("o")};
    g = validated(g);
    // Query i scores keys [0, min(i + 1, 6)) when causal: 1 + 2 + 3 + 4 pairs per head, else 4 * 6.
    const double pairs = causal ? 10 : 24;
    EXPECT_DOUBLE_EQ(graph_cost(g).macs, 2 * pairs * (8 + 16));
    EXPECT_DOUBLE_EQ(graph_cost(g).flops, 2 * graph_cost(g).macs);
  }
}

TEST(OpCost, ElementOpsCountOnePerOutputAndVirtualTensorsMoveNoBytes) {
  Graph g;
  g.name = "pw";
  int a = add_tensor(g, "a", {1, 8}), b = add_tensor(g, "b", {4, 8});
  add_node(g, "add", OpKind::kPointwise, {a, b}, "s");
  g.nodes[0].pointwise.mode = PointwiseMode::kAdd;
  add_node(g, "act", OpKind::kPointwise, {g.find_tensor("s")}, "y");
  g.nodes[1].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  g = validated(g);
  EXPECT_DOUBLE_EQ(node_cost(g, 0).macs, 32);  // the broadcast output, not the first input
  EXPECT_DOUBLE_EQ(graph_cost(g).flops, 64);
  EXPECT_DOUBLE_EQ(graph_cost(g).bytes, (8.0 + 32 + 32) * 2);  // s stays on chip
}

}  // namespace
}  // namespace kiln
