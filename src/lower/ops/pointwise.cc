// Lowering of the pointwise family: Kiln node -> frontend node.
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {
namespace {

// Kiln's mode -> the frontend's (bias_add and scale are ADD and MUL with a broadcast operand).
fe::PointwiseMode_t to_fe_mode(PointwiseMode m) {
  switch (m) {
    case PointwiseMode::kAdd:
    case PointwiseMode::kBiasAdd: return fe::PointwiseMode_t::ADD;
    case PointwiseMode::kSub: return fe::PointwiseMode_t::SUB;
    case PointwiseMode::kMul:
    case PointwiseMode::kScale: return fe::PointwiseMode_t::MUL;
    case PointwiseMode::kDiv: return fe::PointwiseMode_t::DIV;
    case PointwiseMode::kMin: return fe::PointwiseMode_t::MIN;
    case PointwiseMode::kMax: return fe::PointwiseMode_t::MAX;
    case PointwiseMode::kRelu: return fe::PointwiseMode_t::RELU_FWD;
    case PointwiseMode::kGeluErf: return fe::PointwiseMode_t::GELU_FWD;
    case PointwiseMode::kGeluTanh: return fe::PointwiseMode_t::GELU_APPROX_TANH_FWD;
    case PointwiseMode::kSilu: return fe::PointwiseMode_t::SWISH_FWD;
    case PointwiseMode::kSigmoid: return fe::PointwiseMode_t::SIGMOID_FWD;
    case PointwiseMode::kTanh: return fe::PointwiseMode_t::TANH_FWD;
    case PointwiseMode::kExp: return fe::PointwiseMode_t::EXP;
    case PointwiseMode::kAbs: return fe::PointwiseMode_t::ABS;
    case PointwiseMode::kIdentity: return fe::PointwiseMode_t::IDENTITY;
  }
  return fe::PointwiseMode_t::IDENTITY;
}

}  // namespace

Status lower_pointwise(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  auto attrs = fe::graph::Pointwise_attributes()
                   .set_name(n.name)
                   .set_mode(to_fe_mode(n.pointwise.mode))
                   .set_compute_data_type(compute);
  TensorPtr y = n.inputs.size() == 1 ? c.fg.pointwise(in(0), attrs) : c.fg.pointwise(in(0), in(1), attrs);
  finish_output(c, n.outputs[0], y);
  return Status::ok();
}

}  // namespace kiln::lower_detail
