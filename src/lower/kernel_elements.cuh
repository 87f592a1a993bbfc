// Element conversions Kiln's own kernels share (amax_kernel.cu, norm_kernel.cu, skinny_gemm_kernel.cu): fp32, fp16
// and bf16 to and from float, rounding to nearest even, and |x|'s bits for an AMAX. Device code only; for src/lower/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kiln::lower_detail {

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  return static_cast<float>(x);
}
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x) {
  return static_cast<T>(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float(float x) {
  return __float2half_rn(x);
}

// |x|'s bits: for a non-negative float (and NaN, whose bits with the sign cleared exceed +inf's) the unsigned order
// of the bits is the order of the values, so an integer max is the AMAX and carries a NaN through.
__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

}  // namespace kiln::lower_detail
