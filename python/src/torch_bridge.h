// The C interface between kiln._kiln and kiln._torch_native (python/torch_native/, docs/python.md "Cost of a call"):
// how a kiln.torch op's eager call, read in C++ from torch's own tensors, reaches the Planner without Python objects
// in between. kiln._kiln hands out the table below in a capsule (`_torch_bridge()`); kiln._torch_native, built
// against libtorch, reads the tensors (shape, strides, dtype, data pointer), allocates outputs and workspaces with
// torch's caching allocator, and calls `run`. Plain C types only: the two modules share no C++ objects, and neither
// links the other's libraries. Both are built from one tree; `version` and `size` refuse a table from another build.
#pragma once
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

namespace kiln::py::bridge {

constexpr uint32_t kVersion = 2;
constexpr const char* kCapsuleName = "kiln._kiln.torch_bridge";

// A tensor's element type as both sides name it (kiln's DataType has no stable numbering across builds).
enum DType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kFp8E4M3 = 3,
  kFp8E5M2 = 4,
  kI8 = 5,
  kI32 = 6,
  kI64 = 7,
  kUnknown = 99,  // a torch dtype Kiln has no name for: the check names it by `dtype_text`
};

// One input, read from a torch tensor on CUDA device `device`. Strides in elements.
struct Input {
  uintptr_t ptr;
  const int64_t* shape;
  const int64_t* strides;
  int32_t rank;
  int32_t dtype;           // DType
  const char* dtype_text;  // torch's name of it, for messages
  int32_t device;
};

// One output the plan writes: the torch side allocates it (strides in elements).
struct Output {
  const int64_t* shape;
  const int64_t* strides;
  int32_t rank;
  int32_t dtype;  // DType
};

// Memory the torch side gives one call. Each function returns the memory's device pointer, or null with a Python
// exception set. Called with the GIL held, before the plan is enqueued; what they allocate lives until `run`
// returns, and outputs after (the torch side keeps them). `capturing`: the stream is being captured into a CUDA
// graph (a workspace must then be the capture's own allocation, not a pooled buffer another call may regrow).
struct Memory {
  void* ctx;
  void* (*output)(void* ctx, size_t index, const Output* out, int32_t device);
  void* (*workspace)(void* ctx, int64_t bytes, int32_t device, void* stream, int32_t capturing);
};

struct Api {
  uint32_t version;  // kVersion
  uint32_t size;     // sizeof(Api)
  // The handle `run` takes for `runner`, which must be a kiln._kiln.TorchRunner (else null with TypeError set); valid
  // while that object lives. Called with the GIL held.
  void* (*runner_handle)(PyObject* runner);
  // Runs the op whose runner is `runner` (runner_handle's) on `inputs` on
  // `stream` (torch's current stream on the inputs' device, the current device): the dims from the inputs' shapes,
  // the plan from the Planner, every input checked against the plan's graph, outputs and workspace from `memory`, the
  // plan enqueued with the GIL released. 0, or -1 with a Python exception set (kiln.BadInput naming the tensor, ...).
  // Called with the GIL held; the runner's Python object must be alive.
  int (*run)(void* runner, const Input* inputs, size_t n_inputs, void* stream, const Memory* memory);
};

}  // namespace kiln::py::bridge
