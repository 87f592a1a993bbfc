// The map from OpKind to op families, the graph layer's table of them, and what is counted alike for every
// family.
#include "kiln/graph/ops/families.h"

#include "graph/ops/op_family.h"

namespace kiln {

OpFamilyId op_family_of(OpKind kind) {
  switch (kind) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad: return OpFamilyId::kConv;
    case OpKind::kMatmul: return OpFamilyId::kMatmul;
    case OpKind::kPointwise: return OpFamilyId::kPointwise;
    case OpKind::kReduction: return OpFamilyId::kReduction;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return OpFamilyId::kNorm;
    case OpKind::kSdpa:
    case OpKind::kSdpaBackward:
    case OpKind::kSdpaFp8:
    case OpKind::kSdpaFp8Backward: return OpFamilyId::kSdpa;
  }
  return OpFamilyId::kPointwise;
}

const char* op_family_name(OpFamilyId family) { return enum_name(kOpFamilyNames, family); }

void node_output_arity(const Node& node, size_t* lo, size_t* hi) {
  *lo = *hi = 1;
  if (const auto f = graph_internal::op_family(node.op).output_arity) f(node, lo, hi);
}

}  // namespace kiln

namespace kiln::graph_internal {

const OpFamily& op_family(OpKind kind) {
  // By OpFamilyId.
  static const OpFamily* const kTable[kOpFamilyCount] = {&kConvFamily,      &kMatmulFamily, &kPointwiseFamily,
                                                         &kReductionFamily, &kNormFamily,   &kSdpaFamily};
  return *family_entry(kTable, kind);
}

}  // namespace kiln::graph_internal

namespace kiln {
namespace {

double tensor_bytes(const Graph& g, const GraphRoles& roles, int t) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  if (d.by_value) return 0;
  return static_cast<double>(d.element_count()) * static_cast<double>(dtype_size(roles.dtype_of(t)));
}

OpCost node_cost(const Graph& g, const GraphRoles& roles, int node) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  OpCost c = graph_internal::op_family(n.op).cost(g, n);
  c.bytes = 0;
  for (int t : n.inputs) c.bytes += tensor_bytes(g, roles, t);
  for (int t : n.outputs) c.bytes += tensor_bytes(g, roles, t);
  return c;
}

}  // namespace

OpCost node_cost(const Graph& graph, int node) { return node_cost(graph, GraphRoles(graph), node); }

OpCost graph_cost(const Graph& graph) {
  const GraphRoles roles(graph);
  OpCost total;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const OpCost c = node_cost(graph, roles, static_cast<int>(n));
    total.macs += c.macs;
    total.flops += c.flops;
  }
  for (size_t t = 0; t < graph.tensors.size(); ++t)
    if (!roles.is_virtual(static_cast<int>(t))) total.bytes += tensor_bytes(graph, roles, static_cast<int>(t));
  return total;
}

}  // namespace kiln
