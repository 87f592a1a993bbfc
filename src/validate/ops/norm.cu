// The normalization family's device reference (layer_norm, rms_norm): one block per row.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/norm_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Row statistics of a layer/RMS norm (every thread of the block gets them): mean (0 for RMS) and the
// biased variance (mean(x^2) for RMS).
__device__ void norm_row_stats(const double* xr, int64_t inner, int layer, double* shared, double* mean, double* var) {
  double m = 0.0;
  if (layer) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += xr[i];
    m = block_sum(s, shared) / static_cast<double>(inner);
  }
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    const double d = xr[i] - m;
    ss += d * d;
  }
  *mean = m;
  *var = block_sum(ss, shared) / static_cast<double>(inner);
}

// `p` maps a position in x to offsets in scale (sa) and bias (sb).
__global__ void norm_kernel(BroadcastParams p, int64_t rows, int64_t inner, int layer, double eps,
                            const double* __restrict__ x, const double* __restrict__ scale,
                            const double* __restrict__ bias, double* __restrict__ y) {
  __shared__ double shared[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double* xr = x + row * inner;
    double mean, var;
    norm_row_stats(xr, inner, layer, shared, &mean, &var);
    const double inv = 1.0 / sqrt(var + eps);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t os, ob;
      broadcast_offsets(p, row * inner + i, &os, &ob);
      double v = (xr[i] - mean) * inv * scale[os];
      if (bias) v += bias[ob];
      y[row * inner + i] = v;
    }
  }
}

// The magnitude pass of a norm (reference_math.h norm_magnitude); bias and bbias are null for RMS norm.
__global__ void norm_magnitude_kernel(BroadcastParams p, int64_t rows, int64_t inner, int layer, double eps,
                                      const double* __restrict__ x, const double* __restrict__ scale,
                                      const double* __restrict__ y, const double* __restrict__ bx,
                                      const double* __restrict__ bs, const double* __restrict__ bbias, int ex, int es,
                                      int eb, double* __restrict__ by) {
  __shared__ double shared[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double* xr = x + row * inner;
    const double* br = bx + row * inner;
    double mean, var;
    norm_row_stats(xr, inner, layer, shared, &mean, &var);
    const double inv = 1.0 / sqrt(var + eps);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += br[i];
    const double bm = block_sum(s, shared) / static_cast<double>(inner);
    double d = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      d += norm_dterm_part(layer != 0, xr[i], mean, br[i], ex != 0, bm);
    const double dterm = block_sum(d, shared) / static_cast<double>(inner);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t os, ob;
      broadcast_offsets(p, row * inner + i, &os, &ob);
      const double xhat = (xr[i] - mean) * inv;
      by[row * inner + i] =
          norm_magnitude(layer != 0, y[row * inner + i], xhat, scale[os], br[i], bs[os], bbias ? bbias[ob] : 0.0,
                         ex != 0, es != 0, bbias && eb != 0, inv, var, eps, bm, dterm);
    }
  }
}

}  // namespace

Status norm_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y, int64_t,
                         const std::string& where) {
  BroadcastParams bp;
  KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.norm.x_dims, p.norm.scale_strides, p.norm.bias_strides, where));
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(p.norm.rows, 1 << 20)));
  norm_kernel<<<blocks, kThreads>>>(bp, p.norm.rows, p.norm.inner, p.op == OpKind::kLayerNorm ? 1 : 0,
                                    static_cast<double>(node.norm.epsilon), in[0], in[1],
                                    in.size() > 2 ? in[2] : nullptr, y);
  return Status::ok();
}

Status norm_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t, bool, const std::string& where) {
  BroadcastParams bp;
  KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.norm.x_dims, p.norm.scale_strides, p.norm.bias_strides, where));
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(p.norm.rows, 1 << 20)));
  const bool has_bias = op.size() > 2;
  norm_magnitude_kernel<<<blocks, kThreads>>>(bp, p.norm.rows, p.norm.inner, p.op == OpKind::kLayerNorm ? 1 : 0,
                                              node.norm.epsilon, op[0].value, op[1].value, y, op[0].mag, op[1].mag,
                                              has_bias ? op[2].mag : nullptr, op[0].carries ? 1 : 0,
                                              op[1].carries ? 1 : 0, has_bias && op[2].carries ? 1 : 0, by);
  return Status::ok();
}

}  // namespace kiln::validate_internal
