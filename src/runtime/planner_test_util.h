// Shared by the Planner's host tests (planner_test.cc, planner_jobs_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"

namespace kiln {

// A matmul + bias + GELU with a dynamic token count, as a spec would give it.
inline Graph token_graph(int64_t tokens = 64) {
  const std::string spec = R"({
    "name": "mlp", "io_dtype": "fp16", "dynamic": {"tokens": )" +
                           std::to_string(tokens) + R"(},
    "tensors": {"x": {"dims": [1, "tokens", 128]}, "w": {"dims": [1, 128, 256]}, "b": {"dims": [1, 1, 256]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
              {"name": "bias", "op": "bias_add", "inputs": ["h", "b"], "outputs": ["hb"]},
              {"name": "gelu", "op": "gelu_tanh", "inputs": ["hb"], "outputs": ["y"]}],
    "outputs": ["y"]})";
  auto g = parse_spec_string(spec, "mlp.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

}  // namespace kiln
