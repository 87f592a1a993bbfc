// reshape_graph (kiln/runtime/planner.h) and the shape helpers the Planner's sources share
// (runtime/shapes.h).
#include <cmath>

#include "kiln/runtime/reshape_graph.h"
#include "runtime/shapes.h"

namespace kiln {

StatusOr<Graph> reshape_graph(const Graph& validated, const std::map<std::string, int64_t>& shape) {
  for (const auto& [sym, v] : shape) {
    if (!validated.dynamic_dims.count(sym))
      return invalid_argument("graph '" + validated.name + "' has no dynamic dim '" + sym + "'");
    if (v < 1)
      return invalid_argument("graph '" + validated.name + "': dynamic dim '" + sym + "' = " + std::to_string(v) +
                              ": must be >= 1");
  }
  for (const auto& [sym, v] : validated.dynamic_dims)
    if (!shape.count(sym))
      return invalid_argument("graph '" + validated.name + "': no value for dynamic dim '" + sym + "'");
  Graph g = validated;
  g.dynamic_dims = shape;
  const GraphRoles roles(validated);
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    TensorDesc& d = g.tensors[i];
    bool dynamic = false;
    for (Dim& dim : d.dims)
      if (dim.is_dynamic()) {
        dim.value = shape.at(dim.symbol);
        dynamic = true;
      }
    const int producer = roles.producer(static_cast<int>(i));
    if (producer >= 0) {
      // Written by a node: inferred again from its inputs (its declared layout stays). A convolution's
      // dx or dw keeps its dims: their spatial extents are the declaration's (a dx of stride > 1 has
      // several valid extents, a dw's filter is not derived), and inference checks them at the new shape.
      const OpKind op = validated.nodes[static_cast<size_t>(producer)].op;
      if (d.layout == Layout::kExplicit) {
        if (dynamic)
          return invalid_argument("graph '" + validated.name + "': tensor '" + d.name +
                                  "' has explicit strides and dynamic dims: give it a layout to reshape it");
      } else if (op == OpKind::kConvDgrad || op == OpKind::kConvWgrad) {
        d.strides.clear();
      } else {
        d.dims.clear();
        d.strides.clear();
      }
    } else if (dynamic) {
      if (d.layout == Layout::kExplicit)
        return invalid_argument("graph '" + validated.name + "': tensor '" + d.name +
                                "' has explicit strides and dynamic dims: give it a layout to reshape it");
      d.strides.clear();  // from its layout again
    }
  }
  KILN_RETURN_IF_ERROR(validate_graph(g));
  return g;
}

namespace runtime_detail {

// The prepared graph at `shape` and its own signature (a structure whose derived extents are not symbolic
// changes with the shape: it is then looked up under its own structure).
Status graph_at(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, Graph* g, GraphSignature* sig) {
  if (shape == pg.shape) {
    *g = *pg.graph;
    *sig = pg.signature;
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(*g, reshape_graph(*pg.graph, shape));
  KILN_ASSIGN_OR_RETURN(*sig, reshaped_signature(*pg.graph, pg.signature, *g));
  return Status::ok();
}

// Distance between two shapes of one bucket: the sum of |log(a/b)| over their dims (the nearest tuned
// shape shares the most of its tiling choices with this one).
double shape_distance(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b) {
  double d = 0;
  for (const auto& [sym, va] : a) {
    auto it = b.find(sym);
    if (it != b.end()) d += std::fabs(std::log(static_cast<double>(va) / static_cast<double>(it->second)));
  }
  return d;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace runtime_detail
}  // namespace kiln
