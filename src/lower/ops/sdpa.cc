// Lowering of the scaled dot-product attention family: Kiln node -> frontend node.
#include <cmath>

#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {

Status lower_sdpa(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const auto& q = c.g.tensors[n.inputs[0]];
  double scale = n.sdpa.attn_scale.value_or(1.0 / std::sqrt(static_cast<double>(q.dims.back().value)));
  auto attrs = fe::graph::SDPA_attributes()
                   .set_name(n.name)
                   .set_generate_stats(false)
                   .set_causal_mask(n.sdpa.causal)
                   .set_attn_scale(static_cast<float>(scale));
  auto outs = c.fg.sdpa(in(0), in(1), in(2), attrs);
  finish_output(c, n.outputs[0], outs[0]);
  return Status::ok();
}

}  // namespace kiln::lower_detail
