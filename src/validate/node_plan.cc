#include "validate/node_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/validate/host_tensor.h"

namespace kiln::validate_internal {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? "," : "") << d[i];
  os << "]";
  return os.str();
}

std::string tensor_label(const Graph& g, int t) { return "'" + g.tensors[static_cast<size_t>(t)].name + "'"; }

bool is_binary(PointwiseMode m) {
  switch (m) {
    case PointwiseMode::kAdd:
    case PointwiseMode::kSub:
    case PointwiseMode::kMul:
    case PointwiseMode::kDiv:
    case PointwiseMode::kMin:
    case PointwiseMode::kMax:
    case PointwiseMode::kScale:
    case PointwiseMode::kBiasAdd: return true;
    default: return false;
  }
}

Status plan_conv(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const int xi = node.op == OpKind::kConvDgrad ? node.outputs[0] : node.inputs[0];
  const int wi = node.op == OpKind::kConvWgrad ? node.outputs[0] : node.inputs[1];
  const int yi = node.op == OpKind::kConvFprop ? node.outputs[0]
                                               : (node.op == OpKind::kConvDgrad ? node.inputs[0] : node.inputs[1]);
  const auto x = tensor_dims(g, xi), w = tensor_dims(g, wi), y = tensor_dims(g, yi);
  const size_t r = x.size();
  if (r < 3 || r > 5)
    return invalid_argument(where + ": tensor " + tensor_label(g, xi) + " has rank " + std::to_string(r) +
                            "; convolutions take N, C and 1 to 3 spatial dims");
  if (w.size() != r || y.size() != r)
    return invalid_argument(where + ": tensors " + tensor_label(g, xi) + ", " + tensor_label(g, wi) + ", " +
                            tensor_label(g, yi) + " must have the same rank");
  const size_t sr = r - 2;
  const ConvAttrs& a = node.conv;
  auto attr_ok = [&](const std::vector<int64_t>& v, const char* name) -> Status {
    if (!v.empty() && v.size() != sr)
      return invalid_argument(where + ": attribute '" + name + "' has " + std::to_string(v.size()) + " entries for " +
                              std::to_string(sr) + " spatial dims");
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(attr_ok(a.pre_padding, "pre_padding"));
  KILN_RETURN_IF_ERROR(attr_ok(a.post_padding, "post_padding"));
  KILN_RETURN_IF_ERROR(attr_ok(a.stride, "stride"));
  KILN_RETURN_IF_ERROR(attr_ok(a.dilation, "dilation"));
  ConvGeom& c = p.conv;
  c.n = x[0];
  c.c = x[1];
  c.k = w[0];
  c.groups = a.groups;
  if (c.groups <= 0 || c.c % c.groups != 0 || c.k % c.groups != 0)
    return invalid_argument(where + ": groups=" + std::to_string(c.groups) + " must divide input channels " +
                            std::to_string(c.c) + " and output channels " + std::to_string(c.k));
  if (w[1] != c.c / c.groups)
    return invalid_argument(where + ": filter " + tensor_label(g, wi) + " dims " + dims_str(w) +
                            " need dim 1 = C/groups = " + std::to_string(c.c / c.groups));
  if (y[0] != c.n || y[1] != c.k)
    return invalid_argument(where + ": tensor " + tensor_label(g, yi) + " dims " + dims_str(y) +
                            " need N=" + std::to_string(c.n) + " and K=" + std::to_string(c.k));
  for (size_t s = 0; s < sr; ++s) {
    const size_t slot = 3 - sr + s;
    c.in[slot] = x[2 + s];
    c.filt[slot] = w[2 + s];
    c.pad[slot] = a.pre_padding.empty() ? 0 : a.pre_padding[s];
    const int64_t post = a.post_padding.empty() ? c.pad[slot] : a.post_padding[s];
    c.stride[slot] = a.stride.empty() ? 1 : a.stride[s];
    c.dil[slot] = a.dilation.empty() ? 1 : a.dilation[s];
    if (c.stride[slot] <= 0 || c.dil[slot] <= 0 || c.pad[slot] < 0 || post < 0)
      return invalid_argument(where + ": spatial dim " + std::to_string(s) +
                              " needs stride and dilation > 0 and padding >= 0");
    const int64_t span = c.in[slot] + c.pad[slot] + post - c.dil[slot] * (c.filt[slot] - 1) - 1;
    const int64_t expect = span < 0 ? 0 : span / c.stride[slot] + 1;
    if (y[2 + s] != expect)
      return invalid_argument(where + ": tensor " + tensor_label(g, yi) + " spatial dim " + std::to_string(s) + " is " +
                              std::to_string(y[2 + s]) + ", convolution geometry gives " + std::to_string(expect));
    c.out[slot] = y[2 + s];
  }
  const int64_t cg = c.c / c.groups;
  p.macs = static_cast<double>(c.n) * c.k * c.out_size() * cg * c.filt_size();
  if (node.op == OpKind::kConvFprop) p.reduction_length = cg * c.filt_size();
  else if (node.op == OpKind::kConvDgrad) p.reduction_length = (c.k / c.groups) * c.filt_size();
  else p.reduction_length = c.n * c.out_size();
  return Status::ok();
}

Status plan_matmul(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const auto a = tensor_dims(g, node.inputs[0]), b = tensor_dims(g, node.inputs[1]),
             c = tensor_dims(g, node.outputs[0]);
  if (a.size() < 2 || b.size() < 2 || c.size() < 2) return invalid_argument(where + ": matmul operands need rank >= 2");
  MatmulGeom& m = p.mm;
  m.m = a[a.size() - 2];
  m.k = a[a.size() - 1];
  m.n = b[b.size() - 1];
  if (b[b.size() - 2] != m.k)
    return invalid_argument(where + ": K mismatch: a " + tensor_label(g, node.inputs[0]) + " " + dims_str(a) + ", b " +
                            tensor_label(g, node.inputs[1]) + " " + dims_str(b));
  if (c[c.size() - 2] != m.m || c[c.size() - 1] != m.n)
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(c) +
                            " is not [..., " + std::to_string(m.m) + ", " + std::to_string(m.n) + "]");
  m.batch.assign(c.begin(), c.end() - 2);
  auto batch_strides = [&](const std::vector<int64_t>& d, int t, std::vector<int64_t>& out) -> Status {
    const size_t nb = d.size() - 2;
    if (nb > m.batch.size())
      return invalid_argument(where + ": " + tensor_label(g, t) + " has more batch dims than the output");
    const auto packed = row_major_strides(d);
    out.assign(m.batch.size(), 0);
    for (size_t i = 0; i < nb; ++i) {
      const size_t oi = m.batch.size() - nb + i;
      if (d[i] == m.batch[oi]) out[oi] = packed[i];
      else if (d[i] != 1)
        return invalid_argument(where + ": batch dims of " + tensor_label(g, t) + " " + dims_str(d) +
                                " do not broadcast to the output's " + dims_str(c));
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(batch_strides(a, node.inputs[0], m.a_batch));
  KILN_RETURN_IF_ERROR(batch_strides(b, node.inputs[1], m.b_batch));
  p.macs = static_cast<double>(m.batch_count()) * m.m * m.n * m.k;
  p.reduction_length = m.k;
  return Status::ok();
}

Status plan_pointwise(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const PointwiseMode mode = node.pointwise.mode;
  const bool binary = is_binary(mode);
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
  p.macs = static_cast<double>(product(pw.out_dims));
  return Status::ok();
}

Status plan_reduction(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const auto x = tensor_dims(g, node.inputs[0]), y = tensor_dims(g, node.outputs[0]);
  if (x.size() != y.size())
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(y) +
                            " must keep the input's rank " + dims_str(x));
  ReduceGeom& r = p.red;
  r.in_dims = x;
  r.reduced.assign(x.size(), false);
  if (node.reduction.axes.empty()) {
    for (size_t i = 0; i < x.size(); ++i) r.reduced[i] = y[i] == 1 && x[i] != 1;
  } else {
    for (int ax : node.reduction.axes) {
      const int rank = static_cast<int>(x.size());
      const int a = ax < 0 ? ax + rank : ax;
      if (a < 0 || a >= rank)
        return invalid_argument(where + ": axis " + std::to_string(ax) + " out of range for rank " +
                                std::to_string(rank));
      r.reduced[static_cast<size_t>(a)] = true;
    }
  }
  r.reduced_count = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t want = r.reduced[i] ? 1 : x[i];
    if (y[i] != want)
      return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(y) +
                              " does not match input " + dims_str(x) + " reduced over the given axes");
    if (r.reduced[i]) r.reduced_count *= x[i];
  }
  p.macs = static_cast<double>(product(x));
  p.reduction_length = r.reduced_count;
  return Status::ok();
}

Status plan_norm(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
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
  p.macs = 3.0 * static_cast<double>(product(n.x_dims));
  p.reduction_length = n.inner;
  return Status::ok();
}

Status plan_sdpa(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const auto q = tensor_dims(g, node.inputs[0]), k = tensor_dims(g, node.inputs[1]), v = tensor_dims(g, node.inputs[2]),
             o = tensor_dims(g, node.outputs[0]);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || o.size() != 4)
    return invalid_argument(where + ": q, k, v and o must be [B, H, S, D]");
  SdpaGeom& s = p.sdpa;
  s.b = q[0];
  s.h = q[1];
  s.sq = q[2];
  s.d = q[3];
  s.hk = k[1];
  s.skv = k[2];
  s.dv = v[3];
  if (k[0] != s.b || v[0] != s.b || k[3] != s.d || v[1] != s.hk || v[2] != s.skv)
    return invalid_argument(where + ": k " + dims_str(k) + " / v " + dims_str(v) + " do not fit q " + dims_str(q));
  if (s.hk <= 0 || s.h % s.hk != 0)
    return invalid_argument(where + ": query heads " + std::to_string(s.h) + " must be a multiple of key heads " +
                            std::to_string(s.hk));
  if (o != std::vector<int64_t>{s.b, s.h, s.sq, s.dv})
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(o) + " must be " +
                            dims_str({s.b, s.h, s.sq, s.dv}));
  s.scale = node.sdpa.attn_scale ? *node.sdpa.attn_scale : 1.0 / std::sqrt(static_cast<double>(s.d));
  s.causal = node.sdpa.causal;
  p.macs = static_cast<double>(s.b) * s.h * s.sq * s.skv * (s.d + s.dv);
  p.reduction_length = std::max(s.skv, s.d);
  return Status::ok();
}

}  // namespace

std::vector<int64_t> tensor_dims(const Graph& g, int t) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  std::vector<int64_t> v;
  v.reserve(d.dims.size());
  for (const Dim& x : d.dims) v.push_back(x.value);
  if (v.empty() && d.by_value) v.push_back(1);
  return v;
}

std::vector<int64_t> tensor_strides(const Graph& g, int t) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  auto dims = tensor_dims(g, t);
  if (d.strides.size() == dims.size() && !dims.empty()) return d.strides;
  return row_major_strides(dims);
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

std::vector<int> producers(const Graph& g) {
  std::vector<int> p(g.tensors.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int t : g.nodes[n].outputs)
      if (t >= 0 && static_cast<size_t>(t) < p.size()) p[static_cast<size_t>(t)] = static_cast<int>(n);
  return p;
}

bool is_output(const Graph& g, int t) { return std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end(); }

// The graph layer's rule (a by-value scalar is passed in the compute dtype, as cuDNN receives it); the
// references used to round such a scalar to the io dtype instead (0.1 in a bf16 graph became 0.10009765625).
DataType dtype_of(const Graph& g, int t) { return g.dtype_of(t); }

std::string node_label(const Graph& g, int node) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  return "node '" + n.name + "' (" + op_kind_name(n.op) + ")";
}

StatusOr<std::vector<int>> topological_order(const Graph& g) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> writer(g.tensors.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (node.outputs.size() != 1)
      return invalid_argument(node_label(g, static_cast<int>(n)) + ": expected 1 output, got " +
                              std::to_string(node.outputs.size()));
    for (int t : node.inputs)
      if (t < 0 || t >= nt)
        return invalid_argument(node_label(g, static_cast<int>(n)) + ": input tensor index " + std::to_string(t) +
                                " out of range");
    for (int t : node.outputs) {
      if (t < 0 || t >= nt)
        return invalid_argument(node_label(g, static_cast<int>(n)) + ": output tensor index " + std::to_string(t) +
                                " out of range");
      if (writer[static_cast<size_t>(t)] >= 0)
        return invalid_argument("tensor " + tensor_label(g, t) + " is written by two nodes");
      writer[static_cast<size_t>(t)] = static_cast<int>(n);
    }
  }
  for (int t : g.outputs)
    if (t < 0 || t >= nt) return invalid_argument("graph output index " + std::to_string(t) + " out of range");
  std::vector<int> order;
  std::vector<bool> done(g.nodes.size(), false), ready(g.tensors.size(), false);
  for (int t = 0; t < nt; ++t) ready[static_cast<size_t>(t)] = writer[static_cast<size_t>(t)] < 0;
  bool progress = true;
  while (order.size() < g.nodes.size() && progress) {
    progress = false;
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (done[n]) continue;
      const Node& node = g.nodes[n];
      if (!std::all_of(node.inputs.begin(), node.inputs.end(), [&](int t) { return ready[static_cast<size_t>(t)]; }))
        continue;
      done[n] = true;
      progress = true;
      order.push_back(static_cast<int>(n));
      for (int t : node.outputs) ready[static_cast<size_t>(t)] = true;
    }
  }
  if (order.size() < g.nodes.size()) {
    size_t n = 0;
    while (done[n]) ++n;
    return invalid_argument("graph has a cycle through " + node_label(g, static_cast<int>(n)));
  }
  return order;
}

StatusOr<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return invalid_argument("dims " + dims_str(in) + " do not broadcast to " + dims_str(out));
  const auto packed = row_major_strides(in);
  std::vector<int64_t> s(out.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t oi = out.size() - in.size() + i;
    if (in[i] == out[oi]) s[oi] = in[i] == 1 ? 0 : packed[i];
    else if (in[i] != 1) return invalid_argument("dims " + dims_str(in) + " do not broadcast to " + dims_str(out));
  }
  return s;
}

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
    case OpKind::kSdpa: want_in = 3; break;
    default: want_in = node.inputs.size(); break;  // checked per op below
  }
  if (node.inputs.size() != want_in)
    return invalid_argument(where + ": expected " + std::to_string(want_in) + " inputs, got " +
                            std::to_string(node.inputs.size()));
  if (node.outputs.size() != 1) return invalid_argument(where + ": expected 1 output");
  std::vector<int> all = node.inputs;
  all.push_back(node.outputs[0]);
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
  switch (node.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad: KILN_RETURN_IF_ERROR(plan_conv(g, node, where, p)); break;
    case OpKind::kMatmul: KILN_RETURN_IF_ERROR(plan_matmul(g, node, where, p)); break;
    case OpKind::kPointwise: KILN_RETURN_IF_ERROR(plan_pointwise(g, node, where, p)); break;
    case OpKind::kReduction: KILN_RETURN_IF_ERROR(plan_reduction(g, node, where, p)); break;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: KILN_RETURN_IF_ERROR(plan_norm(g, node, where, p)); break;
    case OpKind::kSdpa: KILN_RETURN_IF_ERROR(plan_sdpa(g, node, where, p)); break;
  }
  return p;
}

}  // namespace kiln::validate_internal
