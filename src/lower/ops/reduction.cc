// Lowering of the reduction family: Kiln node -> frontend node.
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {
namespace {

fe::ReductionMode_t to_fe_reduction(ReductionMode m) {
  switch (m) {
    case ReductionMode::kSum: return fe::ReductionMode_t::ADD;
    case ReductionMode::kMax: return fe::ReductionMode_t::MAX;
    case ReductionMode::kMin: return fe::ReductionMode_t::MIN;
    case ReductionMode::kAmax: return fe::ReductionMode_t::AMAX;
  }
  return fe::ReductionMode_t::ADD;
}

}  // namespace

Status lower_reduction(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  auto y = c.fg.reduction(in(0), fe::graph::Reduction_attributes()
                                     .set_name(n.name)
                                     .set_mode(to_fe_reduction(n.reduction.mode))
                                     .set_compute_data_type(compute));
  finish_output(c, n.outputs[0], y);
  return Status::ok();
}

}  // namespace kiln::lower_detail
