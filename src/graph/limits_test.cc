// What a graph may hold (kiln/graph/limits.h), the overflow-checked footprint of every tensor, outputs that
// would share memory, and validation that scales linearly in the number of nodes (GraphRoles).
#include <gtest/gtest.h>

#include <chrono>

#include "graph/graph_test_util.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/limits.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

// x [dims] -> relu -> y, fp32.
Graph relu_graph(std::vector<int64_t> dims) {
  Graph g;
  g.io_dtype = DataType::kFloat32;
  int x = add_tensor(g, "x", dims);
  add_node(g, "r", OpKind::kPointwise, {x}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  return g;
}

// A chain of `n` relus, built in O(n) (add_node's find_tensor would make building it quadratic).
Graph relu_chain(int n) {
  Graph g;
  g.name = "chain";
  g.io_dtype = DataType::kFloat32;
  add_tensor(g, "x", {4, 16, 64});
  g.tensors.reserve(static_cast<size_t>(n) + 1);
  g.nodes.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    TensorDesc t;
    t.name = i == n - 1 ? "y" : "t" + std::to_string(i);
    g.tensors.push_back(t);
    Node node;
    node.name = "n" + std::to_string(i);
    node.op = OpKind::kPointwise;
    node.pointwise.mode = PointwiseMode::kRelu;
    node.inputs = {i};
    node.outputs = {i + 1};
    g.nodes.push_back(node);
  }
  g.outputs = {n};
  return g;
}

TEST(GraphRoles, AnswersAsTheGraphDoes) {
  Graph g = relu_chain(5);
  g.tensors[2].dtype = DataType::kBFloat16;
  ASSERT_TRUE(validate_graph(g).is_ok());
  const GraphRoles roles(g);
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) {
    EXPECT_EQ(roles.producer(t), g.producer(t)) << t;
    EXPECT_EQ(roles.is_graph_input(t), g.is_graph_input(t)) << t;
    EXPECT_EQ(roles.is_graph_output(t), g.is_graph_output(t)) << t;
    EXPECT_EQ(roles.is_virtual(t), g.is_virtual(t)) << t;
    EXPECT_EQ(roles.dtype_of(t), g.dtype_of(t)) << t;
  }
  EXPECT_EQ(roles.consumer_count(0), 1);
  EXPECT_EQ(roles.consumer_count(5), 0);
  EXPECT_EQ(roles.producer(-1), -1);
  EXPECT_EQ(roles.producer(99), -1);
}

// Regression: validation looked each tensor's producer up with a scan of every node (20,000 nodes took
// 9.8 s, 100,000 nodes 230 s). Linear now: well under a second on a workstation; the bound leaves room
// for a loaded CI machine and still fails the quadratic version by a factor of ten.
TEST(ValidationScale, QuadraticProducerScan_100000NodeChainValidatesInSeconds) {
  Graph g = relu_chain(100000);
  auto t0 = std::chrono::steady_clock::now();
  Status st = validate_graph(g);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::printf("[ scale ] validate_graph of a 100,000-node chain: %.2f s\n", s);
  EXPECT_LT(s, 20.0);
  auto sig = compute_signature(g);  // the signature walks every tensor's role too
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  double s2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s2, 40.0);
}

TEST(GraphLimits, TooManyNodesIsRefusedFirstNamingTheLimit) {
  Graph g = relu_graph({4});
  g.nodes.resize(static_cast<size_t>(limits::kMaxNodes) + 1);  // unnamed, unconnected: never looked at
  Status st = validate_graph(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(st, "200001 nodes", "limit of 200000");
}

TEST(GraphLimits, TooManyTensorsIsRefusedFirstNamingTheLimit) {
  Graph g = relu_graph({4});
  g.tensors.resize(static_cast<size_t>(limits::kMaxTensors) + 1);
  Status st = validate_graph(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(st, "400001 tensors", "limit of 400000");
}

TEST(GraphLimits, RankAboveCudnnDimMaxIsRefusedNamingTheTensor) {
  Graph ok = relu_graph({2, 2, 2, 2, 2, 2, 2, 2});
  EXPECT_TRUE(validate_graph(ok).is_ok());
  Graph g = relu_graph({2, 2, 2, 2, 2, 2, 2, 2, 2});
  Status st = validate_graph(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(st, "tensor 'x'", "9 dims", "limit of 8", "CUDNN_DIM_MAX");
}

TEST(GraphLimits, LongNamesAreRefusedNamingWhat) {
  Graph g = relu_graph({4});
  g.tensors[0].name = std::string(257, 'x');
  g.nodes[0].inputs = {0};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'xxxxxxxxxx", "name: 257 bytes", "limit of 256");
  g = relu_graph({4});
  g.nodes[0].name = std::string(300, 'n');
  EXPECT_ERROR_HAS(validate_graph(g), "node 'nnnn", "300 bytes");
  g = relu_graph({4});
  g.name = std::string(1000, 'g');
  EXPECT_ERROR_HAS(validate_graph(g), "graph 'ggg", "1000 bytes");
  g = relu_graph({4});
  g.pin = "eng1" + std::string(300, '1');
  EXPECT_ERROR_HAS(validate_graph(g), "pin: 304 bytes");
  g = relu_graph({4});
  g.tensors[0].dims[0].symbol = std::string(257, 's');
  g.dynamic_dims[g.tensors[0].dims[0].symbol] = 4;
  EXPECT_ERROR_HAS(validate_graph(g), "dynamic dim 'ssss", "257 bytes");
  g = relu_graph({4});
  g.name = std::string(256, 'g');  // at the limit: fine
  EXPECT_TRUE(validate_graph(g).is_ok());
}

// Regression: a stride of 2^63-1 on a [4,4] tensor passed validation and then aborted the process with
// std::length_error when its host buffer was made.
TEST(Footprint, Stride2Pow63On4x4IsInvalidArgumentNamingTheStride) {
  Graph g = relu_graph({4, 4});
  g.tensors[0].layout = Layout::kExplicit;
  g.tensors[0].strides = {INT64_MAX, 1};
  Status st = validate_graph(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(st, "tensor 'x'", "strides [9223372036854775807,1]", "stride 0 is 9223372036854775807");
}

TEST(Footprint, EveryProductIsChecked) {
  // span fits in int64 elements, but not in bytes of fp32
  Graph g = relu_graph({4, 4});
  g.tensors[0].layout = Layout::kExplicit;
  g.tensors[0].strides = {int64_t{1} << 61, 1};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "reach past 4611686018427387904 bytes of fp32");
  // the sum of the reaches overflows although each product does not
  g = relu_graph({2, 2, 2});
  g.tensors[0].layout = Layout::kExplicit;
  g.tensors[0].strides = {int64_t{1} << 62, int64_t{1} << 62, 1};
  EXPECT_EQ(validate_graph(g).code(), StatusCode::kInvalidArgument);
  // dense, under 2^62 elements, but over 2^62 bytes of fp32
  g = relu_graph({(int64_t{1} << 31) - 1, (int64_t{1} << 31) - 1});
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "fp32 is more than 4611686018427387904 bytes");
  // the same as int8 fits
  g = relu_graph({(int64_t{1} << 31) - 1, (int64_t{1} << 31) - 1});
  g.nodes[0].pointwise.mode = PointwiseMode::kIdentity;
  g.tensors[0].dtype = g.tensors[1].dtype = DataType::kInt8;
  EXPECT_TRUE(validate_graph(g).is_ok());
  // a large but representable strided input is fine
  g = relu_graph({4, 4});
  g.tensors[0].layout = Layout::kExplicit;
  g.tensors[0].strides = {int64_t{1} << 40, 1};
  EXPECT_TRUE(validate_graph(g).is_ok());
}

// Regression: output strides that make two elements share memory ([1,1] for a [4,4] output) were
// accepted, so the result depended on the kernel's write order.
TEST(OutputStrides, OverlappingOutputIsRefusedNamingNodeAndTensor) {
  Graph g = relu_graph({4, 4});
  TensorDesc& y = g.tensors[1];
  y.layout = Layout::kExplicit;
  y.dims = {Dim{4, ""}, Dim{4, ""}};
  y.strides = {1, 1};
  Status st = validate_graph(g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(st, "node 'r' (relu)", "output 'y'", "strides [1,1]", "share memory");
  y.strides = {4, 2};  // [0..3] x 4 and [0..3] x 2 meet at 4
  EXPECT_ERROR_HAS(validate_graph(g), "output 'y'", "share memory");
  y.strides = {1, 4};  // column-major: no overlap
  EXPECT_TRUE(validate_graph(g).is_ok());
  y.strides = {8, 1};  // padded rows: no overlap
  EXPECT_TRUE(validate_graph(g).is_ok());
  y.dims = {Dim{4, ""}, Dim{1, ""}};
  y.strides = {1, 1};  // an axis of extent 1 is never stepped along
  g.tensors[0].dims = {Dim{4, ""}, Dim{1, ""}};
  EXPECT_TRUE(validate_graph(g).is_ok());
}

TEST(OutputStrides, OverlappingInputsAreReadFine) {
  Graph g = relu_graph({4, 4});
  g.tensors[0].layout = Layout::kExplicit;
  g.tensors[0].strides = {1, 1};  // a sliding window view: every element is read, none written
  EXPECT_TRUE(validate_graph(g).is_ok());
}

}  // namespace
}  // namespace kiln
