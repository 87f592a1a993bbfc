// Lowering of the convolution family (conv_fprop, conv_dgrad, conv_wgrad): Kiln node -> frontend node.
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {
namespace {

std::vector<int64_t> or_default(const std::vector<int64_t>& v, size_t n, int64_t def) {
  return v.empty() ? std::vector<int64_t>(n, def) : v;
}

}  // namespace

Status lower_conv(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  size_t spatial = c.g.tensors[n.inputs[0]].dims.size() - 2;
  auto pre = or_default(n.conv.pre_padding, spatial, 0), post = or_default(n.conv.post_padding, spatial, 0);
  auto stride = or_default(n.conv.stride, spatial, 1), dil = or_default(n.conv.dilation, spatial, 1);
  // The three directions take the same attributes.
  auto attrs = [&](auto a) {
    return a.set_name(n.name)
        .set_pre_padding(pre)
        .set_post_padding(post)
        .set_stride(stride)
        .set_dilation(dil)
        .set_compute_data_type(compute);
  };
  TensorPtr y;
  if (n.op == OpKind::kConvFprop) {
    y = c.fg.conv_fprop(in(0), in(1), attrs(fe::graph::Conv_fprop_attributes()));
  } else if (n.op == OpKind::kConvDgrad) {
    y = c.fg.conv_dgrad(in(0), in(1), attrs(fe::graph::Conv_dgrad_attributes()));
  } else {
    // Kiln's order is {x, dy}; the frontend takes (dy, x).
    y = c.fg.conv_wgrad(in(1), in(0), attrs(fe::graph::Conv_wgrad_attributes()));
  }
  finish_main_output(c, n, y);
  return Status::ok();
}

}  // namespace kiln::lower_detail
