// The CUDA shadow lane (kiln/runtime/shadow_lane.h).
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "kiln/cuda/blocking_kernel.h"
#include "kiln/cuda/capture_gate.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/shadow_lane.h"

namespace kiln {
namespace {

struct PinnedFree {
  void operator()(char* p) const noexcept { KILN_CUDA_CALL_NOEXCEPT(cudaFreeHost(p)); }
};

class CudaShadowLane : public ShadowLane {
 public:
  CudaShadowLane(DeviceBuffer device, std::unique_ptr<char, PinnedFree> host, UniqueStream side,
                 UniqueEvent marks[kShadowMarks], UniqueEvent forked, std::unique_ptr<char, PinnedFree> flags,
                 int32_t* device_flags)
      : device_(std::move(device)),
        host_(std::move(host)),
        side_(std::move(side)),
        forked_(std::move(forked)),
        flags_(std::move(flags)),
        device_flags_(device_flags) {
    for (int i = 0; i < kShadowMarks; ++i) marks_[i] = std::move(marks[i]);
  }
  ~CudaShadowLane() override {
    // Freeing synchronizes the device: apart from captures in progress (kiln/cuda/capture_gate.h). Freed whatever
    // the gate says (a destructor cannot wait for a capture this thread holds).
    SynchronizingWork work;
    if (side_) KILN_CUDA_CALL_NOEXCEPT(cudaStreamSynchronize(side_.get()));
    device_ = DeviceBuffer();
    host_.reset();
    flags_.reset();
  }

  char* device() override { return static_cast<char*>(device_.data()); }
  char* host() override { return host_.get(); }
  cudaStream_t side() override { return side_.get(); }
  bool capturing(cudaStream_t stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    // An error (a stream of another device, say) is taken as capturing: no sample, nothing enqueued; and it is
    // cleared, so that the caller's own cudaGetLastError does not find it.
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      (void)cudaGetLastError();
      return true;
    }
    return status != cudaStreamCaptureStatusNone;
  }
  Status mark(int i, cudaStream_t stream) override {
    if (i < 0 || i >= kShadowMarks)
      return internal_error("shadow lane: mark " + std::to_string(i) + " (0.." + std::to_string(kShadowMarks - 1) +
                            ")");
    return cuda_status(cudaEventRecord(marks_[i].get(), stream), "cudaEventRecord (shadow lane)");
  }
  Status fork(cudaStream_t stream) override {
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(forked_.get(), stream));
    return cuda_status(cudaStreamWaitEvent(side_.get(), forked_.get(), 0), "cudaStreamWaitEvent (shadow lane)");
  }
  Status hold() override {
    volatile int32_t* f = reinterpret_cast<volatile int32_t*>(flags_.get());
    f[0] = 0;
    f[1] = 0;
    // 50 ms of GPU time at most: a host thread descheduled longer costs one sample its timing, not the stream.
    return cuda_status(launch_blocking_kernel(side_.get(), device_flags_, device_flags_ + 1, 50'000'000ULL),
                       "the shadow lane's hold kernel");
  }
  void release() override {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    reinterpret_cast<volatile int32_t*>(flags_.get())[0] = 1;
  }
  Status copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) override {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync (shadow lane)");
  }
  Status wait() override { return cuda_status(cudaStreamSynchronize(side_.get()), "cudaStreamSynchronize (shadow)"); }
  StatusOr<double> elapsed_ms(int from, int to) override {
    if (from < 0 || from >= kShadowMarks || to < 0 || to >= kShadowMarks)
      return internal_error("shadow lane: marks out of 0.." + std::to_string(kShadowMarks - 1));
    float ms = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, marks_[from].get(), marks_[to].get()));
    return static_cast<double>(ms);
  }

 private:
  DeviceBuffer device_;
  std::unique_ptr<char, PinnedFree> host_;
  UniqueStream side_;
  UniqueEvent marks_[kShadowMarks];
  UniqueEvent forked_;                       // what fork() records on the caller's stream, untimed
  std::unique_ptr<char, PinnedFree> flags_;  // host-mapped: [0] releases the hold, [1] says it timed out
  int32_t* device_flags_;                    // the same two, as the device sees them
};

}  // namespace

StatusOr<std::unique_ptr<ShadowLane>> make_cuda_shadow_lane(size_t device_bytes, size_t host_bytes) {
  SynchronizingWork work;  // allocations may synchronize the device: apart from captures in progress
  if (work.refused()) return refused_under_capture("a shadow lane's allocation");
  KILN_ASSIGN_OR_RETURN(DeviceBuffer device, DeviceBuffer::allocate(device_bytes));
  char* pinned = nullptr;
  if (host_bytes > 0) KILN_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&pinned), host_bytes));
  std::unique_ptr<char, PinnedFree> host(pinned);
  KILN_ASSIGN_OR_RETURN(UniqueStream side, make_stream(/*non_blocking=*/true));
  UniqueEvent marks[kShadowMarks];
  for (UniqueEvent& m : marks) {
    KILN_ASSIGN_OR_RETURN(m, make_event(/*timing=*/true));
  }
  KILN_ASSIGN_OR_RETURN(UniqueEvent forked, make_event(/*timing=*/false));
  char* mapped = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&mapped), 2 * sizeof(int32_t),
                                          cudaHostAllocMapped | cudaHostAllocPortable));
  std::unique_ptr<char, PinnedFree> flags(mapped);
  void* device_flags = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device_flags, mapped, 0));
  return std::unique_ptr<ShadowLane>(new CudaShadowLane(std::move(device), std::move(host), std::move(side), marks,
                                                        std::move(forked), std::move(flags),
                                                        static_cast<int32_t*>(device_flags)));
}

}  // namespace kiln
