// Internal to the measure layer: the kernel that holds a stream while a sample is enqueued.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln::measure_detail {

// Enqueues a one-thread kernel on `stream` that spins until the host writes a non-zero value to
// `*release_flag` (host-mapped memory, device pointer given) or until `timeout_ns` of GPU time pass; in
// the latter case it writes 1 to `*timed_out` (also host-mapped). Returns the launch error, if any.
cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int32_t* release_flag, int32_t* timed_out,
                                   uint64_t timeout_ns);

}  // namespace kiln::measure_detail
