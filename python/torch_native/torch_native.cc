// kiln._torch_native: the eager call of a kiln.torch op in C++, against libtorch (docs/python.md "Cost of a call").
//
// kiln._kiln reads a torch tensor through Python (five attribute reads) and allocates outputs with torch.empty_strided
// through Python: about 7 us a call above the C++ Planner on an H100. Here the same call reads each tensor's
// at::Tensor directly, asks torch's C++ state whether torch must see the call, allocates outputs and workspaces with
// torch's caching allocator in C++, and reaches the Planner through kiln._kiln's C table (python/src/torch_bridge.h):
// no Python object is made but the outputs. Built only where a torch is found at configure time, for that torch's
// version (kiln.torch loads it only under the same torch.__version__; else the call stays on kiln._kiln's path).
//
// A call goes one of three ways:
//  - torch must see it (a subclass, fake or functional tensor, a negative or conjugate view, a sparse, meta or nested
//    tensor, a dispatch or function mode, a functorch transform, the JIT tracer, the profiler, a dispatch key switched
//    on for the thread, an input that requires grad with grad mode on, a keyword argument): `op`, the dispatcher's
//    torch.ops.kiln.<name> (its fake kernel for meta and fake tensors; torch's own error for a layout it has no
//    kernel for), as kiln._kiln's eager path decides (py_torch_runtime.h plain_call);
//  - plain dense tensors Kiln cannot take as they are (on the host, on different devices or not the current one, a
//    dtype Kiln has no name for): `runner`, kiln._kiln's TorchRunner, whose checks name what is wrong;
//  - else: here, at once.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/grad_mode.h>
#include <ATen/EmptyTensor.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/functorch/DynamicLayer.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/SmallVector.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "torch_bridge.h"

namespace kiln::py::native {
namespace bridge = kiln::py::bridge;

constexpr int kMaxInputs = 64;  // more inputs than this: kiln._kiln's path (never seen in a real graph)

// torch's dtype for a bridge DType, and back; the name torch prints, for messages.
struct DTypeName {
  c10::ScalarType scalar;
  int32_t dtype;
  const char* text;
};
constexpr DTypeName kDTypes[] = {
    {c10::ScalarType::Float, bridge::kF32, "torch.float32"},
    {c10::ScalarType::Half, bridge::kF16, "torch.float16"},
    {c10::ScalarType::BFloat16, bridge::kBF16, "torch.bfloat16"},
    {c10::ScalarType::Float8_e4m3fn, bridge::kFp8E4M3, "torch.float8_e4m3fn"},
    {c10::ScalarType::Float8_e5m2, bridge::kFp8E5M2, "torch.float8_e5m2"},
    {c10::ScalarType::Char, bridge::kI8, "torch.int8"},
    {c10::ScalarType::Int, bridge::kI32, "torch.int32"},
    {c10::ScalarType::Long, bridge::kI64, "torch.int64"},
};
const DTypeName* by_scalar(c10::ScalarType s) {
  for (const DTypeName& d : kDTypes)
    if (d.scalar == s) return &d;
  return nullptr;
}
const DTypeName* by_bridge(int32_t dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

// Whether torch's state lets a call skip the dispatcher (the thread's, not the tensors'): the same conditions as
// kiln._kiln's TorchRuntime::plain_call, read from C++.
bool plain_state() {
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) return false;
  if (at::impl::torch_function_mode_enabled()) return false;
  if (!at::functorch::getDynamicLayerStack().empty()) return false;
  if (torch::jit::tracer::isTracing()) return false;
  if (torch::profiler::impl::profilerEnabled()) return false;
  // Anything else that adds a dispatch key for this thread (functionalization, a Python mode's key): torch's.
  const c10::DispatchKeySet included = c10::impl::tls_local_dispatch_key_set().included_;
  return (included - c10::default_included_set).empty();
}

// Whether a tensor is a plain dense tensor (no conjugate or negative view bit, no Python, functional, batched or
// sparse key): its key set is its backend's dense key and the autograd and autocast keys every tensor carries.
bool plain_keys(const at::Tensor& t) {
  const c10::DispatchKeySet ks =
      t.key_set() - c10::autograd_dispatch_keyset_with_ADInplaceOrView - c10::autocast_dispatch_keyset;
  return ks == c10::DispatchKeySet(c10::DispatchKey::CUDA) || ks == c10::DispatchKeySet(c10::DispatchKey::CPU);
}

// Whether the call may skip the dispatcher: every argument exactly a torch.Tensor (or nn.Parameter) with plain keys,
// torch's state plain, and no input that requires grad while grad mode is on.
bool plain_call(PyObject* const* args, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPVariable_CheckExact(args[i])) return false;
  }
  if (!plain_state()) return false;
  const bool grad = at::GradMode::is_enabled();
  for (Py_ssize_t i = 0; i < n; ++i) {
    const at::Tensor& t = THPVariable_Unpack(args[i]);
    if (!t.defined() || !plain_keys(t) || (grad && t.requires_grad())) return false;
  }
  return true;
}

// Workspaces: one buffer per (device, stream), grown when too small. Work on one stream runs in order, and each call
// enqueues under its stream's lock (kiln._kiln's run_bridge), so the calls that share a buffer never interleave.
// Touched with the GIL held only. The tensors have no Python object: dropping one runs
// no Python.
std::map<std::pair<int, uintptr_t>, at::Tensor>& pool() {
  static auto* p = new std::map<std::pair<int, uintptr_t>, at::Tensor>();  // never freed: outlives the interpreter
  return *p;
}
constexpr size_t kPoolStreams = 64;  // streams come and go; past this many, an entry makes room

// One call's memory (bridge::Memory's ctx).
struct CallMemory {
  c10::SmallVector<at::Tensor, 4> outputs;
  at::Tensor workspace;  // held until the plan is enqueued
};

// The callbacks' error handling: torch's exception, as a Python one (no warning handler: allocating warns nothing).
#define KILN_TORCH_TRY try {
#define KILN_TORCH_CATCH                                            \
  }                                                                 \
  catch (...) {                                                     \
    torch::translate_exception_to_python(std::current_exception()); \
    return nullptr;                                                 \
  }

// An output on the current device, from torch's caching allocator: empty_strided_cuda without its device guard
// (a cudaGetDevice, and a switch the call never needs: runs_here checked that the inputs' device is the current
// one, and the allocator serves the current device).
at::Tensor current_device_tensor(c10::IntArrayRef shape, c10::IntArrayRef strides, c10::ScalarType scalar) {
  return at::detail::empty_strided_generic(shape, strides, at::cuda::getCUDADeviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::CUDA), scalar);
}

// Output `index`'s dtype as torch names it; null with TypeError set where torch has no name for it.
const DTypeName* output_dtype(size_t index, const bridge::Output* out) {
  const DTypeName* d = by_bridge(out->dtype);
  if (d == nullptr) PyErr_Format(PyExc_TypeError, "kiln: output %zu has a dtype torch has no name for here", index);
  return d;
}

void* alloc_output(void* ctx, size_t index, const bridge::Output* out, int32_t device) {
  auto* m = static_cast<CallMemory*>(ctx);
  KILN_TORCH_TRY
  const DTypeName* d = output_dtype(index, out);
  if (d == nullptr) return nullptr;
  (void)device;  // the current one (runs_here)
  at::Tensor t = current_device_tensor(c10::IntArrayRef(out->shape, out->rank),
                                       c10::IntArrayRef(out->strides, out->rank), d->scalar);
  if (m->outputs.size() <= index) m->outputs.resize(index + 1);
  m->outputs[index] = std::move(t);
  void* ptr = m->outputs[index].data_ptr();
  if (ptr == nullptr) {  // an empty output: any non-null pointer serves, nothing is written
    static char none;
    ptr = &none;
  }
  return ptr;
  KILN_TORCH_CATCH
}

void* alloc_workspace(void* ctx, int64_t bytes, int32_t device, void* stream, int32_t capturing) {
  auto* m = static_cast<CallMemory*>(ctx);
  KILN_TORCH_TRY
  const c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  const auto make = [&] { return at::detail::empty_strided_cuda({bytes}, {1}, c10::ScalarType::Byte, dev); };
  if (capturing != 0) {
    // A new buffer from the capture's private pool, which torch keeps for the graph's life; a pooled one could be
    // freed or regrown while the graph still reads it.
    m->workspace = make();
    return m->workspace.data_ptr();
  }
  auto& p = pool();
  const auto key = std::make_pair(static_cast<int>(device), reinterpret_cast<uintptr_t>(stream));
  auto it = p.find(key);
  if (it == p.end() || it->second.numel() < bytes) {
    // Allocated while `stream` is torch's current stream on the device, so the caching allocator reuses the block
    // it replaces only in that stream's order.
    at::Tensor grown = make();
    if (it == p.end()) {
      if (p.size() >= kPoolStreams) p.erase(p.begin());
      it = p.emplace(key, std::move(grown)).first;
    } else {
      it->second = std::move(grown);
    }
  }
  m->workspace = it->second;
  return m->workspace.data_ptr();
  KILN_TORCH_CATCH
}

// The probe's output memory: each output index keeps one buffer, allocated once (no allocation, wrap or free per
// call), so that a call timed with it is the call less what torch's allocator and Python object cost.
struct KeptMemory {
  CallMemory call;
  c10::SmallVector<at::Tensor, 4> kept;
};
void* kept_output(void* ctx, size_t index, const bridge::Output* out, int32_t) {
  auto* m = static_cast<KeptMemory*>(ctx);
  KILN_TORCH_TRY
  if (m->kept.size() <= index) m->kept.resize(index + 1);
  at::Tensor& t = m->kept[index];
  const DTypeName* d = output_dtype(index, out);
  if (d == nullptr) return nullptr;
  const c10::IntArrayRef shape(out->shape, out->rank), strides(out->strides, out->rank);
  if (!t.defined() || t.sizes() != shape || t.strides() != strides || t.scalar_type() != d->scalar)
    t = current_device_tensor(shape, strides, d->scalar);  // the current device (runs_here)
  static char none;
  return t.data_ptr() != nullptr ? t.data_ptr() : &none;
  KILN_TORCH_CATCH
}
void* kept_workspace(void* ctx, int64_t bytes, int32_t device, void* stream, int32_t capturing) {
  return alloc_workspace(&static_cast<KeptMemory*>(ctx)->call, bytes, device, stream, capturing);
}

// kiln._torch_native.Call: one op's eager call (vectorcall).
// It has a __dict__ (kiln.torch sets `op`, `__name__` and `__doc__` on it, as on a function) and takes weak
// references (torch.compiler.allow_in_graph keeps one).
struct Call {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* runner;  // kiln._kiln.TorchRunner
  PyObject* op;      // torch.ops.kiln.<name>
  void* handle;      // the bridge's handle of runner (valid while `runner` lives: a Call is initialised once)
  const bridge::Api* api;
  PyObject* dict;
  PyObject* weakrefs;
};

// `kept`: the probe's (py_probe_parts): outputs into kept buffers, None returned.
PyObject* run_held(Call* self, PyObject* const* args, Py_ssize_t n, int device, KeptMemory* kept = nullptr);

PyObject* run_here(Call* self, PyObject* const* args, Py_ssize_t n, int device) {
  // The runner held for the call (its GIL is released inside): nothing can free it meanwhile.
  PyObject* runner = self->runner;
  Py_INCREF(runner);
  PyObject* out = run_held(self, args, n, device);
  Py_DECREF(runner);
  return out;
}

// torch's errors become Python's: HANDLE_TH_ERRORS without its warning handler (set up and checked on every call;
// nothing here warns).
PyObject* run_held(Call* self, PyObject* const* args, Py_ssize_t n, int device, KeptMemory* kept) {
  try {
    bridge::Input in[kMaxInputs];
    for (Py_ssize_t i = 0; i < n; ++i) {
      const at::Tensor& t = THPVariable_Unpack(args[i]);
      const DTypeName* d = by_scalar(t.scalar_type());
      in[i] = bridge::Input{reinterpret_cast<uintptr_t>(t.data_ptr()),
                            t.sizes().data(),
                            t.strides().data(),
                            static_cast<int32_t>(t.dim()),
                            d->dtype,
                            d->text,
                            device};
    }
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
    if (kept != nullptr) {
      const bridge::Memory mem{kept, &kept_output, &kept_workspace};
      if (self->api->run(self->handle, in, static_cast<size_t>(n), stream, &mem) != 0) return nullptr;
      Py_RETURN_NONE;
    }
    CallMemory memory;
    const bridge::Memory mem{&memory, &alloc_output, &alloc_workspace};
    if (self->api->run(self->handle, in, static_cast<size_t>(n), stream, &mem) != 0) return nullptr;
    const size_t n_out = memory.outputs.size();
    if (n_out == 1) return THPVariable_Wrap(std::move(memory.outputs[0]));
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(n_out));
    if (tuple == nullptr) return nullptr;
    for (size_t i = 0; i < n_out; ++i) {
      PyObject* o = THPVariable_Wrap(std::move(memory.outputs[i]));
      if (o == nullptr) {
        Py_DECREF(tuple);
        return nullptr;
      }
      PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), o);
    }
    return tuple;
  } catch (...) {
    torch::translate_exception_to_python(std::current_exception());
    return nullptr;
  }
}

// Whether plain tensors can be taken here as they are: every one on CUDA, on the current device, of a dtype with a
// name; `*device` their device. Else kiln._kiln's runner reads them and says what is wrong.
bool runs_here(PyObject* const* args, Py_ssize_t n, int* device) {
  if (n == 0 || n > kMaxInputs) return false;
  int dev = -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const at::Tensor& t = THPVariable_Unpack(args[i]);
    if (!t.is_cuda() || by_scalar(t.scalar_type()) == nullptr || !t.has_storage()) return false;
    const int d = t.get_device();
    if (i > 0 && d != dev) return false;
    dev = d;
  }
  if (dev != c10::cuda::current_device()) return false;
  *device = dev;
  return true;
}

PyObject* call_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<Call*>(callable);
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0) return PyObject_Vectorcall(self->op, args, nargsf, kwnames);
  bool plain = false;
  int device = -1;
  bool here = false;
  try {
    plain = plain_call(args, n);
    here = plain && runs_here(args, n, &device);
  } catch (const std::exception& e) {  // torch's queries do not throw; if one did, the dispatcher decides
    plain = false;
  }
  if (!plain) return PyObject_Vectorcall(self->op, args, nargsf, nullptr);
  if (!here) return PyObject_Vectorcall(self->runner, args, nargsf, nullptr);
  return run_here(self, args, n, device);
}

int call_init(PyObject* o, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<Call*>(o);
  PyObject *runner = nullptr, *op = nullptr, *capsule = nullptr;
  static const char* kw[] = {"runner", "op", "bridge", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Call", const_cast<char**>(kw), &runner, &op, &capsule)) return -1;
  if (self->runner != nullptr) {  // a call under way may be using the runner it holds (its GIL released)
    PyErr_SetString(PyExc_TypeError, "kiln._torch_native.Call: already initialised");
    return -1;
  }
  if (!PyCapsule_IsValid(capsule, bridge::kCapsuleName)) {
    PyErr_Format(PyExc_TypeError, "kiln._torch_native.Call: bridge must be kiln._kiln._torch_bridge(), got %s",
                 Py_TYPE(capsule)->tp_name);
    return -1;
  }
  if (!PyCallable_Check(op)) {
    PyErr_Format(PyExc_TypeError, "kiln._torch_native.Call: op must be callable (torch.ops.kiln.<name>), got %s",
                 Py_TYPE(op)->tp_name);
    return -1;
  }
  auto* api = static_cast<const bridge::Api*>(PyCapsule_GetPointer(capsule, bridge::kCapsuleName));
  if (api == nullptr) return -1;
  if (api->version != bridge::kVersion || api->size != sizeof(bridge::Api)) {
    PyErr_Format(PyExc_ImportError,
                 "kiln._torch_native: kiln._kiln's torch bridge is version %u (%u bytes), this module's %u (%zu): "
                 "the two were built from different trees",
                 api->version, api->size, bridge::kVersion, sizeof(bridge::Api));
    return -1;
  }
  void* h = api->runner_handle(runner);  // a kiln._kiln.TorchRunner, or TypeError
  if (h == nullptr) return -1;
  Py_INCREF(runner);
  Py_INCREF(op);
  Py_XSETREF(self->runner, runner);
  Py_XSETREF(self->op, op);
  self->handle = h;
  self->api = api;
  self->vectorcall = call_vectorcall;
  return 0;
}

void call_dealloc(PyObject* o) {
  auto* self = reinterpret_cast<Call*>(o);
  PyObject_GC_UnTrack(o);
  if (self->weakrefs != nullptr) PyObject_ClearWeakRefs(o);
  Py_CLEAR(self->runner);
  Py_CLEAR(self->op);
  Py_CLEAR(self->dict);
  Py_TYPE(o)->tp_free(o);
}

int call_traverse(PyObject* o, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<Call*>(o);
  Py_VISIT(self->runner);
  Py_VISIT(self->op);
  Py_VISIT(self->dict);
  return 0;
}

int call_clear(PyObject* o) {
  auto* self = reinterpret_cast<Call*>(o);
  self->handle = nullptr;
  self->vectorcall = nullptr;
  Py_CLEAR(self->runner);
  Py_CLEAR(self->op);
  Py_CLEAR(self->dict);
  return 0;
}

PyObject* call_tp_call(PyObject* o, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<Call*>(o);
  if (self->runner == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "kiln._torch_native.Call: not initialised");
    return nullptr;
  }
  return PyVectorcall_Call(o, args, kwargs);
}

PyTypeObject CallType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Module functions (tests and kiln.torch's pool report).
PyObject* py_plain_call(PyObject*, PyObject* const* args, Py_ssize_t n) {
  try {
    return PyBool_FromLong(plain_call(args, n) ? 1 : 0);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* py_pool_bytes(PyObject*, PyObject*) {
  int64_t n = 0;
  for (const auto& [key, t] : pool()) n += t.numel();
  return PyLong_FromLongLong(n);
}

PyObject* py_release(PyObject*, PyObject*) {
  std::map<std::pair<int, uintptr_t>, at::Tensor> gone;
  gone.swap(pool());
  Py_RETURN_NONE;
}

// For bench/python/overhead.py's parts: seconds for `n` rounds of what this module adds to a call beside Kiln's
// own work: an output allocated (bf16 [1, 16, 256] on the current device), wrapped as a Python tensor, and dropped.
PyObject* py_probe_output(PyObject*, PyObject* arg) {
  if (!PyLong_Check(arg) || PyBool_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "_probe_output: a count (int) expected, got %s", Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  const long long n = PyLong_AsLongLong(arg);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "_probe_output: the count must be >= 0");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const int64_t shape[] = {1, 16, 256}, strides[] = {4096, 256, 1};
  const auto t0 = std::chrono::steady_clock::now();
  for (long long i = 0; i < n; ++i) {
    PyObject* o = THPVariable_Wrap(current_device_tensor(shape, strides, c10::ScalarType::BFloat16));
    if (o == nullptr) return nullptr;
    Py_DECREF(o);
    if ((i & 4095) == 4095 && PyErr_CheckSignals() != 0) return nullptr;
  }
  return PyFloat_FromDouble(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  END_HANDLE_TH_ERRORS
}

// For bench/python/overhead.py's parts: seconds for `n` rounds of each piece of a call of `call` (a Call) on the
// tensors of `args` (a tuple), looped here in C++: "call" the whole call (its output dropped), "call_kept_outputs"
// the same call with its outputs written into buffers kept from its first round (the call less torch's allocation,
// Python wrap and free of the outputs), "checks" the decision to run here (plain_call and runs_here),
// "current_stream" torch's current stream, "capture_query" whether that stream is being captured, "gil_release" the
// GIL released and taken back.
PyObject* py_probe_parts(PyObject*, PyObject* const* argv, Py_ssize_t nargs) {
  if (nargs != 3 || !PyObject_TypeCheck(argv[0], &CallType) || !PyTuple_Check(argv[1]) || !PyLong_Check(argv[2])) {
    PyErr_SetString(PyExc_TypeError, "_probe_parts(call, args: tuple, n: int)");
    return nullptr;
  }
  const long long n = PyLong_AsLongLong(argv[2]);
  if (n < 0 || (n == -1 && PyErr_Occurred())) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_probe_parts: the count must be >= 0");
    return nullptr;
  }
  PyObject* const* args = &PyTuple_GET_ITEM(argv[1], 0);
  const Py_ssize_t na = PyTuple_GET_SIZE(argv[1]);
  int device = -1;
  if (!plain_call(args, na) || !runs_here(args, na, &device)) {
    PyErr_SetString(PyExc_ValueError, "_probe_parts: these arguments do not run here (plain CUDA tensors needed)");
    return nullptr;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  PyObject* out = PyDict_New();
  if (out == nullptr) return nullptr;
  const auto put = [&](const char* key, double v) {
    PyObject* f = PyFloat_FromDouble(v);
    const bool ok = f != nullptr && PyDict_SetItemString(out, key, f) == 0;
    Py_XDECREF(f);
    return ok;
  };
  auto t0 = clock::now();
  for (long long i = 0; i < n; ++i) {
    PyObject* r = call_vectorcall(argv[0], args, static_cast<size_t>(na), nullptr);
    if (r == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(r);
  }
  bool ok = put("call", seconds(t0));
  {  // the same decisions as call_vectorcall's, then the call with kept outputs
    auto* self = reinterpret_cast<Call*>(argv[0]);
    KeptMemory kept;
    t0 = clock::now();
    for (long long i = 0; i < n && ok; ++i) {
      int dev = -1;
      PyObject* r = plain_call(args, na) && runs_here(args, na, &dev) ? run_held(self, args, na, dev, &kept) : nullptr;
      ok = r != nullptr;
      Py_XDECREF(r);
    }
    if (!ok) {
      Py_DECREF(out);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "_probe_parts: the call with kept outputs failed");
      return nullptr;
    }
    ok = put("call_kept_outputs", seconds(t0));
  }
  t0 = clock::now();
  int dev = -1, yes = 0;
  for (long long i = 0; i < n; ++i) yes += plain_call(args, na) && runs_here(args, na, &dev);
  ok = ok && put("checks", seconds(t0)) && yes == n;
  t0 = clock::now();
  uintptr_t sum = 0;
  for (long long i = 0; i < n; ++i)
    sum += reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  ok = ok && put("current_stream", seconds(t0)) && sum != 1;
  t0 = clock::now();
  for (long long i = 0; i < n; ++i) {
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    yes += cudaStreamIsCapturing(stream, &c) == cudaSuccess && c == cudaStreamCaptureStatusNone;
  }
  ok = ok && put("capture_query", seconds(t0));
  t0 = clock::now();
  for (long long i = 0; i < n; ++i) {
    Py_BEGIN_ALLOW_THREADS Py_END_ALLOW_THREADS
  }
  ok = ok && put("gil_release", seconds(t0));
  if (!ok) {
    Py_DECREF(out);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "_probe_parts: a piece failed");
    return nullptr;
  }
  return out;
}

PyMethodDef kMethods[] = {
    {"_probe_parts", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_probe_parts)), METH_FASTCALL,
     "Seconds for n rounds of each piece of a call, looped in C++ (bench/python/overhead.py's parts)."},
    {"_probe_output", py_probe_output, METH_O,
     "Seconds for n outputs allocated, wrapped and dropped (bench/python/overhead.py's parts)."},
    {"plain_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_plain_call)), METH_FASTCALL,
     "Whether an eager call with these arguments skips the dispatcher (the same rule as kiln._kiln's)."},
    {"workspace_pool_bytes", py_pool_bytes, METH_NOARGS, "Workspace bytes this module's pool holds."},
    {"release_workspaces", py_release, METH_NOARGS, "Drops the pool's buffers (torch's caching allocator gets them)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_torch_native",
                       "kiln.torch's eager call in C++ against libtorch (python/torch_native/torch_native.cc).", -1,
                       kMethods};

}  // namespace kiln::py::native

PyMODINIT_FUNC PyInit__torch_native() {
  using namespace kiln::py::native;
  CallType.tp_name = "kiln._torch_native.Call";
  CallType.tp_basicsize = sizeof(Call);
  CallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  CallType.tp_doc = "Call(runner, op, bridge): a kiln.torch op's eager call (kiln.torch's docstring).";
  CallType.tp_new = PyType_GenericNew;
  CallType.tp_init = call_init;
  CallType.tp_dealloc = call_dealloc;
  CallType.tp_traverse = call_traverse;
  CallType.tp_clear = call_clear;
  CallType.tp_call = call_tp_call;
  CallType.tp_vectorcall_offset = offsetof(Call, vectorcall);
  CallType.tp_dictoffset = offsetof(Call, dict);
  CallType.tp_weaklistoffset = offsetof(Call, weakrefs);
  if (PyType_Ready(&CallType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  Py_INCREF(&CallType);
  if (PyModule_AddObject(m, "Call", reinterpret_cast<PyObject*>(&CallType)) < 0 ||
      PyModule_AddStringConstant(m, "torch_version", KILN_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
