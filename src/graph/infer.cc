// Shape and dtype inference, one function per op family. Messages name the node, the tensor (by its role
// and name) and the attribute at fault.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "graph/validate_internal.h"

namespace kiln::graph_internal {
namespace {

using Dims = std::vector<Dim>;

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Context for one node: names its inputs and outputs in messages.
struct NodeCtx {
  Graph& g;
  const GraphRoles& roles;
  Node& node;
  std::string where;

  const TensorDesc& in(size_t i) const { return g.tensors[node.inputs[i]]; }
  DataType in_dtype(size_t i) const { return roles.dtype_of(node.inputs[i]); }
  DataType out_dtype(size_t i = 0) const { return roles.dtype_of(node.outputs[i]); }
  std::string in_label(size_t i) const { return "input '" + in(i).name + "'"; }
  std::string out_label(size_t i = 0) const { return "output '" + g.tensors[node.outputs[i]].name + "'"; }
  Status error(const std::string& what) const { return invalid_argument(where + ": " + what); }
  DataType compute() const { return node.compute_dtype ? *node.compute_dtype : g.compute_dtype; }
};

Status check_rank(const NodeCtx& c, size_t i, size_t lo, size_t hi) {
  size_t r = c.in(i).dims.size();
  if (r >= lo && r <= hi) return Status::ok();
  std::string expected = lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
  return c.error(c.in_label(i) + ": rank " + std::to_string(r) + ", expected " + expected);
}

Status check_float_in(const NodeCtx& c, size_t i) {
  if (is_float(c.in_dtype(i))) return Status::ok();
  return c.error(c.in_label(i) + ": dtype " + dtype_name(c.in_dtype(i)) + " is not supported by " +
                 node_op_label(c.node) + " (expected a floating-point type)");
}

Status check_float_out(const NodeCtx& c) {
  if (is_float(c.out_dtype())) return Status::ok();
  return c.error(c.out_label() + ": dtype " + dtype_name(c.out_dtype()) + " is not supported by " +
                 node_op_label(c.node) + " (expected a floating-point type)");
}

// Matmul and convolutions: the two data inputs share a dtype (fp8 variants may mix), compute is fp32 or
// (for fp16 inputs) fp16, and an fp8 product is written in a wider type (scale it into fp8 afterwards).
Status check_gemm_dtypes(const NodeCtx& c) {
  KILN_RETURN_IF_ERROR(check_float_in(c, 0));
  KILN_RETURN_IF_ERROR(check_float_in(c, 1));
  DataType a = c.in_dtype(0), b = c.in_dtype(1);
  bool fp8 = is_fp8(a) || is_fp8(b);
  if (a != b && !(is_fp8(a) && is_fp8(b)))
    return c.error(c.in_label(0) + " is " + dtype_name(a) + " but " + c.in_label(1) + " is " + dtype_name(b) +
                   "; mixed input dtypes are not supported");
  DataType comp = c.compute();
  if (comp != DataType::kFloat32 && !(comp == DataType::kFloat16 && a == DataType::kFloat16))
    return c.error("attribute 'compute_dtype': " + std::string(dtype_name(comp)) + " is not supported with " +
                   dtype_name(a) + " inputs (use fp32" + (a == DataType::kFloat16 ? " or fp16)" : ")"));
  KILN_RETURN_IF_ERROR(check_float_out(c));
  if (fp8 && is_fp8(c.out_dtype()))
    return c.error(c.out_label() + ": an fp8 " + node_op_label(c.node) + " writes fp16, bf16 or fp32, not " +
                   dtype_name(c.out_dtype()) + " (add a scale node to produce fp8)");
  return Status::ok();
}

Status check_compute_fp32(const NodeCtx& c) {
  if (c.compute() == DataType::kFloat32) return Status::ok();
  return c.error("attribute 'compute_dtype': " + std::string(dtype_name(c.compute())) + " is not supported by " +
                 node_op_label(c.node) + " (expected fp32)");
}

// Fills defaulted conv attributes and checks their sizes and values.
Status normalize_conv_attrs(const NodeCtx& c, size_t spatial) {
  ConvAttrs& a = c.node.conv;
  struct Field {
    const char* name;
    std::vector<int64_t>* v;
    int64_t def;
    int64_t min;
  };
  Field fields[] = {{"pre_padding", &a.pre_padding, 0, 0},
                    {"post_padding", &a.post_padding, 0, 0},
                    {"stride", &a.stride, 1, 1},
                    {"dilation", &a.dilation, 1, 1}};
  for (Field& f : fields) {
    if (f.v->empty()) f.v->assign(spatial, f.def);
    if (f.v->size() == 1 && spatial > 1) f.v->assign(spatial, f.v->front());  // one value for every spatial dim
    if (f.v->size() != spatial)
      return c.error("attribute '" + std::string(f.name) + "': " + std::to_string(f.v->size()) + " entries, expected " +
                     std::to_string(spatial) + " (one per spatial dim)");
    for (int64_t x : *f.v)
      if (x < f.min || x > (int64_t{1} << 30))
        return c.error("attribute '" + std::string(f.name) + "': " + list_text(*f.v) + " has a value below " +
                       std::to_string(f.min) + " or above 2^30");
  }
  if (a.groups < 1 || a.groups > (int64_t{1} << 30))
    return c.error("attribute 'groups': " + std::to_string(a.groups) + " must be between 1 and 2^30");
  return Status::ok();
}

int64_t conv_out_extent(int64_t in, int64_t filter, int64_t pre, int64_t post, int64_t stride, int64_t dil) {
  int64_t span = dil * (filter - 1) + 1;
  int64_t padded = in + pre + post;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

// x/dx [N, C, spatial...], w [K, C/groups, filter...], y/dy [N, K, out...]: checks the channel relations.
Status check_conv_channels(const NodeCtx& c, const Dims& x, const std::string& x_label, const Dims& w,
                           const std::string& w_label, int64_t k_from_y, const std::string& y_label) {
  int64_t g = c.node.conv.groups;
  int64_t channels = x[1].value, k = w[0].value;
  if (channels % g != 0)
    return c.error(x_label + ": channels " + std::to_string(channels) + " not divisible by attribute 'groups' " +
                   std::to_string(g));
  if (k % g != 0)
    return c.error(w_label + ": output channels " + std::to_string(k) + " not divisible by attribute 'groups' " +
                   std::to_string(g));
  if (w[1].value * g != channels)
    return c.error(w_label + ": dim 1 is " + std::to_string(w[1].value) + ", expected " + std::to_string(channels / g) +
                   " (channels " + std::to_string(channels) + " / groups " + std::to_string(g) + ")");
  if (k_from_y >= 0 && k_from_y != k)
    return c.error(y_label + ": channels " + std::to_string(k_from_y) + " differ from " + w_label +
                   " output channels " + std::to_string(k));
  return Status::ok();
}

Status infer_conv(NodeCtx& c, std::vector<Dims>* out) {
  OpKind op = c.node.op;
  // Ranks of the two inputs: 3 to 5 (1D to 3D convolution), equal.
  KILN_RETURN_IF_ERROR(check_rank(c, 0, 3, 5));
  KILN_RETURN_IF_ERROR(check_rank(c, 1, c.in(0).dims.size(), c.in(0).dims.size()));
  KILN_RETURN_IF_ERROR(check_gemm_dtypes(c));
  size_t rank = c.in(0).dims.size(), spatial = rank - 2;
  KILN_RETURN_IF_ERROR(normalize_conv_attrs(c, spatial));
  const ConvAttrs& a = c.node.conv;
  const Dims& declared = c.g.tensors[c.node.outputs[0]].dims;
  if (!declared.empty() && declared.size() != rank)
    return c.error(c.out_label() + ": declared rank " + std::to_string(declared.size()) + ", expected " +
                   std::to_string(rank));

  if (op == OpKind::kConvFprop) {
    const Dims& x = c.in(0).dims;
    const Dims& w = c.in(1).dims;
    KILN_RETURN_IF_ERROR(check_conv_channels(c, x, c.in_label(0), w, c.in_label(1), -1, ""));
    Dims y = {x[0], w[0]};
    for (size_t i = 0; i < spatial; ++i) {
      int64_t o = conv_out_extent(x[2 + i].value, w[2 + i].value, a.pre_padding[i], a.post_padding[i], a.stride[i],
                                  a.dilation[i]);
      if (o <= 0)
        return c.error(c.in_label(1) + ": filter extent " + std::to_string(w[2 + i].value) + " (dilation " +
                       std::to_string(a.dilation[i]) + ") does not fit spatial dim " + std::to_string(2 + i) + " of " +
                       c.in_label(0) + " (" + std::to_string(x[2 + i].value) + " + padding)");
      y.push_back(Dim{o, "", x[2 + i].follows_symbols() || w[2 + i].follows_symbols()});
    }
    out->push_back(y);
    return Status::ok();
  }

  if (op == OpKind::kConvDgrad) {
    const Dims& dy = c.in(0).dims;
    const Dims& w = c.in(1).dims;
    // dx's spatial extent is not unique when stride > 1: a declared dx is checked, else the smallest one.
    Dims dx = {dy[0], Dim{w[1].value * a.groups, "", w[1].follows_symbols()}};
    for (size_t i = 0; i < spatial; ++i) {
      int64_t in_extent;
      if (!declared.empty()) {
        in_extent = declared[2 + i].value;
      } else {
        in_extent = (dy[2 + i].value - 1) * a.stride[i] - a.pre_padding[i] - a.post_padding[i] +
                    a.dilation[i] * (w[2 + i].value - 1) + 1;
      }
      if (in_extent <= 0)
        return c.error(c.out_label() + ": spatial dim " + std::to_string(2 + i) + " would be " +
                       std::to_string(in_extent) + "; check attributes 'padding' and 'stride'");
      int64_t o =
          conv_out_extent(in_extent, w[2 + i].value, a.pre_padding[i], a.post_padding[i], a.stride[i], a.dilation[i]);
      if (o != dy[2 + i].value)
        return c.error(c.out_label() + ": spatial dim " + std::to_string(2 + i) + " of " + std::to_string(in_extent) +
                       " gives a forward output of " + std::to_string(o) + ", but " + c.in_label(0) + " has " +
                       std::to_string(dy[2 + i].value));
      // Not derived: the smallest of several valid extents, and `kiln` writes it back declared (spec_writer),
      // so it stays a number in the signature (a declared dx is the spec's).
      dx.push_back(Dim{in_extent, declared.empty() ? "" : declared[2 + i].symbol});
    }
    KILN_RETURN_IF_ERROR(check_conv_channels(c, dx, c.out_label(), w, c.in_label(1), dy[1].value, c.in_label(0)));
    out->push_back(dx);
    return Status::ok();
  }

  // conv_wgrad: x [N, C, in...], dy [N, K, out...] -> dw [K, C/groups, filter...]
  const Dims& x = c.in(0).dims;
  const Dims& dy = c.in(1).dims;
  if (x[0].value != dy[0].value)
    return c.error(c.in_label(1) + ": batch " + std::to_string(dy[0].value) + " differs from " + c.in_label(0) +
                   " batch " + std::to_string(x[0].value));
  if (x[1].value % a.groups != 0 || dy[1].value % a.groups != 0)
    return c.error("attribute 'groups' " + std::to_string(a.groups) + " does not divide the channels of " +
                   c.in_label(0) + " (" + std::to_string(x[1].value) + ") and " + c.in_label(1) + " (" +
                   std::to_string(dy[1].value) + ")");
  Dims dw = {dy[1], Dim{x[1].value / a.groups, "", x[1].follows_symbols()}};
  for (size_t i = 0; i < spatial; ++i) {
    int64_t f;
    if (!declared.empty()) {
      f = declared[2 + i].value;
    } else {
      f = (x[2 + i].value + a.pre_padding[i] + a.post_padding[i] - (dy[2 + i].value - 1) * a.stride[i] - 1) /
              a.dilation[i] +
          1;
    }
    int64_t o =
        f > 0 ? conv_out_extent(x[2 + i].value, f, a.pre_padding[i], a.post_padding[i], a.stride[i], a.dilation[i]) : 0;
    if (f <= 0 || o != dy[2 + i].value)
      return c.error(c.out_label() + ": no filter extent in spatial dim " + std::to_string(2 + i) + " maps " +
                     c.in_label(0) + " (" + std::to_string(x[2 + i].value) + ") onto " + c.in_label(1) + " (" +
                     std::to_string(dy[2 + i].value) + ")" +
                     (declared.empty() ? "" : " with the declared extent " + std::to_string(f)));
    dw.push_back(Dim{f, ""});
  }
  out->push_back(dw);
  return Status::ok();
}

// Numpy-style broadcast of a and b (right-aligned). On ties prefers the dim that follows the symbols (a
// dynamic one, then a derived one), else a's.
Status broadcast(const NodeCtx& c, const Dims& a, const std::string& a_label, const Dims& b, const std::string& b_label,
                 Dims* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, Dim{1, ""});
  for (size_t i = 0; i < r; ++i) {
    const Dim* da = i + a.size() >= r ? &a[i + a.size() - r] : nullptr;
    const Dim* db = i + b.size() >= r ? &b[i + b.size() - r] : nullptr;
    if (da && db) {
      if (da->value == db->value) {
        const auto rank = [](const Dim* d) { return d->is_dynamic() ? 2 : d->derived ? 1 : 0; };
        (*out)[i] = rank(da) >= rank(db) ? *da : *db;
      } else if (da->value == 1) {
        (*out)[i] = *db;
      } else if (db->value == 1) {
        (*out)[i] = *da;
      } else {
        return c.error(a_label + " " + dims_text(a) + " and " + b_label + " " + dims_text(b) +
                       " do not broadcast (axis " + std::to_string(i) + ": " + std::to_string(da->value) + " vs " +
                       std::to_string(db->value) + ")");
      }
    } else {
      (*out)[i] = da ? *da : *db;
    }
  }
  return Status::ok();
}

Status infer_matmul(NodeCtx& c, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_rank(c, 0, 2, 8));
  KILN_RETURN_IF_ERROR(check_rank(c, 1, 2, 8));
  KILN_RETURN_IF_ERROR(check_gemm_dtypes(c));
  const Dims& a = c.in(0).dims;
  const Dims& b = c.in(1).dims;
  const Dim& k_a = a[a.size() - 1];
  const Dim& k_b = b[b.size() - 2];
  if (k_a.value != k_b.value)
    return c.error(c.in_label(1) + ": inner dims differ: " + c.in_label(0) + " has K=" + std::to_string(k_a.value) +
                   " (last axis) but " + c.in_label(1) + " has K=" + std::to_string(k_b.value) +
                   " (second-to-last axis)");
  Dims batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2), batch;
  Status s = broadcast(c, batch_a, c.in_label(0) + " batch dims", batch_b, c.in_label(1) + " batch dims", &batch);
  if (!s.is_ok()) return s;
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b[b.size() - 1]);
  out->push_back(batch);
  return Status::ok();
}

Status infer_pointwise(NodeCtx& c, std::vector<Dims>* out) {
  PointwiseMode m = c.node.pointwise.mode;
  for (size_t i = 0; i < c.node.inputs.size(); ++i)
    if (m != PointwiseMode::kIdentity) KILN_RETURN_IF_ERROR(check_float_in(c, i));
  if (m != PointwiseMode::kIdentity) KILN_RETURN_IF_ERROR(check_float_out(c));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  const Dims& a = c.in(0).dims;
  if (pointwise_is_unary(m)) {
    out->push_back(a);
    return Status::ok();
  }
  const Dims& b = c.in(1).dims;
  if (m == PointwiseMode::kScale) {
    if (c.in(1).element_count() != 1)
      return c.error(c.in_label(1) + ": a scale must be a scalar (one element), got " + dims_text(b));
    out->push_back(a);
    return Status::ok();
  }
  if (m == PointwiseMode::kBiasAdd) {
    // The bias broadcasts into x, never the other way: same rank, each extent 1 or equal to x's.
    if (b.size() != a.size())
      return c.error(c.in_label(1) + ": rank " + std::to_string(b.size()) + ", expected " + std::to_string(a.size()) +
                     " (same rank as " + c.in_label(0) + ", e.g. [1,C,1,1])");
    for (size_t i = 0; i < a.size(); ++i)
      if (b[i].value != 1 && b[i].value != a[i].value)
        return c.error(c.in_label(1) + ": dim " + std::to_string(i) + " is " + std::to_string(b[i].value) +
                       ", expected 1 or " + std::to_string(a[i].value) + " (" + c.in_label(0) + " " + dims_text(a) +
                       ")");
    out->push_back(a);
    return Status::ok();
  }
  Dims y;
  KILN_RETURN_IF_ERROR(broadcast(c, a, c.in_label(0), b, c.in_label(1), &y));
  out->push_back(y);
  return Status::ok();
}

Status infer_reduction(NodeCtx& c, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_float_in(c, 0));
  KILN_RETURN_IF_ERROR(check_float_out(c));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  const Dims& x = c.in(0).dims;
  int rank = static_cast<int>(x.size());
  std::vector<int>& axes = c.node.reduction.axes;
  if (axes.empty()) {  // all axes
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int& ax : axes) {
    if (ax < -rank || ax >= rank)
      return c.error("attribute 'axes': axis " + std::to_string(ax) + " is out of range for " + c.in_label(0) +
                     " of rank " + std::to_string(rank));
    if (ax < 0) ax += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return c.error("attribute 'axes': axis " + std::to_string(*std::adjacent_find(axes.begin(), axes.end())) +
                   " is listed twice");
  Dims y = x;
  for (int ax : axes) y[ax] = Dim{1, ""};
  out->push_back(y);
  return Status::ok();
}

Status infer_norm(NodeCtx& c, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_rank(c, 0, 2, 8));
  DataType xt = c.in_dtype(0);
  if (xt != DataType::kFloat32 && xt != DataType::kFloat16 && xt != DataType::kBFloat16)
    return c.error(c.in_label(0) + ": dtype " + std::string(dtype_name(xt)) + " is not supported by " +
                   node_op_label(c.node) + " (expected fp32, fp16 or bf16)");
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

Status infer_sdpa(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out) {
  for (size_t i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(check_rank(c, i, 4, 4));
  DataType qt = c.in_dtype(0);
  for (size_t i = 0; i < 3; ++i) {
    DataType t = c.in_dtype(i);
    if (t != DataType::kFloat16 && t != DataType::kBFloat16)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(t)) +
                     " is not supported by sdpa (fp16 or bf16 only)");
    if (t != qt)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(t)) + " differs from " + c.in_label(0) + " (" +
                     dtype_name(qt) + ")");
  }
  DataType ot = c.out_dtype();
  if (ot != DataType::kFloat16 && ot != DataType::kBFloat16)
    return c.error(c.out_label() + ": dtype " + std::string(dtype_name(ot)) +
                   " is not supported by sdpa (fp16 or bf16 only)");
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  if (options.target_sm_version > 0 && options.target_sm_version < 80)
    return not_supported(c.where + ": sdpa needs SM 8.0 or newer, target is SM " +
                         std::to_string(options.target_sm_version / 10) + "." +
                         std::to_string(options.target_sm_version % 10));
  if (c.node.sdpa.attn_scale && !(*c.node.sdpa.attn_scale > 0.0 && std::isfinite(*c.node.sdpa.attn_scale)))
    return c.error("attribute 'attn_scale': " + std::to_string(*c.node.sdpa.attn_scale) + " must be positive");
  const Dims& q = c.in(0).dims;
  const Dims& k = c.in(1).dims;
  const Dims& v = c.in(2).dims;
  for (size_t i = 1; i < 3; ++i)
    if (c.in(i).dims[0].value != q[0].value)
      return c.error(c.in_label(i) + ": batch " + std::to_string(c.in(i).dims[0].value) + " differs from " +
                     c.in_label(0) + " batch " + std::to_string(q[0].value));
  if (v[1].value != k[1].value)
    return c.error(c.in_label(2) + ": heads " + std::to_string(v[1].value) + " differ from " + c.in_label(1) +
                   " heads " + std::to_string(k[1].value));
  if (q[1].value % k[1].value != 0)
    return c.error(c.in_label(1) + ": heads " + std::to_string(k[1].value) + " do not divide " + c.in_label(0) +
                   " heads " + std::to_string(q[1].value));
  if (v[2].value != k[2].value)
    return c.error(c.in_label(2) + ": sequence length " + std::to_string(v[2].value) + " differs from " +
                   c.in_label(1) + " sequence length " + std::to_string(k[2].value));
  if (k[3].value != q[3].value)
    return c.error(c.in_label(1) + ": head dim " + std::to_string(k[3].value) + " differs from " + c.in_label(0) +
                   " head dim " + std::to_string(q[3].value));
  for (size_t i : {size_t{0}, size_t{2}}) {
    int64_t d = c.in(i).dims[3].value;
    if (d % 8 != 0 || d > 256)
      return c.error(c.in_label(i) + ": head dim " + std::to_string(d) + " must be a multiple of 8 and at most 256");
  }
  out->push_back(Dims{q[0], q[1], q[2], v[3]});
  return Status::ok();
}

}  // namespace

bool is_fp8(DataType t) { return t == DataType::kFp8E4M3 || t == DataType::kFp8E5M2; }
bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || is_fp8(t);
}

std::string node_op_label(const Node& node) {
  if (node.op == OpKind::kPointwise) return pointwise_mode_name(node.pointwise.mode);
  if (node.op == OpKind::kReduction) return std::string("reduce_") + reduction_mode_name(node.reduction.mode);
  return op_kind_name(node.op);
}

std::string node_where(const Node& node) { return "node '" + node.name + "' (" + node_op_label(node) + ")"; }

std::string ints_text(const std::vector<int64_t>& values) { return list_text(values); }

std::string dims_text(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    if (dims[i].is_dynamic()) s += dims[i].symbol + "=";
    s += std::to_string(dims[i].value);
  }
  return s + "]";
}

Status infer_node(Graph& graph, const GraphRoles& roles, Node& node, const ValidateOptions& options,
                  std::vector<Dims>* out_dims) {
  NodeCtx c{graph, roles, node, node_where(node)};
  switch (node.op) {
    case OpKind::kConvFprop: return infer_conv(c, out_dims);
    case OpKind::kConvDgrad: return infer_conv(c, out_dims);
    case OpKind::kConvWgrad: return infer_conv(c, out_dims);
    case OpKind::kMatmul: return infer_matmul(c, out_dims);
    case OpKind::kPointwise: return infer_pointwise(c, out_dims);
    case OpKind::kReduction: return infer_reduction(c, out_dims);
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return infer_norm(c, out_dims);
    case OpKind::kSdpa: return infer_sdpa(c, options, out_dims);
  }
  return internal_error(c.where + ": unknown op kind");
}

}  // namespace kiln::graph_internal
