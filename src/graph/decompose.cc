// decompose_graph: one single-node graph per node, intermediates materialized (kiln/decompose.h).
#include "kiln/decompose.h"

#include <map>
#include <set>

#include "graph/validate_internal.h"

namespace kiln {

StatusOr<std::vector<GraphPart>> decompose_graph(const Graph& graph, DataType materialized) {
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(graph, &order));
  std::vector<GraphPart> parts;
  for (int ni : order) {
    const Node& node = graph.nodes[static_cast<size_t>(ni)];
    GraphPart part;
    Graph& g = part.graph;
    g.name = graph.name + "/" + node.name;
    g.io_dtype = graph.io_dtype;
    g.intermediate_dtype = graph.intermediate_dtype;
    g.compute_dtype = graph.compute_dtype;
    std::map<int, int> local;  // original tensor -> part tensor
    auto add = [&](int t) {
      auto it = local.find(t);
      if (it != local.end()) return it->second;
      TensorDesc d = graph.tensors[static_cast<size_t>(t)];
      d.dtype = graph.is_virtual(t) ? materialized : graph.dtype_of(t);
      int idx = static_cast<int>(g.tensors.size());
      g.tensors.push_back(std::move(d));
      part.tensor_map.push_back(t);
      local.emplace(t, idx);
      return idx;
    };
    Node n = node;
    for (int& t : n.inputs) t = add(t);
    for (int& t : n.outputs) t = add(t);
    if (!n.compute_dtype) n.compute_dtype = graph.compute_dtype;
    g.outputs = n.outputs;
    g.nodes.push_back(std::move(n));
    std::set<std::string> symbols;
    for (const TensorDesc& d : g.tensors)
      for (const Dim& dim : d.dims)
        if (dim.is_dynamic()) symbols.insert(dim.symbol);
    for (const std::string& s : symbols) {
      auto it = graph.dynamic_dims.find(s);
      if (it == graph.dynamic_dims.end()) return invalid_argument("graph '" + graph.name + "': dynamic dim '" + s + "' is not declared");
      g.dynamic_dims[s] = it->second;
    }
    Status st = validate_graph(g);
    if (!st.is_ok()) return st.with_context("unfused part '" + g.name + "'");
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace kiln
