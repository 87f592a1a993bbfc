// The pointwise family's graph-layer module: the abs mode (added through docs/contributing.md "Adding an op
// or a pointwise mode") is named, unary, inferred, signed and counted like the other unary modes.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/graph_test_util.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/op_cost.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

Graph unary_graph(PointwiseMode mode) {
  Graph g;
  g.name = "pw";
  int x = add_tensor(g, "x", {2, 3, 4});
  add_node(g, "f", OpKind::kPointwise, {x}, "y");
  g.nodes[0].pointwise.mode = mode;
  g.outputs = {g.find_tensor("y")};
  return g;
}

TEST(PointwiseModes, AbsIsAUnaryModeWithItsName) {
  EXPECT_STREQ(pointwise_mode_name(PointwiseMode::kAbs), "abs");
  EXPECT_TRUE(pointwise_is_unary(PointwiseMode::kAbs));
  const auto& modes = pointwise_modes();
  EXPECT_NE(std::find(modes.begin(), modes.end(), PointwiseMode::kAbs), modes.end());
}

TEST(PointwiseModes, AbsInfersSignsAndCostsAsAUnaryOp) {
  Graph g = unary_graph(PointwiseMode::kAbs);
  ASSERT_TRUE(validate_graph(g).is_ok());
  EXPECT_EQ(g.tensors[g.outputs[0]].shape(), (std::vector<int64_t>{2, 3, 4}));
  auto sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  EXPECT_NE(sig->canonical.find("node n0 abs compute=fp32"), std::string::npos) << sig->canonical;
  Graph relu = unary_graph(PointwiseMode::kRelu);
  ASSERT_TRUE(validate_graph(relu).is_ok());
  EXPECT_NE(sig->structure, compute_signature(relu)->structure);
  EXPECT_DOUBLE_EQ(graph_cost(g).flops, 24);
  // Two inputs are refused, naming the node.
  Graph two = unary_graph(PointwiseMode::kAbs);
  two.nodes[0].inputs.push_back(0);
  EXPECT_ERROR_HAS(validate_graph(two), "node 'f' (abs)", "2 inputs, expected 1");
}

}  // namespace
}  // namespace kiln
