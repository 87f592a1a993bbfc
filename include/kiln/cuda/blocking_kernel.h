// The kernel that holds a stream while work is enqueued behind it, so that events around that work time the GPU, not
// the host's enqueueing: the measure layer's samples (src/measure/measure.cc), and the shadow lane's pair of runs
// (src/runtime/shadow_lane_cuda.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kiln {

// Enqueues a one-thread kernel on `stream` that spins until the host writes a non-zero value to
// `*release_flag` (host-mapped memory, device pointer given) or until `timeout_ns` of GPU time pass; in
// the latter case it writes 1 to `*timed_out` (also host-mapped). Released, it still returns no sooner than
// `min_ns` after it started (the measure layer's settle time). Returns the launch error, if any.
cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int32_t* release_flag, int32_t* timed_out,
                                   uint64_t timeout_ns, uint64_t min_ns = 0);

// Enqueues a one-thread kernel on `stream` that spins for `ns` of GPU time (the settle time where no blocking
// kernel holds the stream). Returns the launch error, if any.
cudaError_t launch_spin_kernel(cudaStream_t stream, uint64_t ns);

}  // namespace kiln
