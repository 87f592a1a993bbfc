// The pointwise family's node plan (broadcast geometry) and host reference (the math of
// reference_math.h, which the device reference shares).
#include <algorithm>

#include "validate/ops/reference_ops.h"
#include "validate/ops/pointwise_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

Status pointwise_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const PointwiseMode mode = node.pointwise.mode;
  const bool binary = !pointwise_is_unary(mode);
  if (node.inputs.size() != (binary ? 2u : 1u))
    return invalid_argument(where + ": mode needs " + std::string(binary ? "2 inputs" : "1 input") + ", got " +
                            std::to_string(node.inputs.size()));
  PointwiseGeom& pw = p.pw;
  pw.out_dims = tensor_dims(g, node.outputs[0]);
  auto a = broadcast_strides(tensor_dims(g, node.inputs[0]), pw.out_dims);
  if (!a.is_ok()) return a.status().with_context(where + ": input " + tensor_label(g, node.inputs[0]));
  pw.a_strides = *a;
  if (binary) {
    const auto bd = tensor_dims(g, node.inputs[1]);
    auto b = broadcast_strides(bd, pw.out_dims);
    if (mode == PointwiseMode::kScale && product(bd) == 1) {
      pw.b_strides.assign(pw.out_dims.size(), 0);
    } else if (b.is_ok()) {
      pw.b_strides = *b;
    } else if (mode == PointwiseMode::kBiasAdd && pw.out_dims.size() >= 2 && product(bd) == pw.out_dims[1] &&
               std::count_if(bd.begin(), bd.end(), [](int64_t v) { return v != 1; }) <= 1) {
      pw.b_strides.assign(pw.out_dims.size(), 0);
      pw.b_strides[1] = 1;  // channel-axis bias
    } else {
      return b.status().with_context(where + ": input " + tensor_label(g, node.inputs[1]));
    }
  }
  return Status::ok();
}

namespace {

Values run_pointwise(const NodePlan& p, PointwiseMode mode, const Values& a, const Values* b) {
  const PointwiseGeom& g = p.pw;
  Values y(static_cast<size_t>(product(g.out_dims)));
  for_each_broadcast(g.out_dims, g.a_strides, g.b_strides, [&](int64_t pos, int64_t oa, int64_t ob) {
    y[pos] = pointwise_value(mode, a[oa], b ? (*b)[ob] : 0.0);
  });
  return y;
}

Values pointwise_magnitude_of(const NodePlan& p, PointwiseMode mode, const Operand& a, const Operand* b,
                              const Values& y) {
  const PointwiseGeom& g = p.pw;
  Values m(y.size());
  for_each_broadcast(g.out_dims, g.a_strides, g.b_strides, [&](int64_t pos, int64_t oa, int64_t ob) {
    m[pos] = pointwise_magnitude(mode, (*a.value)[oa], b ? (*b->value)[ob] : 0.0, y[pos], (*a.mag)[oa],
                                 b ? (*b->mag)[ob] : 0.0, a.carries, b && b->carries);
  });
  return m;
}

}  // namespace

HostNodeResult pointwise_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                              const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  HostNodeResult r;
  const PointwiseMode mode = node.pointwise.mode;
  r.y = run_pointwise(p, mode, *in[0], in.size() > 1 ? in[1] : nullptr);
  if (op) {
    r.m = pointwise_magnitude_of(p, mode, (*op)[0], op->size() > 1 ? &(*op)[1] : nullptr, r.y);
    r.sc = pointwise_magnitude_of(p, mode, (*sop)[0], sop->size() > 1 ? &(*sop)[1] : nullptr, r.y);
  }
  return r;
}

}  // namespace kiln::validate_internal
