// The asynchronous copies Kiln's own staged kernels share (skinny_gemm_kernel.cu, decode_staged_kernel.cu): 16 bytes
// global -> shared with cp.async, its groups, and the XOR swizzle of 16-byte chunks that keeps eight rows read at one
// column in eight different banks. Device code only; for src/lower/.
#pragma once

#include <cstdint>

namespace kiln::lower_detail {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1; `bytes` 0 writes zeros (a row past the operand's end).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
// A 16-byte chunk's place in a row of shared memory, in bytes: chunks XOR the row's low three bits, so the eight rows
// a phase of eight lanes reads at one chunk fall in eight different banks.
__device__ __forceinline__ int swizzled(int row, int chunk) { return (chunk ^ (row & 7)) * 16; }

}  // namespace kiln::lower_detail
