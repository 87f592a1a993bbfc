// Lowering of the normalization family (layer_norm, rms_norm): Kiln node -> frontend node.
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {
namespace {

Status lower_layer_norm(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  auto attrs = fe::graph::Layernorm_attributes()
                   .set_name(n.name)
                   .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                   .set_epsilon(static_cast<float>(n.norm.epsilon))
                   .set_compute_data_type(compute);
  auto outs = c.fg.layernorm(in(0), in(1), in(2), attrs);
  finish_output(c, n.outputs[0], outs[0]);
  return Status::ok();
}

Status lower_rms_norm(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  auto eps = std::make_shared<fe::graph::Tensor_attributes>(static_cast<float>(n.norm.epsilon));
  auto attrs = fe::graph::Rmsnorm_attributes()
                   .set_name(n.name)
                   .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                   .set_epsilon(eps)
                   .set_compute_data_type(compute);
  auto outs = c.fg.rmsnorm(in(0), in(1), attrs);
  finish_output(c, n.outputs[0], outs[0]);
  return Status::ok();
}

}  // namespace

Status lower_norm(LowerCtx& c, const Node& n) {
  return n.op == OpKind::kLayerNorm ? lower_layer_norm(c, n) : lower_rms_norm(c, n);
}

}  // namespace kiln::lower_detail
