#include <gtest/gtest.h>

#include "graph/graph_test_util.h"
#include "kiln/graph/graph.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

TEST(GraphNames, DtypesRoundTrip) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFp8E4M3,
                     DataType::kFp8E5M2, DataType::kInt8, DataType::kInt32, DataType::kInt64}) {
    StatusOr<DataType> p = parse_dtype(dtype_name(t));
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(*p, t);
  }
  EXPECT_EQ(*parse_dtype("half"), DataType::kFloat16);
  EXPECT_EQ(*parse_dtype("float"), DataType::kFloat32);
  EXPECT_EQ(*parse_dtype("bfloat16"), DataType::kBFloat16);
  EXPECT_FALSE(parse_dtype("fp64").is_ok());
  EXPECT_NE(parse_dtype("fp64").status().message().find("'fp64'"), std::string::npos);
  EXPECT_EQ(dtype_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kFp8E4M3), 1u);
  EXPECT_STREQ(layout_name(Layout::kNHWC), "NHWC");
  EXPECT_STREQ(op_kind_name(OpKind::kRmsNorm), "rms_norm");
  EXPECT_STREQ(pointwise_mode_name(PointwiseMode::kGeluTanh), "gelu_tanh");
  EXPECT_STREQ(reduction_mode_name(ReductionMode::kAmax), "amax");
  EXPECT_TRUE(pointwise_is_unary(PointwiseMode::kSilu));
  EXPECT_FALSE(pointwise_is_unary(PointwiseMode::kBiasAdd));
}

TEST(GraphHelpers, RolesAndDtypes) {
  Graph g;
  int a = add_tensor(g, "a", {1, 4, 8});
  int b = add_tensor(g, "b", {1, 8, 2});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, "c");
  int c = g.find_tensor("c");
  g.nodes.push_back(Node{});
  g.nodes.back().name = "act";
  g.nodes.back().op = OpKind::kPointwise;
  g.nodes.back().pointwise.mode = PointwiseMode::kRelu;
  g.nodes.back().inputs = {c};
  int y = add_tensor(g, "y", {});
  g.nodes.back().outputs = {y};
  g.outputs = {y};
  EXPECT_TRUE(g.is_graph_input(a));
  EXPECT_TRUE(g.is_virtual(c));
  EXPECT_TRUE(g.is_graph_output(y));
  EXPECT_EQ(g.producer(c), 0);
  EXPECT_EQ(g.producer(a), -1);
  EXPECT_EQ(g.find_tensor("nope"), -1);
  EXPECT_EQ(g.dtype_of(a), DataType::kFloat16);  // io
  EXPECT_EQ(g.dtype_of(c), DataType::kFloat32);  // intermediate
  ASSERT_TRUE(validate_graph(g).is_ok()) << validate_graph(g).message();
  EXPECT_EQ(g.tensors[y].shape(), (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(g.tensors[y].element_count(), 8);
  EXPECT_EQ(g.tensors[y].strides, (std::vector<int64_t>{8, 2, 1}));
}

TEST(GraphLayout, PackedRowMajorIgnoresTheStrideOfAnExtentOneDim) {
  TensorDesc t;
  t.dims = {Dim{2, ""}, Dim{1, ""}, Dim{3, ""}, Dim{4, ""}};
  t.strides = {12, 12, 4, 1};
  EXPECT_TRUE(t.packed_row_major());
  t.strides[1] = 999;  // never read: the dim's only index is 0
  EXPECT_TRUE(t.packed_row_major());
  t.strides = {24, 12, 4, 1};  // a gap between the batch entries
  EXPECT_FALSE(t.packed_row_major());
  t.strides = {12, 12, 1, 3};  // column-major rows
  EXPECT_FALSE(t.packed_row_major());
  t.strides = {12, 4, 1};  // strides not filled in for every dim
  EXPECT_FALSE(t.packed_row_major());
}

TEST(GraphLayout, NhwcStridesKeepNchwDimOrder) {
  Graph g;
  int x = add_tensor(g, "x", {2, 3, 4, 5}, Layout::kNHWC);
  add_node(g, "r", OpKind::kPointwise, {x}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  ASSERT_TRUE(validate_graph(g).is_ok());
  EXPECT_EQ(g.tensors[x].strides, (std::vector<int64_t>{60, 1, 15, 3}));
  // The undeclared output takes its input's layout.
  EXPECT_EQ(g.tensors[1].layout, Layout::kNHWC);
  EXPECT_EQ(g.tensors[1].strides, (std::vector<int64_t>{60, 1, 15, 3}));
}

TEST(GraphLayout, ExplicitStridesAreChecked) {
  Graph g;
  int x = add_tensor(g, "x", {2, 3});
  g.tensors[x].layout = Layout::kExplicit;
  g.tensors[x].strides = {1};
  add_node(g, "r", OpKind::kPointwise, {x}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "1 strides for rank 2");
  g.tensors[x].strides = {1, 0};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "stride 1 is 0");
  g.tensors[x].strides = {1, 2};
  EXPECT_TRUE(validate_graph(g).is_ok());
  EXPECT_EQ(g.tensors[x].strides, (std::vector<int64_t>{1, 2}));
}

TEST(GraphLayout, NhwcNeedsRank3) {
  Graph g;
  int x = add_tensor(g, "x", {2, 3}, Layout::kNHWC);
  add_node(g, "r", OpKind::kPointwise, {x}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "layout NHWC needs rank 3");
}

TEST(GraphValidate, RevalidationIsIdempotent) {
  Graph g;
  int x = add_tensor(g, "x", {8, 16, 10, 10}, Layout::kNHWC);
  int w = add_tensor(g, "w", {32, 16, 3, 3}, Layout::kNHWC);
  add_node(g, "conv", OpKind::kConvFprop, {x, w}, "y");
  g.nodes[0].conv.stride = {2, 2};
  g.outputs = {g.find_tensor("y")};
  ASSERT_TRUE(validate_graph(g).is_ok());
  Graph copy = g;
  ASSERT_TRUE(validate_graph(copy).is_ok());
  EXPECT_EQ(copy.tensors[2].shape(), g.tensors[2].shape());
  EXPECT_EQ(copy.tensors[2].shape(), (std::vector<int64_t>{8, 32, 4, 4}));
}

}  // namespace
}  // namespace kiln
