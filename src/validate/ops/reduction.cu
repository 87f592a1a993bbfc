// The reduction family's device reference: one thread per output, or chunked two-pass kernels for
// few outputs over many elements.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/validate/host_tensor.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

struct ReduceParams {
  int rank;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];  // packed strides of the input
  int reduced[kMaxRank];
  int64_t out_count, reduced_count;
};

// The input offset of output `out`'s first element: its index over the kept dims, in the input's strides.
__device__ int64_t kept_offset(const ReduceParams& p, int64_t out) {
  int64_t rem = out, base = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    if (p.reduced[d]) continue;
    base += (rem % p.dims[d]) * p.strides[d];
    rem /= p.dims[d];
  }
  return base;
}

// The input offset of the `r`-th reduced element of the output whose first element is at `base`.
__device__ int64_t reduced_offset(const ReduceParams& p, int64_t r, int64_t base) {
  int64_t rr = r, off = base;
  for (int d = p.rank - 1; d >= 0; --d) {
    if (!p.reduced[d]) continue;
    off += (rr % p.dims[d]) * p.strides[d];
    rr /= p.dims[d];
  }
  return off;
}

__global__ void reduction_kernel(ReduceParams p, ReductionMode mode, const double* __restrict__ x,
                                 double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < p.out_count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = kept_offset(p, idx);
    double acc = mode == ReductionMode::kMax ? -INFINITY : (mode == ReductionMode::kMin ? INFINITY : 0.0);
    for (int64_t r = 0; r < p.reduced_count; ++r) {
      const double v = x[reduced_offset(p, r, base)];
      switch (mode) {
        case ReductionMode::kSum: acc += v; break;
        case ReductionMode::kMax: acc = fmax(acc, v); break;
        case ReductionMode::kMin: acc = fmin(acc, v); break;
        case ReductionMode::kAmax: acc = fmax(acc, fabs(v)); break;
      }
    }
    y[idx] = acc;
  }
}

__device__ double reduce_init(ReductionMode mode) {
  return mode == ReductionMode::kMax ? -INFINITY : (mode == ReductionMode::kMin ? INFINITY : 0.0);
}

__device__ double reduce_combine(ReductionMode mode, double acc, double v) {
  switch (mode) {
    case ReductionMode::kSum: return acc + v;
    case ReductionMode::kMax: return fmax(acc, v);
    case ReductionMode::kMin: return fmin(acc, v);
    case ReductionMode::kAmax: return fmax(acc, v);  // v is already |x| (or a partial amax)
  }
  return acc;
}

// Few outputs over many reduced elements (a GEMM's AMAX: one output over 8192 x 8192): reduction_kernel
// would give each output one thread, which walks 67M elements alone (about two minutes on an H200). Here
// block (out, chunk) reduces one contiguous range of the reduced index space of output `out` with all its
// threads, then a second kernel combines each output's chunks in a fixed order (deterministic).
__global__ void reduction_partial_kernel(ReduceParams p, ReductionMode mode, const double* __restrict__ x,
                                         double* __restrict__ partial, int64_t chunks) {
  __shared__ double shared[kThreads];
  const int64_t chunk_len = (p.reduced_count + chunks - 1) / chunks;
  for (int64_t out = blockIdx.x; out < p.out_count; out += gridDim.x) {
    const int64_t base = kept_offset(p, out);
    const int64_t begin = blockIdx.y * chunk_len;
    const int64_t end = min(p.reduced_count, begin + chunk_len);
    double acc = reduce_init(mode);
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
      const double v = x[reduced_offset(p, r, base)];
      acc = reduce_combine(mode, acc, mode == ReductionMode::kAmax ? fabs(v) : v);
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) shared[threadIdx.x] = reduce_combine(mode, shared[threadIdx.x], shared[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) partial[out * chunks + blockIdx.y] = shared[0];
    __syncthreads();
  }
}

__global__ void reduction_combine_kernel(int64_t out_count, int64_t chunks, ReductionMode mode,
                                         const double* __restrict__ partial, double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < out_count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc = reduce_init(mode);
    for (int64_t c = 0; c < chunks; ++c) acc = reduce_combine(mode, acc, partial[idx * chunks + c]);
    y[idx] = acc;
  }
}

Status launch_reduction(const NodePlan& p, ReductionMode mode, const double* x, double* y, int64_t y_count,
                        const std::string& where) {
  if (p.red.in_dims.size() > static_cast<size_t>(kMaxRank)) return not_supported(where + ": rank too large");
  ReduceParams rp{};
  rp.rank = static_cast<int>(p.red.in_dims.size());
  const auto packed = row_major_strides(p.red.in_dims);
  for (int i = 0; i < rp.rank; ++i) {
    rp.dims[i] = p.red.in_dims[static_cast<size_t>(i)];
    rp.strides[i] = packed[static_cast<size_t>(i)];
    rp.reduced[i] = p.red.reduced[static_cast<size_t>(i)] ? 1 : 0;
  }
  rp.out_count = y_count;
  rp.reduced_count = p.red.reduced_count;
  // One thread per output while there are outputs enough to fill the GPU or each reduces little; else
  // the chunked two-pass kernels (kPerChunk reduced elements per block, at most kMaxChunks per output).
  constexpr int64_t kPerChunk = kThreads * 64, kMaxChunks = 1024, kManyOutputs = 1 << 16;
  if (y_count >= kManyOutputs || rp.reduced_count <= kPerChunk) {
    reduction_kernel<<<grid_for(y_count), kThreads>>>(rp, mode, x, y);
    return Status::ok();
  }
  const int64_t chunks = std::min(kMaxChunks, (rp.reduced_count + kPerChunk - 1) / kPerChunk);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer partial,
                        DeviceBuffer::allocate(static_cast<size_t>(y_count * chunks) * sizeof(double)));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(y_count, 1 << 16)), static_cast<unsigned>(chunks));
  reduction_partial_kernel<<<grid, kThreads>>>(rp, mode, x, partial.as<double>(), chunks);
  reduction_combine_kernel<<<grid_for(y_count), kThreads>>>(y_count, chunks, mode, partial.as<double>(), y);
  // `partial` is freed on return: cudaFree waits for the kernels that use it.
  return Status::ok();
}

}  // namespace

Status reduction_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                              int64_t y_count, const std::string& where) {
  KILN_RETURN_IF_ERROR(launch_reduction(p, node.reduction.mode, in[0], y, y_count, where));
  return Status::ok();
}

Status reduction_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                  const double* y, double* by, int64_t y_count, bool scale_pass,
                                  const std::string& where) {
  // A sum accumulates (its own error and the operand's); max, min and amax pick one element.
  if (node.reduction.mode == ReductionMode::kSum && scale_pass) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer x2, squared(op[0]));
    KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kSum, x2.as<double>(), by, y_count, where));
    launch_root_with(by, y, contraction_factor(op[0].carries, false), y_count);
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));  // before x2 is freed
  } else if (node.reduction.mode == ReductionMode::kSum) {
    KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kSum, op[0].mag, by, y_count, where));
    if (op[0].carries) launch_scale(by, contraction_factor(true, false), y_count);
  } else {
    KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kAmax, op[0].mag, by, y_count, where));
  }
  return Status::ok();
}

}  // namespace kiln::validate_internal
