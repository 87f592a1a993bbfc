// Internal to the validate layer (nvcc only): what the device references of the op families share
// (src/validate/ops/<family>.cu; defined in src/validate/device_reference.cu). Kernels work on packed
// row-major double arrays.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/reference_ops.h"

namespace kiln::validate_internal {

constexpr int kMaxRank = 8;
constexpr int kThreads = 256;

// Dims of an output and broadcast strides of two operands (0 where an operand is broadcast).
struct BroadcastParams {
  int rank;
  int64_t dims[kMaxRank];
  int64_t sa[kMaxRank];
  int64_t sb[kMaxRank];
};

// The offsets in the two operands of output element `idx` (row-major over p.dims).
__device__ inline void broadcast_offsets(const BroadcastParams& p, int64_t idx, int64_t* oa, int64_t* ob) {
  int64_t rem = idx;
  *oa = 0;
  *ob = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t i = rem % p.dims[d];
    rem /= p.dims[d];
    *oa += i * p.sa[d];
    *ob += i * p.sb[d];
  }
}

// One warp a row (the attention references): lane l takes elements l, l + 32, ... of each dot product, and keeps
// at most kWarpCols of a row's outputs in registers (head dims up to 256).
constexpr int kWarp = 32;
constexpr int kWarpCols = 8;

// a.b over n elements, summed across the warp; lane 0's sum given to every lane (each then uses the same value).
// Every lane of the warp must call it.
__device__ inline double warp_dot(const double* a, const double* b, int64_t n, int lane) {
  double dot = 0.0;
  for (int64_t d = lane; d < n; d += kWarp) dot += a[d] * b[d];
  for (int off = kWarp / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  return __shfl_sync(0xffffffffu, dot, 0);
}

// Blocks of kThreads for n elements (grid-stride loops cover the rest).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));
}

// Fills p; kNotSupported (naming `where`) past kMaxRank.
Status fill_broadcast(BroadcastParams& p, const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                      const std::vector<int64_t>& sb, const std::string& where);
// x *= f, elementwise.
void launch_scale(double* x, double f, int64_t n);
// y = x f, elementwise (another buffer).
void launch_scaled_copy(const double* x, double* y, double f, int64_t n);
// *y = the largest |x_i| (NaN where any is), a one-element buffer.
Status launch_largest_abs(const double* x, int64_t n, double* y);
// s = f sqrt(s + y^2), elementwise: the scale of a contraction or sum from its sum of squared terms
// (reference_math.h).
void launch_root_with(double* s, const double* y, double f, int64_t n);
// The operand's magnitude (or scale), squared, in a new buffer.
StatusOr<DeviceBuffer> squared(const DeviceOperand& op);
// The magnitude pass of a contraction (conv, matmul): the same contraction of the operands' magnitudes
// times contraction_factor, or in the scale pass f sqrt(contraction of the squared scales + y^2).
Status contraction_magnitude(DeviceValueFn value, const Node& node, const NodePlan& p,
                             const std::vector<DeviceOperand>& op, const double* y, double* by, int64_t y_count,
                             bool scale_pass, const std::string& where);

}  // namespace kiln::validate_internal
