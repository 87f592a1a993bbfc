// Test helpers for the validate layer: build small kiln::Graph structs by hand (dims, strides and
// dtypes filled in directly, as validation would), without depending on the graph layer's code.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/validate/host_tensor.h"

namespace kiln::testing_graphs {

inline int add_tensor(Graph& g, const std::string& name, const std::vector<int64_t>& dims,
                      std::optional<DataType> dtype = std::nullopt, std::vector<int64_t> strides = {}) {
  TensorDesc t;
  t.name = name;
  for (int64_t d : dims) t.dims.push_back(Dim{d, ""});
  t.strides = strides.empty() ? row_major_strides(dims) : std::move(strides);
  t.layout = Layout::kExplicit;
  t.dtype = dtype;
  g.tensors.push_back(std::move(t));
  return static_cast<int>(g.tensors.size()) - 1;
}

inline Node& add_node(Graph& g, const std::string& name, OpKind op, std::vector<int> inputs, int output) {
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  g.nodes.push_back(std::move(n));
  return g.nodes.back();
}

inline Graph make_graph(const std::string& name, DataType io = DataType::kFloat32,
                        DataType intermediate = DataType::kFloat32) {
  Graph g;
  g.name = name;
  g.io_dtype = io;
  g.intermediate_dtype = intermediate;
  return g;
}

// NHWC strides for NCHW-ordered dims [N, C, H, W].
inline std::vector<int64_t> nhwc_strides(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

}  // namespace kiln::testing_graphs
