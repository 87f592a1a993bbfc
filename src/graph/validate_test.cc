// Structure checks of validate_graph on graphs built directly in the IR (op-level inference and dtype
// rules are covered through specs in src/spec/spec_test.cc).
#include <gtest/gtest.h>

#include "graph/graph_test_util.h"
#include "kiln/graph/graph.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

// x -> relu(a) -> relu(b) -> y
Graph chain() {
  Graph g;
  int x = add_tensor(g, "x", {4, 8});
  add_node(g, "a", OpKind::kPointwise, {x}, "t");
  add_node(g, "b", OpKind::kPointwise, {g.find_tensor("t")}, "y");
  g.nodes[0].pointwise.mode = g.nodes[1].pointwise.mode = PointwiseMode::kRelu;
  g.outputs = {g.find_tensor("y")};
  return g;
}

TEST(GraphStructure, ChainIsValid) {
  Graph g = chain();
  EXPECT_TRUE(validate_graph(g).is_ok());
}

TEST(GraphStructure, MissingTensor) {
  Graph g = chain();
  g.nodes[1].inputs = {42};
  EXPECT_ERROR_HAS(validate_graph(g), "node 'b' (relu)", "input 0 refers to a missing tensor (#42)");
  g = chain();
  g.outputs = {-1};
  EXPECT_ERROR_HAS(validate_graph(g), "graph output refers to a missing tensor");
}

TEST(GraphStructure, DanglingTensorAndOutput) {
  Graph g = chain();
  add_tensor(g, "unused", {1});
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'unused' is dangling");
  g = chain();
  add_node(g, "c", OpKind::kPointwise, {g.find_tensor("t")}, "side");
  g.nodes[2].pointwise.mode = PointwiseMode::kExp;
  EXPECT_ERROR_HAS(validate_graph(g), "node 'c' (exp)", "output 'side' is dangling");
}

TEST(GraphStructure, Cycle) {
  Graph g = chain();
  g.nodes[0].inputs = {g.find_tensor("y")};  // a reads b's output, b reads a's
  g.outputs = {g.find_tensor("t")};
  g.tensors.erase(g.tensors.begin());  // drop x (shift indices)
  for (Node& n : g.nodes) {
    for (int& i : n.inputs) --i;
    for (int& o : n.outputs) --o;
  }
  g.outputs = {g.find_tensor("y")};
  EXPECT_ERROR_HAS(validate_graph(g), "cycle", "'a'", "'b'");
}

TEST(GraphStructure, SelfLoopIsACycle) {
  Graph g;
  int x = add_tensor(g, "x", {4});
  add_node(g, "s", OpKind::kPointwise, {x, 1}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kAdd;
  g.outputs = {1};
  EXPECT_ERROR_HAS(validate_graph(g), "cycle", "'s'");
}

TEST(GraphStructure, WrongArity) {
  Graph g = chain();
  g.nodes[0].inputs.push_back(0);
  EXPECT_ERROR_HAS(validate_graph(g), "node 'a' (relu): 2 inputs, expected 1");
  g = chain();
  g.nodes[1].outputs.push_back(0);
  EXPECT_ERROR_HAS(validate_graph(g), "node 'b' (relu): 2 outputs, expected 1");
  Graph m;
  int a = add_tensor(m, "a", {2, 2});
  add_node(m, "mm", OpKind::kMatmul, {a}, "c");
  m.outputs = {1};
  EXPECT_ERROR_HAS(validate_graph(m), "node 'mm' (matmul): 1 input, expected 2");
}

TEST(GraphStructure, DuplicateWriter) {
  Graph g = chain();
  g.nodes[1].outputs = {g.find_tensor("t")};
  g.nodes[1].inputs = {0};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 't': written by node 'a' and by node 'b'");
}

TEST(GraphStructure, DuplicateNames) {
  Graph g = chain();
  g.nodes[1].name = "a";
  EXPECT_ERROR_HAS(validate_graph(g), "node 'a' is declared twice");
  g = chain();
  g.tensors[1].name = "x";
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x' is declared twice");
}

TEST(GraphStructure, OutputsMustBeWritten) {
  Graph g = chain();
  g.outputs = {};
  EXPECT_ERROR_HAS(validate_graph(g), "graph has no outputs");
  g = chain();
  g.outputs.push_back(0);
  EXPECT_ERROR_HAS(validate_graph(g), "output 'x' is not written by any node");
  g = chain();
  g.outputs.push_back(g.outputs[0]);
  EXPECT_ERROR_HAS(validate_graph(g), "output 'y' is listed twice");
}

TEST(GraphStructure, InputsNeedPositiveDims) {
  Graph g = chain();
  g.tensors[0].dims.clear();
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x': graph input has no dims");
  g = chain();
  g.tensors[0].dims[1].value = 0;
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x': dim 1 is 0; dims must be positive");
  g = chain();
  g.tensors[0].dims[0].value = -3;
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x': dim 0 is -3");
  g = chain();
  g.tensors[0].dims = {Dim{1 << 30, ""}, Dim{1 << 30, ""}, Dim{1 << 30, ""}};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x'", "too many elements");
}

TEST(GraphStructure, DynamicDims) {
  Graph g = chain();
  g.tensors[0].dims[0] = Dim{0, "batch"};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 'x': dim 0 uses dynamic dim 'batch', which is not declared");
  g.dynamic_dims["batch"] = 6;
  ASSERT_TRUE(validate_graph(g).is_ok());
  EXPECT_EQ(g.tensors[2].dims[0].value, 6);
  EXPECT_EQ(g.tensors[2].dims[0].symbol, "batch");  // propagated through the ops
  g.dynamic_dims["seq"] = 3;
  EXPECT_ERROR_HAS(validate_graph(g), "dynamic dim 'seq' is not used by any tensor");
  g.dynamic_dims.erase("seq");
  g.dynamic_dims["batch"] = 0;
  EXPECT_ERROR_HAS(validate_graph(g), "dynamic dim 'batch': value 0 must be positive");
}

// A dynamic dim's name goes into the shape key: '=' or ',' in it would make two keys one.
TEST(GraphStructure, DynamicDimNamesAreIdentifiers) {
  for (const char* bad : {"a=1,b", "8", "$0", "two words", ""}) {
    Graph g = chain();
    g.tensors[0].dims[0] = Dim{0, bad};
    g.dynamic_dims[bad] = 2;
    EXPECT_ERROR_HAS(validate_graph(g), "a name is letters, digits and '_'");
  }
  Graph g = chain();
  g.tensors[0].dims[0] = Dim{0, "_seq_len2"};
  g.dynamic_dims["_seq_len2"] = 2;
  EXPECT_TRUE(validate_graph(g).is_ok());
}

TEST(GraphStructure, ByValueScalars) {
  Graph g;
  int x = add_tensor(g, "x", {4, 8});
  int s = add_tensor(g, "s", {});
  g.tensors[s].by_value = true;
  g.tensors[s].value = 2.0;
  add_node(g, "sc", OpKind::kPointwise, {x, s}, "y");
  g.nodes[0].pointwise.mode = PointwiseMode::kScale;
  g.outputs = {2};
  ASSERT_TRUE(validate_graph(g).is_ok()) << validate_graph(g).message();
  EXPECT_EQ(g.tensors[s].dims.size(), 1u);
  EXPECT_EQ(g.dtype_of(s), DataType::kFloat32);  // the compute dtype
  g.tensors[s].dims = {Dim{2, ""}};
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 's': a by-value scalar has all dims 1");
  g.tensors[s].dims = {Dim{1, ""}};
  g.tensors[s].dtype = DataType::kInt32;
  EXPECT_ERROR_HAS(validate_graph(g), "tensor 's': a by-value scalar must be floating-point");
  // Past fp32's range it would reach cuDNN as infinity (and every such value would share one signature).
  g.tensors[s].dtype.reset();
  for (double v : {1e39, -1e39, 3.4028236e38}) {
    g.tensors[s].value = v;
    EXPECT_ERROR_HAS(validate_graph(g), "is not a finite fp32 value");
  }
  g.tensors[s].value = 3.4028234e38;
  EXPECT_TRUE(validate_graph(g).is_ok()) << validate_graph(g).message();
}

TEST(GraphStructure, DeclaredOutputDimsMustMatch) {
  Graph g = chain();
  g.tensors[2].dims = {Dim{4, ""}, Dim{9, ""}};
  EXPECT_ERROR_HAS(validate_graph(g), "node 'b' (relu): output 'y': declared dims [4,9] but the node produces [4,8]");
}

}  // namespace
}  // namespace kiln
