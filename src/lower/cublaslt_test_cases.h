// The matmul graphs both tiers of cuBLASLt's tests use: the host tier checks that cuBLASLt is offered for each
// (cublaslt_match_test.cc), the GPU tier runs every configuration cuBLASLt offers for each (cublaslt_gpu_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/spec/spec.h"

namespace kiln::lower_detail::testing {

// A matmul of a and b into y: then, when `bias`, a bias_add of "bias"; then `act` when not "" ("relu").
inline Graph spec_graph(const std::string& io, const std::string& tensors, bool bias = false,
                        const std::string& act = "") {
  std::string spec = R"({"name": "blt_)" + io + R"(", "io_dtype": ")" + io + R"(", "tensors": {)" + tensors;
  std::vector<std::string> chain = {"p"};  // the tensors the nodes write, the last one "y"
  if (bias) chain.push_back("t");
  if (!act.empty()) chain.push_back("u");
  chain.back() = "y";
  spec += R"(}, "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": [")" + chain[0] + R"("]})";
  size_t at = 0;
  if (bias) {
    spec += R"(, {"name": "add", "op": "bias_add", "inputs": [")" + chain[at] + R"(", "bias"], "outputs": [")" +
            chain[at + 1] + R"("]})";
    ++at;
  }
  if (!act.empty())
    spec += R"(, {"name": "act", "op": ")" + act + R"(", "inputs": [")" + chain[at] + R"("], "outputs": ["y"]})";
  spec += R"(], "outputs": ["y"]})";
  auto g = parse_spec_string(spec, "cublaslt_test_cases");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

struct Case {
  const char* what;
  Graph g;
};

inline std::vector<Case> cases() {
  return {
      {"bf16 128x256x192", spec_graph("bf16", R"("a": {"dims": [1, 128, 256]}, "b": {"dims": [1, 256, 192]})")},
      {"fp16 batch 4, b broadcast", spec_graph("fp16", R"("a": {"dims": [4, 64, 128]}, "b": {"dims": [1, 128, 96]})")},
      {"fp32 64x96x80", spec_graph("fp32", R"("a": {"dims": [1, 64, 96]}, "b": {"dims": [1, 96, 80]})")},
      {"bf16 + bias + ReLU",
       spec_graph("bf16",
                  R"("a": {"dims": [1, 128, 256]}, "b": {"dims": [1, 256, 192]}, "bias": {"dims": [1, 1, 192]})", true,
                  "relu")},
      {"fp16 + bias",
       spec_graph("fp16", R"("a": {"dims": [2, 64, 128]}, "b": {"dims": [2, 128, 96]}, "bias": {"dims": [1, 1, 96]})",
                  true)},
      {"fp8 e4m3 TN, bf16 out", spec_graph("bf16", R"("a": {"dims": [1, 64, 128], "dtype": "fp8_e4m3"},
                     "b": {"dims": [1, 128, 96], "strides": [12288, 1, 128], "dtype": "fp8_e4m3"})")},
  };
}

}  // namespace kiln::lower_detail::testing
