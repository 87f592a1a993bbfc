// Internal to the graph layer: per-op shape and dtype inference used by validate_graph.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph_internal {

// "node 'conv1' (conv_fprop)"
std::string node_where(const Node& node);
// "[32,64,56,56]" with symbols shown as batch=32
std::string dims_text(const std::vector<Dim>& dims);
// "[1,2,3]"
std::string ints_text(const std::vector<int64_t>& values);

bool is_float(DataType t);
bool is_fp8(DataType t);

// Infers the dims of `node`'s outputs from its (already shaped) inputs and checks attributes and dtypes.
// `out_dims` receives one dims vector per output. Declared output dims (non-empty) are available in the
// graph for ops whose output cannot be inferred uniquely (conv_dgrad's dx, conv_wgrad's dw).
// Normalizes defaulted attributes in place (conv padding/stride/dilation, reduction axes).
// `roles` answers dtype_of (the graph's nodes and outputs are fixed during validation).
Status infer_node(Graph& graph, const GraphRoles& roles, Node& node, const ValidateOptions& options,
                  std::vector<std::vector<Dim>>* out_dims);

// Node indices in a topological order (lowest index first among ready nodes). Needs a graph whose nodes
// have one in-range output each (check_structure's guarantees); fails naming the nodes on a cycle.
Status topological_order(const Graph& graph, std::vector<int>* order);

}  // namespace kiln::graph_internal
