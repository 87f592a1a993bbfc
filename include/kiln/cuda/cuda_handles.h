// kiln/cuda/cuda_handles.h: move-only RAII owners for CUDA and cuDNN handles. Each wrapper owns what it
// holds; destructors never throw and log a failed release instead. Creation goes through factory
// functions that return StatusOr, so no constructor can fail silently.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

// Turns a CUDA/cuDNN result into a Status naming the call.
Status cuda_status(cudaError_t err, const char* what);
Status cudnn_status(cudnnStatus_t err, const char* what);

#define KILN_CUDA_RETURN_IF_ERROR(call) KILN_RETURN_IF_ERROR(::kiln::cuda_status((call), #call))
#define KILN_CUDNN_RETURN_IF_ERROR(call) KILN_RETURN_IF_ERROR(::kiln::cudnn_status((call), #call))
// For destructors: logs and carries on.
void cuda_call_noexcept(cudaError_t err, const char* what) noexcept;
#define KILN_CUDA_CALL_NOEXCEPT(call) ::kiln::cuda_call_noexcept((call), #call)

namespace detail {
struct StreamDeleter {
  using pointer = cudaStream_t;
  void operator()(cudaStream_t s) const noexcept;
};
struct EventDeleter {
  using pointer = cudaEvent_t;
  void operator()(cudaEvent_t e) const noexcept;
};
struct GraphDeleter {
  using pointer = cudaGraph_t;
  void operator()(cudaGraph_t g) const noexcept;
};
struct GraphExecDeleter {
  using pointer = cudaGraphExec_t;
  void operator()(cudaGraphExec_t g) const noexcept;
};
struct CudnnDeleter {
  using pointer = cudnnHandle_t;
  void operator()(cudnnHandle_t h) const noexcept;
};
struct DeviceFree {
  void operator()(void* p) const noexcept;
};
}  // namespace detail

using UniqueStream = std::unique_ptr<cudaStream_t, detail::StreamDeleter>;
using UniqueEvent = std::unique_ptr<cudaEvent_t, detail::EventDeleter>;
using UniqueGraph = std::unique_ptr<cudaGraph_t, detail::GraphDeleter>;
using UniqueGraphExec = std::unique_ptr<cudaGraphExec_t, detail::GraphExecDeleter>;
using UniqueCudnnHandle = std::unique_ptr<cudnnHandle_t, detail::CudnnDeleter>;

StatusOr<UniqueStream> make_stream(bool non_blocking = true);
StatusOr<UniqueEvent> make_event(bool timing = true);
// A cuDNN handle bound to `stream` (the legacy default stream when null).
StatusOr<UniqueCudnnHandle> make_cudnn_handle(cudaStream_t stream = nullptr);

// Device memory owner. A zero-byte buffer holds nullptr and is valid.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> allocate(size_t bytes);
  void* data() const { return ptr_.get(); }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_.get());
  }
  Status copy_from_host(const void* src, size_t bytes, cudaStream_t stream = nullptr);
  Status copy_to_host(void* dst, size_t bytes, cudaStream_t stream = nullptr) const;
  Status fill_bytes(int value, cudaStream_t stream = nullptr);

 private:
  std::unique_ptr<void, detail::DeviceFree> ptr_;
  size_t bytes_ = 0;
};

}  // namespace kiln
