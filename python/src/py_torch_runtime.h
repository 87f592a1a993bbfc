// What a kiln.torch op needs from torch when it runs (python/kiln/torch.py, docs/python.md "Cost of a call"):
// memory from PyTorch's caching allocator (outputs made with torch.empty_strided through one vectorcall, workspaces
// from a pool kept per device and stream, so a call in a loop allocates no workspace), and whether an eager call may
// skip the dispatcher.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "py_common.h"

namespace kiln::py {

class TorchRuntime {
 public:
  TorchRuntime();  // imports torch (the caller has)

  // A torch tensor of this shape, strides (elements) and dtype (a torch.dtype) on CUDA device `device`.
  nb::object empty_strided(nb::handle shape, nb::handle strides, nb::handle dtype, int device) const;
  // Whether an eager call may run the op's kernel at once: every argument exactly a torch.Tensor or an
  // nn.Parameter (whose torch function is torch's own; not fake, functional or another subclass) with only a dense
  // tensor's dispatch keys (no negative or conjugate view, no sparse, meta or functional tensor), no dispatch key
  // switched on for the thread beyond torch's usual; no torch dispatch
  // or function mode, functorch transform, JIT trace or autograd profiler active; and, with grad mode on, no input
  // that requires grad. Anything else is torch's to see: the dispatcher's path. False where this torch lacks the
  // queries (every call then takes the dispatcher's path).
  bool plain_call(nb::handle args) const;

  // A tensor's data pointer (its data_ptr(), by a name made once: this runs for every output of every call).
  void* data_ptr(nb::handle tensor) const;

  // A torch.device for CUDA device `device`, made once.
  nb::handle device(int device) const;

  // A workspace of at least `bytes` for work on `stream` of `device`, kept in `*keep` for the call. Outside a CUDA
  // graph capture it comes from the pool (one buffer per device and stream, grown when too small: work on one
  // stream runs in order, so the calls that share a buffer never overlap). During a capture it is a new tensor from
  // the capture's private pool, which torch keeps for the graph's life; a pooled buffer could be freed or regrown
  // while the graph still reads it.
  void* workspace(int64_t bytes, int device, cudaStream_t stream, nb::object* keep);

 private:
  nb::object empty_strided_, empty_, uint8_;
  nb::object tensor_type_, parameter_type_, requires_grad_, data_ptr_name_;
  nb::object dispatch_stack_len_, function_mode_on_, functorch_on_, tracing_state_, profiler_on_, grad_enabled_;
  nb::object dispatch_keys_, tls_include_, raw_repr_;
  uint64_t plain_keys_ = 0, usual_tls_keys_ = 0;  // raw DispatchKeySets (the constructor says which)
  uint64_t raw_keys(PyObject* keys) const;        // a new DispatchKeySet reference's raw_repr(); consumes it
  nb::object kwnames_;                            // ("dtype", "device")
  mutable std::vector<nb::object> devices_;
};

// Whether `stream` is being captured into a CUDA graph (true when CUDA cannot say: a workspace is then the capture's
// own allocation, safe either way).
bool stream_capturing(cudaStream_t stream);

// The process's allocator (made on first use, with the GIL held; never freed: the interpreter may outlive it).
TorchRuntime& torch_runtime();

// Workspace bytes the pool holds now, and dropping them (kiln.torch.workspace_pool_bytes / release_workspaces).
int64_t torch_workspace_pool_bytes();
void torch_release_workspaces();

}  // namespace kiln::py
