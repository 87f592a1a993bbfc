// The convolution family's node plan (geometry) and host reference.
#include "kiln/graph/ops/conv.h"
#include "validate/ops/reference_ops.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

Status conv_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const ConvRoles roles = conv_roles(node);
  const int xi = roles.x, wi = roles.w, yi = roles.y;
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
    const int64_t expect = conv_output_extent(c.in[slot], c.filt[slot], c.pad[slot], post, c.stride[slot], c.dil[slot]);
    if (y[2 + s] != expect)
      return invalid_argument(where + ": tensor " + tensor_label(g, yi) + " spatial dim " + std::to_string(s) + " is " +
                              std::to_string(y[2 + s]) + ", convolution geometry gives " + std::to_string(expect));
    c.out[slot] = y[2 + s];
  }
  const int64_t cg = c.c / c.groups;
  if (node.op == OpKind::kConvFprop) p.reduction_length = cg * c.filt_size();
  else if (node.op == OpKind::kConvDgrad) p.reduction_length = (c.k / c.groups) * c.filt_size();
  else p.reduction_length = c.n * c.out_size();
  return Status::ok();
}

namespace {

// Calls f(x_index, w_index, y_index) for every multiply-accumulate of a convolution (packed NCDHW
// x and y, KCDHW w). fprop, dgrad and wgrad are the same loop with a different accumulation target.
template <typename F>
void for_each_conv_mac(const ConvGeom& c, F&& f) {
  const int64_t cg = c.c / c.groups, kg = c.k / c.groups;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t k = 0; k < c.k; ++k) {
      const int64_t grp = k / kg;
      for (int64_t o0 = 0; o0 < c.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < c.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < c.out[2]; ++o2) {
            const int64_t yi = (((n * c.k + k) * c.out[0] + o0) * c.out[1] + o1) * c.out[2] + o2;
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t ch = grp * cg + ci;
              for (int64_t f0 = 0; f0 < c.filt[0]; ++f0) {
                const int64_t i0 = o0 * c.stride[0] - c.pad[0] + f0 * c.dil[0];
                if (i0 < 0 || i0 >= c.in[0]) continue;
                for (int64_t f1 = 0; f1 < c.filt[1]; ++f1) {
                  const int64_t i1 = o1 * c.stride[1] - c.pad[1] + f1 * c.dil[1];
                  if (i1 < 0 || i1 >= c.in[1]) continue;
                  for (int64_t f2 = 0; f2 < c.filt[2]; ++f2) {
                    const int64_t i2 = o2 * c.stride[2] - c.pad[2] + f2 * c.dil[2];
                    if (i2 < 0 || i2 >= c.in[2]) continue;
                    const int64_t xi = (((n * c.c + ch) * c.in[0] + i0) * c.in[1] + i1) * c.in[2] + i2;
                    const int64_t wi = (((k * cg + ci) * c.filt[0] + f0) * c.filt[1] + f1) * c.filt[2] + f2;
                    f(xi, wi, yi);
                  }
                }
              }
            }
          }
    }
}

Values run_conv(const NodePlan& p, const Values& in0, const Values& in1) {
  const ConvGeom& c = p.conv;
  const int64_t cg = c.c / c.groups;
  switch (p.op) {
    case OpKind::kConvFprop: {
      Values y(static_cast<size_t>(c.n * c.k * c.out_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += in0[xi] * in1[wi]; });
      return y;
    }
    case OpKind::kConvDgrad: {  // in0 = dy, in1 = w
      Values dx(static_cast<size_t>(c.n * c.c * c.in_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += in0[yi] * in1[wi]; });
      return dx;
    }
    default: {  // wgrad: in0 = x, in1 = dy
      Values dw(static_cast<size_t>(c.k * cg * c.filt_size()), 0.0);
      for_each_conv_mac(c, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += in0[xi] * in1[yi]; });
      return dw;
    }
  }
}

}  // namespace

HostNodeResult conv_host(const NodePlan& p, const Node&, const std::vector<const Values*>& in,
                         const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  return contraction_host([&](const Values& a, const Values& b) { return run_conv(p, a, b); }, in, op, sop);
}

}  // namespace kiln::validate_internal
