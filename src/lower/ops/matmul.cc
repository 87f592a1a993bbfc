// Lowering of the matmul family: Kiln node -> frontend node.
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {

Status lower_matmul(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const fe::DataType_t compute = node_compute_dtype(c, n);
  auto y = c.fg.matmul(in(0), in(1), fe::graph::Matmul_attributes().set_name(n.name).set_compute_data_type(compute));
  finish_main_output(c, n, y);
  return Status::ok();
}

}  // namespace kiln::lower_detail
