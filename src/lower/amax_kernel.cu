// launch_whole_amax (src/lower/kernel_plan.h): max |x| of a dense tensor into one fp32, in one pass (16-byte loads
// where the input is 16-byte aligned; a caller's buffer that is not is read element by element).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "lower/kernel_elements.cuh"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

// Elements of T in 16 bytes.
template <typename T>
constexpr int kVec = 16 / sizeof(T);

template <typename T>
__global__ void whole_amax_kernel(const T* __restrict__ in, int64_t count, bool aligned, uint32_t* __restrict__ out) {
  uint32_t m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // 16-byte loads over the body where the base is 16-byte aligned, then the rest one by one (all of it otherwise).
  const int64_t vectors = aligned ? count / kVec<T> : 0;
  const uint4* v = reinterpret_cast<const uint4*>(in);
  for (int64_t i = first; i < vectors; i += stride) {
    uint4 w = __ldg(v + i);
    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) m = max(m, abs_bits(to_float(e[j])));
  }
  for (int64_t i = vectors * kVec<T> + first; i < count; i += stride) m = max(m, abs_bits(to_float(in[i])));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  __shared__ uint32_t warp_max[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < static_cast<int>(blockDim.x / 32) ? warp_max[lane] : 0u;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) atomicMax(out, m);
  }
}

template <typename T>
Status launch_typed(const void* input, int64_t count, float* out, int blocks, int threads, cudaStream_t stream) {
  const cudaError_t z = cudaMemsetAsync(out, 0, sizeof(float), stream);  // +0.0: the AMAX of nothing
  if (z != cudaSuccess) return internal_error(std::string("clearing the AMAX: ") + cudaGetErrorString(z));
  const bool aligned = reinterpret_cast<uintptr_t>(input) % 16 == 0;
  whole_amax_kernel<T>
      <<<blocks, threads, 0, stream>>>(static_cast<const T*>(input), count, aligned, reinterpret_cast<uint32_t*>(out));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error(std::string("launching the whole-tensor AMAX: ") + cudaGetErrorString(e));
  return Status::ok();
}

}  // namespace

Status launch_whole_amax(const void* input, DataType dtype, int64_t count, float* out, int blocks, int threads,
                         cudaStream_t stream) {
  if (threads % 32 != 0 || threads < 32 || threads > 1024 || blocks < 1)
    return invalid_argument("the whole-tensor AMAX: " + std::to_string(blocks) + " blocks of " +
                            std::to_string(threads) + " threads");
  switch (dtype) {  // the output is cleared by the launch, once the dtype is known to be one it runs
    case DataType::kFloat32: return launch_typed<float>(input, count, out, blocks, threads, stream);
    case DataType::kFloat16: return launch_typed<__half>(input, count, out, blocks, threads, stream);
    case DataType::kBFloat16: return launch_typed<__nv_bfloat16>(input, count, out, blocks, threads, stream);
    default: return invalid_argument(std::string("the whole-tensor AMAX of ") + dtype_name(dtype));
  }
}

}  // namespace kiln::lower_detail
