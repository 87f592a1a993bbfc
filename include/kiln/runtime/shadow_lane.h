// kiln/runtime/shadow_lane.h: where a Planner runs a key's shadow plan beside its active plan (docs/rollout.md
// "Shadow sampling"): a side stream, device scratch for a sampled request's inputs and both plans' outputs (and the
// shadow plan's workspace), pinned host memory the outputs are read back into, and kShadowMarks timing marks (two
// around each of the four runs of a sample on the side stream). One lane per key in shadow, holding one sample at a
// time. The cuDNN backend's lane is CUDA's (make_cuda_shadow_lane); host tests
// give one of host memory and a simulated clock.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "kiln/core/status.h"

namespace kiln {

// A sample runs the two plans active, shadow, shadow, active (an "ABBA" order), each between two marks: the order's
// effects (a warm L2 for the plan that runs second, the clock's drift) fall on both plans alike.
inline constexpr int kShadowMarks = 8;

class ShadowLane {
 public:
  // Waits for the side stream's work before anything is freed.
  virtual ~ShadowLane() = default;
  // The scratch: device_bytes and host_bytes as made (kiln/runtime/plan_backend.h PlanBackend::shadow_lane).
  virtual char* device() = 0;
  virtual char* host() = 0;
  virtual cudaStream_t side() = 0;
  // Whether `stream` is being captured into a CUDA graph: no sample is taken then (it would join the capture).
  virtual bool capturing(cudaStream_t stream) = 0;
  // Records timing mark `i` (0..kShadowMarks-1) in `stream`'s order.
  virtual Status mark(int i, cudaStream_t stream) = 0;
  // The side stream waits for what `stream` has enqueued so far.
  virtual Status fork(cudaStream_t stream) = 0;
  // Holds the side stream (a spinning one-thread kernel) until release(), so that both plans are enqueued before the
  // GPU reaches the first mark: the marks then time the GPU's work, not the host's enqueueing, which for a plan of a
  // few microseconds would favour the plan whose launch path is warm (the active one, run on every request).
  virtual Status hold() = 0;
  virtual void release() = 0;
  // `bytes` from `src` to `dst` in `stream`'s order (device to device, or device to the host scratch).
  virtual Status copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) = 0;
  // Blocks until the side stream's work has finished (the Planner's judge thread calls it); the error of any of it.
  virtual Status wait() = 0;
  // Milliseconds from mark `from` to mark `to`, after wait().
  virtual StatusOr<double> elapsed_ms(int from, int to) = 0;
};

// A lane on the current CUDA device: `device_bytes` of device memory, `host_bytes` of pinned host memory, a
// non-blocking stream, kShadowMarks timing events, and the hold's two host-mapped flags.
StatusOr<std::unique_ptr<ShadowLane>> make_cuda_shadow_lane(size_t device_bytes, size_t host_bytes);

}  // namespace kiln
