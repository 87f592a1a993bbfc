#include "kiln/cuda/cuda_handles.h"

#include "cuda/error_words.h"
#include "kiln/core/log.h"

namespace kiln {

// Messages say in words what failed; the call text (C++ source) goes to the trace only.
Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  using namespace cuda_detail;
  Status s;
  if (is_no_device_error(err)) s = unavailable(cuda_error_words(err) + "; `kiln doctor` says more");
  else if (err == cudaErrorMemoryAllocation) s = unavailable(cuda_error_words(err));
  else s = internal_error("CUDA call " + call_name(what) + " failed: " + cuda_error_words(err));
  s.add_trace(std::string(what) + " returned " + cudaGetErrorName(err));
  return s;
}

Status cudnn_status(cudnnStatus_t err, const char* what) {
  if (err == CUDNN_STATUS_SUCCESS) return Status::ok();
  using namespace cuda_detail;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  const std::string code = cudnnGetErrorString(err);
  Status s;
  if (err == CUDNN_STATUS_NOT_INITIALIZED) {
    // cudnnCreate without a usable device or driver: an environment problem (exit 3), said as CUDA says it.
    int n = 0;
    cudaError_t cuda = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (cuda != cudaSuccess) s = unavailable(cuda_error_words(cuda) + "; `kiln doctor` says more");
    else s = unavailable("cuDNN could not start (" + code + "); `kiln doctor` says more");
  } else {
    std::string msg = "cuDNN call " + call_name(what) + " failed: " + code;
    if (last[0] && !looks_like_source_text(last)) msg += std::string(" (") + last + ")";
    if (err == CUDNN_STATUS_NOT_SUPPORTED) s = not_supported(msg);
    else if (err == CUDNN_STATUS_BAD_PARAM) s = invalid_argument(msg);
    else s = internal_error(msg);
  }
  s.add_trace(std::string(what) + " returned " + code + (last[0] ? std::string(": ") + last : std::string()));
  return s;
}

void cuda_call_noexcept(cudaError_t err, const char* what) noexcept {
  // A warning people read: the API's name and the error in words, not the call's C++ text.
  if (err != cudaSuccess)
    KILN_LOG(kWarn, "releasing a CUDA resource (" << cuda_detail::call_name(what)
                                                  << ") failed: " << cuda_detail::cuda_error_words(err));
}

namespace detail {
void StreamDeleter::operator()(cudaStream_t s) const noexcept { KILN_CUDA_CALL_NOEXCEPT(cudaStreamDestroy(s)); }
void EventDeleter::operator()(cudaEvent_t e) const noexcept { KILN_CUDA_CALL_NOEXCEPT(cudaEventDestroy(e)); }
void GraphDeleter::operator()(cudaGraph_t g) const noexcept { KILN_CUDA_CALL_NOEXCEPT(cudaGraphDestroy(g)); }
void GraphExecDeleter::operator()(cudaGraphExec_t g) const noexcept {
  KILN_CUDA_CALL_NOEXCEPT(cudaGraphExecDestroy(g));
}
void CudnnDeleter::operator()(cudnnHandle_t h) const noexcept {
  cudnnStatus_t st = cudnnDestroy(h);
  if (st != CUDNN_STATUS_SUCCESS) KILN_LOG(kWarn, "cudnnDestroy failed: " << cudnnGetErrorString(st));
}
void DeviceFree::operator()(void* p) const noexcept {
  if (p) KILN_CUDA_CALL_NOEXCEPT(cudaFree(p));
}
}  // namespace detail

StatusOr<UniqueStream> make_stream(bool non_blocking) {
  cudaStream_t s = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
  return UniqueStream(s);
}

StatusOr<UniqueEvent> make_event(bool timing) {
  cudaEvent_t e = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return UniqueEvent(e);
}

StatusOr<UniqueCudnnHandle> make_cudnn_handle(cudaStream_t stream) {
  cudnnHandle_t h = nullptr;
  KILN_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  UniqueCudnnHandle owned(h);
  if (stream) KILN_CUDNN_RETURN_IF_ERROR(cudnnSetStream(h, stream));
  return owned;
}

StatusOr<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  Status st = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc");
  if (!st.is_ok()) return st.with_context("allocating " + std::to_string(bytes) + " bytes");
  b.ptr_.reset(p);
  b.bytes_ = bytes;
  return b;
}

Status DeviceBuffer::copy_from_host(const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes > bytes_)
    return invalid_argument("copy of " + std::to_string(bytes) + " bytes into a buffer of " + std::to_string(bytes_));
  if (bytes == 0) return Status::ok();
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data(), src, bytes, cudaMemcpyHostToDevice, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status DeviceBuffer::copy_to_host(void* dst, size_t bytes, cudaStream_t stream) const {
  if (bytes > bytes_)
    return invalid_argument("copy of " + std::to_string(bytes) + " bytes out of a buffer of " + std::to_string(bytes_));
  if (bytes == 0) return Status::ok();
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, data(), bytes, cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::ok();
}

Status DeviceBuffer::fill_bytes(int value, cudaStream_t stream) {
  if (bytes_ == 0) return Status::ok();
  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data(), value, bytes_, stream));
  return Status::ok();
}

}  // namespace kiln
