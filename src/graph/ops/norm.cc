// The normalization family (layer_norm, rms_norm) in the graph layer: arity, inference, signature
// attributes, cost.
#include <cmath>

#include "graph/ops/op_family.h"

namespace kiln::graph_internal {
namespace {

// layer_norm {x, scale, bias}; rms_norm {x, scale} (a third input, its bias, is refused by infer_norm).
void norm_arity(const Node& n, size_t* lo, size_t* hi) {
  *lo = n.op == OpKind::kLayerNorm ? 3 : 2;
  *hi = 3;
}

Status infer_norm(NodeCtx& c, const ValidateOptions&, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_rank(c, 0, 2, 8));
  // cuDNN's RMSNorm takes a bias, but Kiln's lowering and both references do not yet: refused here rather
  // than run without it (a plan would have dropped the bias and only a verified run would have shown it).
  if (c.node.op == OpKind::kRmsNorm && c.node.inputs.size() == 3)
    return c.error(c.in_label(2) + ": rms_norm's bias is not supported yet (it would be dropped): add it with a "
                                   "bias_add node after the norm");
  DataType xt = c.in_dtype(0);
  if (xt != DataType::kFloat32 && xt != DataType::kFloat16 && xt != DataType::kBFloat16)
    return c.error(c.in_label(0) + ": dtype " + std::string(dtype_name(xt)) + " is not supported by " +
                   node_op_name(c.node) + " (expected fp32, fp16 or bf16)");
  KILN_RETURN_IF_ERROR(check_float_out(c));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  double eps = c.node.norm.epsilon;
  if (!(eps > 0.0) || !std::isfinite(eps))
    return c.error("attribute 'epsilon': " + std::to_string(eps) + " must be positive");
  const Dims& x = c.in(0).dims;
  // Scale and bias cover every axis but the batch axis: [1, x[1], x[2], ...], as cuDNN expects.
  Dims expected = x;
  expected[0] = Dim{1, ""};
  for (size_t i = 1; i < c.node.inputs.size(); ++i) {
    const Dims& p = c.in(i).dims;
    bool ok = p.size() == expected.size();
    for (size_t d = 0; ok && d < p.size(); ++d) ok = p[d].value == expected[d].value;
    if (!ok) return c.error(c.in_label(i) + ": dims " + dims_text(p) + ", expected " + dims_text(expected));
    DataType pt = c.in_dtype(i);
    if (pt != DataType::kFloat32 && pt != DataType::kFloat16 && pt != DataType::kBFloat16)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(pt)) +
                     " is not supported (expected fp32, fp16 or bf16)");
  }
  out->push_back(x);
  return Status::ok();
}

std::string norm_signature_attrs(const Graph&, const Node& n) { return " epsilon=" + canonical_number(n.norm.epsilon); }

// Three operations per element of x: the statistics, then the normalization with its scale (and bias).
OpCost norm_cost(const Graph& g, const Node& n) {
  return element_op_cost(3.0 * static_cast<double>(g.tensors[static_cast<size_t>(n.inputs[0])].element_count()));
}

}  // namespace

const OpFamily kNormFamily = {"norm", norm_arity, infer_norm, norm_signature_attrs, norm_cost};

}  // namespace kiln::graph_internal
