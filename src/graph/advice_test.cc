// graph_advice: the norm-parameter rule fires for parameters wider than a 16-bit input, names the node,
// the tensor and both dtypes, and stays silent for matching or narrower parameters and fp32 graphs.
#include <gtest/gtest.h>

#include "graph/graph_test_util.h"
#include "kiln/graph/advice.h"

namespace kiln {
namespace {

using testing::add_node;
using testing::add_tensor;

Graph norm_graph(OpKind op, DataType io, std::optional<DataType> params) {
  Graph g;
  g.name = "norm";
  g.io_dtype = io;
  int x = add_tensor(g, "x", {64, 256, 1, 1}, Layout::kNCHW);
  int gamma = add_tensor(g, "gamma", {1, 256, 1, 1}, Layout::kNCHW);
  g.tensors[gamma].dtype = params;
  std::vector<int> in{x, gamma};
  if (op == OpKind::kLayerNorm) {
    int beta = add_tensor(g, "beta", {1, 256, 1, 1}, Layout::kNCHW);
    g.tensors[beta].dtype = params;
    in.push_back(beta);
  }
  add_node(g, "ln", op, in, "y");
  g.outputs = {g.find_tensor("y")};
  return g;
}

TEST(GraphAdvice, WideNormParametersOnA16BitInputAreNamed) {
  Graph g = norm_graph(OpKind::kLayerNorm, DataType::kBFloat16, DataType::kFloat32);
  ASSERT_TRUE(validate_graph(g).is_ok());
  std::vector<Advice> a = graph_advice(g);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].node, "ln");
  EXPECT_EQ(a[0].tensor, "gamma");
  EXPECT_EQ(a[1].tensor, "beta");
  EXPECT_NE(a[0].message.find("node 'ln' (layer_norm): scale 'gamma' is fp32 while input 'x' is bf16"),
            std::string::npos)
      << a[0].message;
  EXPECT_NE(a[1].message.find("bias 'beta' is fp32"), std::string::npos) << a[1].message;
  EXPECT_NE(a[0].message.find("give 'gamma' dtype bf16"), std::string::npos) << a[0].message;

  g = norm_graph(OpKind::kRmsNorm, DataType::kFloat16, DataType::kFloat32);
  ASSERT_TRUE(validate_graph(g).is_ok());
  a = graph_advice(g);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_NE(a[0].message.find("(rms_norm): scale 'gamma' is fp32 while input 'x' is fp16"), std::string::npos)
      << a[0].message;
  EXPECT_NE(a[0].message.find("RMS norm"), std::string::npos) << "the RMS norm's own measurement: " << a[0].message;
}

TEST(GraphAdvice, OneAdvicePerTensorHoweverManyNodesReadIt) {
  Graph g = norm_graph(OpKind::kLayerNorm, DataType::kBFloat16, DataType::kFloat32);
  for (int i = 0; i < 3; ++i)  // three more norms of x sharing gamma and beta
    add_node(g, "ln" + std::to_string(i), OpKind::kLayerNorm, g.nodes[0].inputs, "y" + std::to_string(i));
  for (int i = 0; i < 3; ++i) g.outputs.push_back(g.find_tensor("y" + std::to_string(i)));
  ASSERT_TRUE(validate_graph(g).is_ok());
  std::vector<Advice> a = graph_advice(g);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NE(a[0].message.find("node 'ln' (layer_norm) and 3 other norm node(s): scale 'gamma'"), std::string::npos)
      << a[0].message;
}

TEST(GraphAdvice, NamesArePrintedWithControlCharactersEscaped) {
  Graph g = norm_graph(OpKind::kRmsNorm, DataType::kBFloat16, DataType::kFloat32);
  g.nodes[0].name = "n\nFAKE: advice\x1b[2J";
  g.tensors[1].name = std::string("g\xe2\x80\xae") + std::string(1, '\0') + "z";  // U+202E, then a NUL
  ASSERT_TRUE(validate_graph(g).is_ok());
  std::vector<Advice> a = graph_advice(g);
  ASSERT_EQ(a.size(), 1u);
  for (char c : a[0].message) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << a[0].message;
  EXPECT_NE(a[0].message.find("node 'n\\x0aFAKE: advice\\x1b[2J'"), std::string::npos) << a[0].message;
  EXPECT_NE(a[0].message.find("scale 'g\\u202e\\x00z'"), std::string::npos) << a[0].message;
  EXPECT_EQ(a[0].node, g.nodes[0].name);  // the fields keep the names as they are
}

TEST(GraphAdvice, ByValueParametersAreLeftAlone) {
  Graph g = norm_graph(OpKind::kRmsNorm, DataType::kBFloat16, DataType::kFloat32);
  g.tensors[1].dims = {Dim{1, ""}, Dim{1, ""}, Dim{1, ""}, Dim{1, ""}};
  g.tensors[1].by_value = true;
  g.tensors[1].value = 1.0;
  g.tensors[0].dims = {Dim{64, ""}, Dim{1, ""}, Dim{1, ""}, Dim{1, ""}};
  ASSERT_TRUE(validate_graph(g).is_ok());
  EXPECT_TRUE(graph_advice(g).empty());
}

TEST(GraphAdvice, MatchingOrNarrowParametersAndFp32GraphsGetNone) {
  for (OpKind op : {OpKind::kLayerNorm, OpKind::kRmsNorm}) {
    Graph g = norm_graph(op, DataType::kBFloat16, std::nullopt);  // inherits the io dtype
    ASSERT_TRUE(validate_graph(g).is_ok());
    EXPECT_TRUE(graph_advice(g).empty());
    g = norm_graph(op, DataType::kFloat16, DataType::kFloat16);
    ASSERT_TRUE(validate_graph(g).is_ok());
    EXPECT_TRUE(graph_advice(g).empty());
    g = norm_graph(op, DataType::kFloat32, DataType::kFloat32);
    ASSERT_TRUE(validate_graph(g).is_ok());
    EXPECT_TRUE(graph_advice(g).empty());
    g = norm_graph(op, DataType::kFloat32, DataType::kBFloat16);  // narrower: not this rule's concern
    ASSERT_TRUE(validate_graph(g).is_ok());
    EXPECT_TRUE(graph_advice(g).empty());
  }
}

// A causal band aligned top-left with fewer queries than keys is named, for an sdpa and for its backward alike;
// aligned bottom-right it is not.
TEST(GraphAdvice, TopLeftCausalWithFewerQueriesIsNamedForwardAndBackward) {
  for (OpKind op : {OpKind::kSdpa, OpKind::kSdpaBackward}) {
    Graph g;
    g.name = "attn";
    g.io_dtype = DataType::kBFloat16;
    std::vector<int> in{add_tensor(g, "q", {1, 2, 16, 64}), add_tensor(g, "k", {1, 2, 64, 64}),
                        add_tensor(g, "v", {1, 2, 64, 64})};
    if (op == OpKind::kSdpaBackward) {
      in.push_back(add_tensor(g, "o", {1, 2, 16, 64}));
      in.push_back(add_tensor(g, "do", {1, 2, 16, 64}));
      in.push_back(add_tensor(g, "stats", {1, 2, 16, 1}));
      g.tensors[static_cast<size_t>(in.back())].dtype = DataType::kFloat32;
    }
    add_node(g, "attn", op, in, op == OpKind::kSdpa ? "o_out" : "dq");
    if (op == OpKind::kSdpaBackward) {
      for (const char* name : {"dk", "dv"}) {
        TensorDesc d;
        d.name = name;
        g.tensors.push_back(d);
        g.nodes[0].outputs.push_back(static_cast<int>(g.tensors.size()) - 1);
      }
    }
    g.outputs = g.nodes[0].outputs;
    g.nodes[0].sdpa.causal = true;
    ASSERT_TRUE(validate_graph(g).is_ok()) << validate_graph(g).to_string();
    std::vector<Advice> a = graph_advice(g);
    ASSERT_EQ(a.size(), 1u) << op_kind_name(op);
    EXPECT_NE(a[0].message.find(std::string("node 'attn' (") + op_kind_name(op) + "): 16 queries over 64 keys"),
              std::string::npos)
        << a[0].message;
    g.nodes[0].sdpa.alignment = DiagonalAlignment::kBottomRight;
    EXPECT_TRUE(graph_advice(g).empty()) << op_kind_name(op);
  }
}

}  // namespace
}  // namespace kiln
