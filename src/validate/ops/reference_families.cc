// The validate layer's table of the op families' references, by OpFamilyId (kiln/graph/ops/families.h).
#include <algorithm>

#include "kiln/graph/ops/families.h"
#include "validate/ops/reference_ops.h"

namespace kiln::validate_internal {

const ReferenceFamily& reference_family(OpKind kind) {
#define KILN_REFERENCE_ENTRY(F) \
  { F##_plan, F##_host, F##_device_value, F##_device_magnitude }
  static const ReferenceFamily kTable[kOpFamilyCount] = {
      KILN_REFERENCE_ENTRY(conv),      KILN_REFERENCE_ENTRY(matmul), KILN_REFERENCE_ENTRY(pointwise),
      KILN_REFERENCE_ENTRY(reduction), KILN_REFERENCE_ENTRY(norm),   KILN_REFERENCE_ENTRY(sdpa),
  };
#undef KILN_REFERENCE_ENTRY
  return family_entry(kTable, kind);
}

// plan_node (validate/node_plan.h) lives beside the table it dispatches through, so that node_plan.cc, which
// the families' modules use, does not include their table back.
StatusOr<NodePlan> plan_node(const Graph& g, int node_index) {
  const Node& node = g.nodes[static_cast<size_t>(node_index)];
  const std::string where = node_label(g, node_index);
  NodePlan p;
  p.node = node_index;
  p.op = node.op;
  size_t want_in = 0;
  switch (node.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad:
    case OpKind::kMatmul: want_in = 2; break;
    case OpKind::kReduction: want_in = 1; break;
    case OpKind::kSdpa:
      want_in = std::clamp<size_t>(node.inputs.size(), 3, 15);  // kiln/graph/graph.h sdpa_inputs
      break;
    case OpKind::kSdpaBackward:  // q, k, v, o, do, stats (, bias) (, the two lengths) (, the four offsets)
      want_in = std::clamp<size_t>(node.inputs.size(), 6, 16);
      break;
    case OpKind::kSdpaFp8: want_in = node.sdpa.padding ? 11 : 9; break;
    case OpKind::kSdpaFp8Backward: want_in = node.sdpa.padding ? 20 : 18; break;
    default: want_in = node.inputs.size(); break;  // checked per op below
  }
  if (node.inputs.size() != want_in)
    return invalid_argument(where + ": expected " + std::to_string(want_in) + " inputs, got " +
                            std::to_string(node.inputs.size()));
  size_t fewest = 1, most = 1;  // the graph layer's rule (kiln/graph/ops/families.h)
  node_output_arity(node, &fewest, &most);
  if (node.outputs.size() < fewest || node.outputs.size() > most)
    return invalid_argument(
        where + ": expected " +
        (fewest == most ? std::to_string(most) : std::to_string(fewest) + " or " + std::to_string(most)) +
        " outputs, got " + std::to_string(node.outputs.size()));
  std::vector<int> all = node.inputs;
  all.insert(all.end(), node.outputs.begin(), node.outputs.end());
  for (int t : all) {
    if (t < 0 || static_cast<size_t>(t) >= g.tensors.size())
      return invalid_argument(where + ": tensor index " + std::to_string(t) + " out of range");
    const auto d = tensor_dims(g, t);
    if (d.empty()) return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has no dims");
    for (int64_t v : d)
      if (v <= 0)
        return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has non-positive dims " + dims_str(d));
    const auto& s = g.tensors[static_cast<size_t>(t)].strides;
    if (!s.empty() && s.size() != d.size())
      return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has " + std::to_string(s.size()) +
                              " strides for " + std::to_string(d.size()) + " dims");
    for (int64_t v : s)
      if (v < 0) return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has a negative stride");
  }
  KILN_RETURN_IF_ERROR(reference_family(node.op).plan(g, node, where, p));
  return p;
}

}  // namespace kiln::validate_internal
