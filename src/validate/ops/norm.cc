// The normalization family's node plan (rows and broadcast scale and bias) and host reference
// (layer_norm, rms_norm).
#include <algorithm>
#include <cmath>

#include "validate/ops/reference_ops.h"
#include "validate/ops/norm_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

Status norm_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const size_t want = node.op == OpKind::kLayerNorm ? 3 : 2;
  if (node.inputs.size() != want)
    return invalid_argument(where + ": needs " + std::to_string(want) + " inputs, got " +
                            std::to_string(node.inputs.size()));
  NormGeom& n = p.norm;
  n.x_dims = tensor_dims(g, node.inputs[0]);
  if (n.x_dims.size() < 2)
    return invalid_argument(where + ": input " + tensor_label(g, node.inputs[0]) + " needs rank >= 2");
  if (tensor_dims(g, node.outputs[0]) != n.x_dims)
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " must have the input's dims " +
                            dims_str(n.x_dims));
  n.rows = n.x_dims[0];
  n.inner = product(n.x_dims) / std::max<int64_t>(n.rows, 1);
  auto s = broadcast_strides(tensor_dims(g, node.inputs[1]), n.x_dims);
  if (!s.is_ok()) return s.status().with_context(where + ": scale " + tensor_label(g, node.inputs[1]));
  n.scale_strides = *s;
  if (want == 3) {
    auto b = broadcast_strides(tensor_dims(g, node.inputs[2]), n.x_dims);
    if (!b.is_ok()) return b.status().with_context(where + ": bias " + tensor_label(g, node.inputs[2]));
    n.bias_strides = *b;
  }
  if (!(node.norm.epsilon >= 0)) return invalid_argument(where + ": epsilon must be >= 0");
  p.reduction_length = n.inner;
  return Status::ok();
}

namespace {

struct NormStats {
  std::vector<double> mean, var, inv;  // per row; var is mean(x^2) for RMS norm
};

NormStats norm_stats(const NodePlan& p, double eps, const Values& x) {
  const NormGeom& n = p.norm;
  NormStats st;
  st.mean.assign(static_cast<size_t>(n.rows), 0.0);
  st.var.assign(static_cast<size_t>(n.rows), 0.0);
  st.inv.assign(static_cast<size_t>(n.rows), 0.0);
  const bool layer = p.op == OpKind::kLayerNorm;
  for (int64_t r = 0; r < n.rows; ++r) {
    const double* xr = x.data() + r * n.inner;
    if (layer) {
      double s = 0.0;
      for (int64_t i = 0; i < n.inner; ++i) s += xr[i];
      st.mean[r] = s / static_cast<double>(n.inner);
    }
    double ss = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) {
      const double d = xr[i] - st.mean[r];
      ss += d * d;
    }
    st.var[r] = ss / static_cast<double>(n.inner);
    st.inv[r] = 1.0 / std::sqrt(st.var[r] + eps);
  }
  return st;
}

Values run_norm(const NodePlan& p, const NormStats& st, const Values& x, const Values& scale, const Values* bias) {
  const NormGeom& n = p.norm;
  Values y(x.size());
  for_each_broadcast(n.x_dims, n.scale_strides, bias ? n.bias_strides : std::vector<int64_t>{},
                     [&](int64_t pos, int64_t os, int64_t ob) {
                       const int64_t r = pos / n.inner;
                       double v = (x[pos] - st.mean[r]) * st.inv[r] * scale[os];
                       if (bias) v += (*bias)[ob];
                       y[pos] = v;
                     });
  return y;
}

Values norm_magnitude_of(const NodePlan& p, double eps, const NormStats& st, const Operand& x, const Operand& scale,
                         const Operand* bias, const Values& y) {
  const NormGeom& n = p.norm;
  const bool layer = p.op == OpKind::kLayerNorm;
  std::vector<double> bm(static_cast<size_t>(n.rows), 0.0), dterm(static_cast<size_t>(n.rows), 0.0);
  for (int64_t r = 0; r < n.rows; ++r) {
    const double* br = x.mag->data() + r * n.inner;
    double s = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) s += br[i];
    bm[r] = s / static_cast<double>(n.inner);
    const double* xr = x.value->data() + r * n.inner;
    double d = 0.0;
    for (int64_t i = 0; i < n.inner; ++i) d += norm_dterm_part(layer, xr[i], st.mean[r], br[i], x.carries, bm[r]);
    dterm[r] = d / static_cast<double>(n.inner);
  }
  Values m(y.size());
  for_each_broadcast(n.x_dims, n.scale_strides, bias ? n.bias_strides : std::vector<int64_t>{},
                     [&](int64_t pos, int64_t os, int64_t ob) {
                       const int64_t r = pos / n.inner;
                       const double xhat = ((*x.value)[pos] - st.mean[r]) * st.inv[r];
                       m[pos] = norm_magnitude(layer, y[pos], xhat, (*scale.value)[os], (*x.mag)[pos], (*scale.mag)[os],
                                               bias ? (*bias->mag)[ob] : 0.0, x.carries, scale.carries,
                                               bias && bias->carries, st.inv[r], st.var[r], eps, bm[r], dterm[r]);
                     });
  return m;
}

}  // namespace

HostNodeResult norm_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                         const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  HostNodeResult r;
  const NormStats st = norm_stats(p, node.norm.epsilon, *in[0]);
  r.y = run_norm(p, st, *in[0], *in[1], in.size() > 2 ? in[2] : nullptr);
  if (op) {
    r.m = norm_magnitude_of(p, node.norm.epsilon, st, (*op)[0], (*op)[1], op->size() > 2 ? &(*op)[2] : nullptr, r.y);
    r.sc =
        norm_magnitude_of(p, node.norm.epsilon, st, (*sop)[0], (*sop)[1], sop->size() > 2 ? &(*sop)[2] : nullptr, r.y);
  }
  return r;
}

}  // namespace kiln::validate_internal
