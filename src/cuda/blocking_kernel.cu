#include "kiln/cuda/blocking_kernel.h"

namespace kiln {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void blocking_kernel(const volatile int32_t* release_flag, int32_t* timed_out, uint64_t timeout_ns) {
  const uint64_t start = global_timer_ns();
  while (*release_flag == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      *reinterpret_cast<volatile int32_t*>(timed_out) = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int32_t* release_flag, int32_t* timed_out,
                                   uint64_t timeout_ns) {
  blocking_kernel<<<1, 1, 0, stream>>>(release_flag, timed_out, timeout_ns);
  return cudaGetLastError();
}

}  // namespace kiln
