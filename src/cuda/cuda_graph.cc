// Stream capture into a CUDA graph (kiln/cuda/cuda_graph.h).
#include "kiln/cuda/cuda_graph.h"

#include "kiln/cuda/capture_gate.h"

namespace kiln {

Status check_capturable(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy)
    return invalid_argument("capture needs a stream the caller created: the legacy default stream cannot be captured");
  cudaStreamCaptureStatus state = cudaStreamCaptureStatusNone;
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &state));
  if (state != cudaStreamCaptureStatusNone)
    return failed_precondition("the stream is capturing already (another capture is under way on it)");
  return Status::ok();
}

StatusOr<UniqueGraph> capture_graph(cudaStream_t stream, bool relaxed, const std::function<Status()>& record) {
  KILN_RETURN_IF_ERROR(check_capturable(stream));
  CaptureGuard guard;  // Kiln's device-synchronizing work waits until the capture ends
  KILN_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream, relaxed ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeThreadLocal));
  Status run = record();
  cudaGraph_t raw = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &raw);
  UniqueGraph graph(raw);  // owned, and destroyed on every error path below
  if (!run.is_ok() || end != cudaSuccess) {
    (void)cudaGetLastError();  // a call refused under capture leaves the thread's last error set
    if (!run.is_ok()) return run;
    return cuda_status(end, "cudaStreamEndCapture")
        .with_context(std::string("stream capture (mode ") + (relaxed ? "relaxed" : "thread-local") + ")");
  }
  if (!graph) return internal_error("cudaStreamEndCapture gave no graph");
  return graph;
}

StatusOr<UniqueGraphExec> instantiate_graph(cudaGraph_t graph) {
  cudaGraphExec_t exec = nullptr;
  KILN_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
  return UniqueGraphExec(exec);
}

}  // namespace kiln
