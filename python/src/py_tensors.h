// How the binding reads a caller's tensors and streams (docs/python.md "Tensors and streams"): a torch.Tensor
// directly (its data_ptr, shape, stride and dtype), anything with __cuda_array_interface__ (CuPy, Numba), or DLPack
// (JAX, and any other exporter). Every tensor is checked against the graph's before anything runs: on a CUDA
// device, the dtype, the shape and the strides of every extent above 1; BadInput naming the tensor otherwise.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/runtime/plan_types.h"
#include "py_common.h"

namespace kiln::py {

// What was read of one tensor argument.
struct TensorView {
  uintptr_t ptr = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  bool dtype_known = true;       // false: an exporter that cannot name it (a CUDA array interface 'V2'): size only
  DataType dtype = DataType::kFloat32;
  size_t itemsize = 0;
  bool on_cuda = false;
  int device = -1;         // the CUDA device index, when the exporter says it (-1: unknown)
  const char* kind = "";   // "torch.Tensor", "__cuda_array_interface__", "DLPack"
  std::string dtype_text;  // as the exporter names it, for messages
};

// Reads `obj`; BadInput naming `name` when it is none of the three kinds.
TensorView read_tensor(nb::handle obj, const std::string& name);
// The view checked against tensor `t` of `g`; the binding to pass to ExecutablePlan::execute.
TensorBinding checked_binding(const TensorView& v, const Graph& g, int t);
// `stream`: None (torch's current stream on the current device when torch is imported, else the legacy default
// stream), an int (a cudaStream_t), a torch.cuda.Stream (cuda_stream), an object with __cuda_stream__ (the CUDA
// stream protocol) or `ptr` (CuPy).
cudaStream_t read_stream(nb::handle stream);
// torch's current stream for tensors on CUDA device `device`, named `tensor` in the message: BadInput when that is not
// the current device (nullptr when torch is not imported).
cudaStream_t torch_stream_for(int device, const std::string& tensor);
// A workspace argument: None (null), an int (a device pointer) or a tensor (at least `need` bytes).
void* read_workspace(nb::handle workspace, int64_t need);

// Stream-ordered scratch for a call whose caller passed no workspace: cudaMallocAsync on the call's stream, freed
// on it (cudaFreeAsync) when this goes out of scope; capture-safe (a captured call records the allocation).
class StreamScratch {
 public:
  StreamScratch(cudaStream_t stream, int64_t bytes);
  ~StreamScratch();
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

}  // namespace kiln::py
