// The pointwise family's device reference: one thread per output element, the math of
// reference_math.h (the host reference's).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/pointwise_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

__global__ void pointwise_kernel(BroadcastParams p, PointwiseMode mode, const double* __restrict__ a,
                                 const double* __restrict__ b, double* __restrict__ y, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oa, ob;
    broadcast_offsets(p, idx, &oa, &ob);
    y[idx] = pointwise_value(mode, a[oa], b ? b[ob] : 0.0);
  }
}

__global__ void pointwise_magnitude_kernel(BroadcastParams p, PointwiseMode mode, const double* __restrict__ va,
                                           const double* __restrict__ vb, const double* __restrict__ vy,
                                           const double* __restrict__ ba, const double* __restrict__ bb, int ea, int eb,
                                           double* __restrict__ by, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oa, ob;
    broadcast_offsets(p, idx, &oa, &ob);
    by[idx] = pointwise_magnitude(mode, va[oa], vb ? vb[ob] : 0.0, vy[idx], ba[oa], bb ? bb[ob] : 0.0, ea != 0,
                                  vb != nullptr && eb != 0);
  }
}

}  // namespace

Status pointwise_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                              int64_t y_count, const std::string& where) {
  BroadcastParams bp;
  KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.pw.out_dims, p.pw.a_strides, p.pw.b_strides, where));
  pointwise_kernel<<<grid_for(y_count), kThreads>>>(bp, node.pointwise.mode, in[0], in.size() > 1 ? in[1] : nullptr, y,
                                                    y_count);
  return Status::ok();
}

Status pointwise_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                  const double* y, double* by, int64_t y_count, bool, const std::string& where) {
  BroadcastParams bp;
  KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.pw.out_dims, p.pw.a_strides, p.pw.b_strides, where));
  const bool binary = op.size() > 1;
  pointwise_magnitude_kernel<<<grid_for(y_count), kThreads>>>(
      bp, node.pointwise.mode, op[0].value, binary ? op[1].value : nullptr, y, op[0].mag, binary ? op[1].mag : nullptr,
      op[0].carries ? 1 : 0, binary && op[1].carries ? 1 : 0, by, y_count);
  return Status::ok();
}

}  // namespace kiln::validate_internal
