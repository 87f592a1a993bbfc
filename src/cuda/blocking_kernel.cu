#include "kiln/cuda/blocking_kernel.h"

namespace kiln {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until `ns` of GPU time have passed since `start`.
__device__ __forceinline__ void spin_until(uint64_t start, uint64_t ns) {
  while (global_timer_ns() - start < ns) __nanosleep(1000);
}

__global__ void blocking_kernel(const volatile int32_t* release_flag, int32_t* timed_out, uint64_t timeout_ns,
                                uint64_t min_ns) {
  const uint64_t start = global_timer_ns();
  while (*release_flag == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      *reinterpret_cast<volatile int32_t*>(timed_out) = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(1000);
  }
  spin_until(start, min_ns);
}

__global__ void spin_kernel(uint64_t ns) { spin_until(global_timer_ns(), ns); }

}  // namespace

cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int32_t* release_flag, int32_t* timed_out,
                                   uint64_t timeout_ns, uint64_t min_ns) {
  blocking_kernel<<<1, 1, 0, stream>>>(release_flag, timed_out, timeout_ns, min_ns);
  return cudaGetLastError();
}

cudaError_t launch_spin_kernel(cudaStream_t stream, uint64_t ns) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace kiln
