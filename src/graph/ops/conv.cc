// The convolution family (conv_fprop, conv_dgrad, conv_wgrad) in the graph layer: arity, inference,
// signature attributes, cost, and the geometry kiln/graph/ops/conv.h shares with the other layers.
#include "kiln/graph/ops/conv.h"

#include "graph/ops/op_family.h"

namespace kiln::graph_internal {
namespace {

void conv_arity(const Node&, size_t* lo, size_t* hi) { *lo = *hi = 2; }

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
        return c.error("attribute '" + std::string(f.name) + "': " + ints_text(*f.v) + " has a value below " +
                       std::to_string(f.min) + " or above 2^30");
  }
  if (a.groups < 1 || a.groups > (int64_t{1} << 30))
    return c.error("attribute 'groups': " + std::to_string(a.groups) + " must be between 1 and 2^30");
  return Status::ok();
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

Status infer_conv(NodeCtx& c, const ValidateOptions&, std::vector<Dims>* out) {
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
      int64_t o = conv_output_extent(x[2 + i].value, w[2 + i].value, a.pre_padding[i], a.post_padding[i], a.stride[i],
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
      int64_t o = conv_output_extent(in_extent, w[2 + i].value, a.pre_padding[i], a.post_padding[i], a.stride[i],
                                     a.dilation[i]);
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
        f > 0 ? conv_output_extent(x[2 + i].value, f, a.pre_padding[i], a.post_padding[i], a.stride[i], a.dilation[i])
              : 0;
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

std::string conv_signature_attrs(const Graph&, const Node& n) {
  return " pre_padding=" + ints_text(n.conv.pre_padding) + " post_padding=" + ints_text(n.conv.post_padding) +
         " stride=" + ints_text(n.conv.stride) + " dilation=" + ints_text(n.conv.dilation) +
         " groups=" + std::to_string(n.conv.groups);
}

// 2 * (elements of y) * (C/groups * filter volume): every element of y (or dy) meets one filter's worth of
// the input, whichever of the three the node computes.
OpCost conv_cost(const Graph& g, const Node& n) {
  const ConvRoles r = conv_roles(n);
  const TensorDesc& w = g.tensors[static_cast<size_t>(r.w)];
  const TensorDesc& y = g.tensors[static_cast<size_t>(r.y)];
  OpCost c;
  if (w.dims.empty() || w.dims[0].value <= 0) return c;
  const double per_output = static_cast<double>(w.element_count()) / static_cast<double>(w.dims[0].value);
  c.macs = static_cast<double>(y.element_count()) * per_output;
  c.flops = 2.0 * c.macs;
  return c;
}

}  // namespace

const OpFamily kConvFamily = {"conv", conv_arity, infer_conv, conv_signature_attrs, conv_cost};

}  // namespace kiln::graph_internal

namespace kiln {

ConvRoles conv_roles(const Node& n) {
  ConvRoles r;
  r.x = n.op == OpKind::kConvDgrad ? n.outputs[0] : n.inputs[0];
  r.w = n.op == OpKind::kConvWgrad ? n.outputs[0] : n.inputs[1];
  r.y = n.op == OpKind::kConvFprop ? n.outputs[0] : n.op == OpKind::kConvDgrad ? n.inputs[0] : n.inputs[1];
  return r;
}

int64_t conv_output_extent(int64_t in, int64_t filter, int64_t pre, int64_t post, int64_t stride, int64_t dilation) {
  const int64_t span = dilation * (filter - 1) + 1;
  const int64_t padded = in + pre + post;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

}  // namespace kiln
