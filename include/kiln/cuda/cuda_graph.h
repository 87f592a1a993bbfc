// kiln/cuda/cuda_graph.h: CUDA Graph stream capture and instantiation, once for every layer that records work
// into a graph (the capture layer's CapturedSequence, the tuner's --graph-replay timing). The owners are
// UniqueGraph and UniqueGraphExec (kiln/cuda/cuda_handles.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"

namespace kiln {

// OK when `stream` can be captured now: not the legacy default stream (nullptr or cudaStreamLegacy),
// and not capturing already; InvalidArgument / FailedPrecondition otherwise. Nothing is launched.
Status check_capturable(cudaStream_t stream);

// What `record` enqueues on `stream`, recorded by stream capture (cudaStreamBeginCapture) into a graph.
// `stream` must be one the caller created (the legacy default stream cannot be captured: InvalidArgument)
// and not capturing already (FailedPrecondition). `relaxed`: cudaStreamCaptureModeRelaxed, else
// cudaStreamCaptureModeThreadLocal. Whatever happens inside `record`, the capture is ended and a partial
// graph discarded: the stream is never left capturing, and the thread's last CUDA error is cleared. An
// error from `record` is returned as it is.
StatusOr<UniqueGraph> capture_graph(cudaStream_t stream, bool relaxed, const std::function<Status()>& record);

// An executable graph for `graph` (cudaGraphInstantiate, no flags).
StatusOr<UniqueGraphExec> instantiate_graph(cudaGraph_t graph);

}  // namespace kiln
