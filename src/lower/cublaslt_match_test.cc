// Host tier: which graphs cuBLASLt's candidates are offered for, and the problem each becomes (src/lower/cublaslt_plan.h).
// The mapping is checked by hand against the column-major identity D = y^T = b^T a^T; the GPU tier
// (cublaslt_gpu_test.cc) checks every candidate's outputs against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kiln/spec/spec.h"
#include "lower/cublaslt_plan.h"
#include "lower/cublaslt_test_cases.h"

namespace kiln::lower_detail {
namespace {

// A matmul spec: a [.., M, K] and b [.., K, N] given as JSON tensor objects; `extra` adds nodes after "mm" and
// `outputs` lists the graph's outputs.
Graph matmul_graph(const std::string& a, const std::string& b, const std::string& extra = "",
                   const std::string& outputs = R"(["y"])", const std::string& more_tensors = "") {
  const std::string spec = R"({"name": "mm", "io_dtype": "bf16", "tensors": {"a": )" + a + R"(, "b": )" + b +
                           more_tensors + R"(}, "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"],
                           "outputs": ["y"]})" +
                           extra + R"(], "outputs": )" + outputs + "}";
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

TEST(CublasLtMatch, RowMajorOperandsAreNotTransposed) {
  Graph g = matmul_graph(R"({"dims": [1, 64, 32]})", R"({"dims": [1, 32, 48]})");
  std::string why;
  auto p = match_cublaslt(g, &why);
  ASSERT_TRUE(p) << why;
  // D = y^T (N x M = 48 x 64); A = b^T (48 x 32, b's rows of 48 are columns: ld 48); B = a^T (32 x 64, ld 32).
  EXPECT_EQ(p->m, 48);
  EXPECT_EQ(p->n, 64);
  EXPECT_EQ(p->k, 32);
  EXPECT_EQ(p->a.tensor, g.find_tensor("b"));
  EXPECT_EQ(p->b.tensor, g.find_tensor("a"));
  EXPECT_EQ(p->d.tensor, g.find_tensor("y"));
  EXPECT_FALSE(p->a.transposed);
  EXPECT_EQ(p->a.rows, 48);
  EXPECT_EQ(p->a.cols, 32);
  EXPECT_EQ(p->a.ld, 48);
  EXPECT_FALSE(p->b.transposed);
  EXPECT_EQ(p->b.rows, 32);
  EXPECT_EQ(p->b.cols, 64);
  EXPECT_EQ(p->b.ld, 32);
  EXPECT_EQ(p->d.rows, 48);
  EXPECT_EQ(p->d.cols, 64);
  EXPECT_EQ(p->d.ld, 48);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->bias_tensor, -1);
  EXPECT_EQ(p->describe(), "m=48 n=64 k=32 A bf16 N B bf16 N D bf16");
}

// The FP8 recipe's layout: b K-contiguous (column-major), as Hopper's FP8 tensor cores read it: A = b^T is op T.
TEST(CublasLtMatch, Fp8WithAColumnMajorBIsTheTnLayout) {
  Graph g = matmul_graph(R"({"dims": [1, 16, 64], "dtype": "fp8_e4m3"})",
                         R"({"dims": [1, 64, 32], "strides": [2048, 1, 64], "dtype": "fp8_e4m3"})");
  std::string why;
  auto p = match_cublaslt(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->a.transposed);  // memory holds b (K x N, ld K): op T gives b^T
  EXPECT_EQ(p->a.rows, 64);
  EXPECT_EQ(p->a.cols, 32);
  EXPECT_EQ(p->a.ld, 64);
  EXPECT_FALSE(p->b.transposed);
  EXPECT_EQ(p->describe(), "m=32 n=16 k=64 A fp8_e4m3 T B fp8_e4m3 N D bf16");
}

TEST(CublasLtMatch, ABatchOfOneBroadcastsWithStrideZero) {
  Graph g = matmul_graph(R"({"dims": [4, 8, 16]})", R"({"dims": [1, 16, 24]})");
  std::string why;
  auto p = match_cublaslt(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->batch, 4);
  EXPECT_EQ(p->a.batch_stride, 0);       // b, shared by every batch
  EXPECT_EQ(p->b.batch_stride, 8 * 16);  // a
  EXPECT_EQ(p->d.batch_stride, 8 * 24);  // y
}

TEST(CublasLtMatch, GraphsCublasLtDoesNotRunSayWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  };
  const std::string a = R"({"dims": [1, 16, 32]})", b = R"({"dims": [1, 32, 8]})";
  std::vector<Case> cases = {
      {"the product and its biased sum both read back",
       matmul_graph(a, b, R"(, {"name": "add", "op": "bias_add", "inputs": ["y", "bias"], "outputs": ["z"]})",
                    R"(["y", "z"])", R"(, "bias": {"dims": [1, 1, 8]})"),
       "'y' is a graph output and node 'add' reads it"},
      {"GELU in its erf form",
       matmul_graph(a, b, R"(, {"name": "act", "op": "gelu_erf", "inputs": ["y"], "outputs": ["z"]})", R"(["z"])"),
       "cuBLASLt runs no GELU epilogue Kiln trusts (m=8 n=16 k=32 A bf16 N B bf16 N D bf16, GELU (erf))"},
      {"a bias per row",
       matmul_graph(a, b, R"(, {"name": "add", "op": "add", "inputs": ["y", "bias"], "outputs": ["z"]})", R"(["z"])",
                    R"(, "bias": {"dims": [1, 16, 1]})"),
       "node 'add' (add) is not an epilogue"},
      {"an AMAX after the matmul (cuBLASLt's AMAX_D is for FP8 outputs)",
       matmul_graph(a, b, R"(, {"name": "amax", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"],
                              "axes": [0, 1, 2]})",
                    R"(["y", "amax"])", R"(, "amax": {"dims": [1, 1, 1], "dtype": "fp32"})"),
       "node 'amax' (reduce_amax) follows the epilogue"},
      {"a virtual product",
       matmul_graph(a, b, R"(, {"name": "amax", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"],
                              "axes": [0, 1, 2]})",
                    R"(["amax"])", R"(, "amax": {"dims": [1, 1, 1], "dtype": "fp32"})"),
       "'y' is not a graph output"},
      {"GELU in its tanh form (cuBLASLt's failed the gate)",
       matmul_graph(a, b, R"(, {"name": "act", "op": "gelu_tanh", "inputs": ["y"], "outputs": ["z"]})", R"(["z"])"),
       "cuBLASLt runs no GELU epilogue Kiln trusts"},
      {"an operand without a unit stride", matmul_graph(R"({"dims": [1, 16, 32], "strides": [1024, 64, 2]})", b),
       "no unit stride"},
      {"an FP8 output", matmul_graph(a, b, "", R"(["y"])", R"(, "y": {"dtype": "fp8_e4m3"})"),
       "the output is fp8_e4m3"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_cublaslt(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
}

TEST(CublasLtMatch, RankFourAndFp16ComputeAreNotOffered) {
  Graph g = matmul_graph(R"({"dims": [2, 2, 16, 32]})", R"({"dims": [2, 2, 32, 8]})");
  std::string why;
  EXPECT_FALSE(match_cublaslt(g, &why));
  EXPECT_NE(why.find("rank 2 or 3"), std::string::npos) << why;
  Graph h = matmul_graph(R"({"dims": [1, 16, 32]})", R"({"dims": [1, 32, 8]})");
  h.nodes[0].compute_dtype = DataType::kFloat16;
  EXPECT_FALSE(match_cublaslt(h, &why));
  EXPECT_NE(why.find("computes in fp16"), std::string::npos) << why;
}

// matmul -> bias_add -> relu: cuBLASLt's RELU_BIAS epilogue; the bias is one value per column of y, which is one per
// row of cuBLASLt's D = y^T: its bias vector.
TEST(CublasLtMatch, BiasAndActivationBecomeTheEpilogue) {
  Graph g = matmul_graph(R"({"dims": [1, 16, 32]})", R"({"dims": [1, 32, 8]})",
                         R"(, {"name": "add", "op": "bias_add", "inputs": ["y", "bias"], "outputs": ["t"]},
                              {"name": "act", "op": "relu", "inputs": ["t"], "outputs": ["z"]})",
                         R"(["z"])", R"(, "bias": {"dims": [1, 1, 8], "dtype": "fp32"})");
  std::string why;
  auto p = match_cublaslt(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->d.tensor, g.find_tensor("z"));
  EXPECT_EQ(p->bias_tensor, g.find_tensor("bias"));
  EXPECT_EQ(p->activation, BltProblem::Activation::kRelu);
  EXPECT_EQ(p->describe(), "m=8 n=16 k=32 A bf16 N B bf16 N D bf16, bias fp32, ReLU");
  Graph r = matmul_graph(R"({"dims": [16, 32]})", R"({"dims": [32, 8]})",
                         R"(, {"name": "act", "op": "relu", "inputs": ["y"], "outputs": ["z"]})", R"(["z"])");
  auto q = match_cublaslt(r, &why);
  ASSERT_TRUE(q) << why;
  EXPECT_EQ(q->bias_tensor, -1);
  EXPECT_EQ(q->activation, BltProblem::Activation::kRelu);
  EXPECT_EQ(q->describe(), "m=8 n=16 k=32 A bf16 N B bf16 N D bf16, ReLU");
}

// Every graph of the GPU tier is one cuBLASLt is offered for (else that tier would test nothing).
TEST(CublasLtMatch, TheGpuTiersCasesAreOffered) {
  for (const testing::Case& c : testing::cases()) {
    std::string why;
    EXPECT_TRUE(match_cublaslt(c.g, &why)) << c.what << ": " << why;
  }
}

// The nodes written in another order are the same graph (one signature): the same problem.
TEST(CublasLtMatch, NodeOrderDoesNotMatter) {
  Graph g = matmul_graph(R"({"dims": [1, 16, 32]})", R"({"dims": [1, 32, 8]})",
                         R"(, {"name": "add", "op": "bias_add", "inputs": ["y", "bias"], "outputs": ["t"]},
                              {"name": "act", "op": "relu", "inputs": ["t"], "outputs": ["z"]})",
                         R"(["z"])", R"(, "bias": {"dims": [1, 1, 8]})");
  Graph reversed = g;
  std::reverse(reversed.nodes.begin(), reversed.nodes.end());
  std::string why;
  auto p = match_cublaslt(g, &why), q = match_cublaslt(reversed, &why);
  ASSERT_TRUE(p && q) << why;
  EXPECT_EQ(p->describe(), q->describe());
  EXPECT_EQ(q->bias_tensor, g.find_tensor("bias"));
  EXPECT_EQ(q->d.tensor, g.find_tensor("z"));
}

}  // namespace
}  // namespace kiln::lower_detail
