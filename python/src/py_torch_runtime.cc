// Memory for a kiln.torch op from PyTorch's caching allocator (py_torch_runtime.h).
#include "py_torch_runtime.h"

#include <map>
#include <string>
#include <utility>

namespace kiln::py {
namespace {

struct PooledWorkspace {
  nb::object tensor;
  int64_t bytes = 0;
  void* ptr = nullptr;
};

// (device, stream) -> its buffer. Touched only with the GIL held; never freed (outlives the interpreter's last call).
std::map<std::pair<int, uintptr_t>, PooledWorkspace>& pool() {
  static auto* p = new std::map<std::pair<int, uintptr_t>, PooledWorkspace>();
  return *p;
}
// Streams come and go (a program that makes one per request); past this many, an entry makes room.
constexpr size_t kPoolStreams = 64;

}  // namespace

TorchRuntime::TorchRuntime() {
  nb::module_ torch = nb::module_::import_("torch");
  empty_strided_ = torch.attr("empty_strided");
  empty_ = torch.attr("empty");
  uint8_ = torch.attr("uint8");
  kwnames_ = nb::make_tuple("dtype", "device");
  tensor_type_ = torch.attr("Tensor");
  parameter_type_ = torch.attr("nn").attr("Parameter");
  requires_grad_ = nb::str("requires_grad");
  data_ptr_name_ = nb::str("data_ptr");
  nb::object c = torch.attr("_C");
  // What decides whether torch must see the call (each in every torch this package supports; where one is missing,
  // every call takes the dispatcher's path): a dispatch or function mode, a functorch transform (vmap, grad,
  // functionalize), the JIT tracer, the autograd profiler, and grad mode (with an input that requires grad).
  const char* names[] = {"_len_torch_dispatch_stack", "_is_torch_function_mode_enabled",
                         "_are_functorch_transforms_active", "_get_tracing_state", "is_grad_enabled"};
  bool all = nb::hasattr(c, "_autograd") && nb::hasattr(c.attr("_autograd"), "_profiler_enabled") &&
             nb::hasattr(c, "_dispatch_keys") && nb::hasattr(c, "_dispatch_tls_local_include_set") &&
             nb::hasattr(c, "DispatchKeySet") && nb::hasattr(c, "DispatchKey");
  for (const char* n : names) all = all && nb::hasattr(c, n);
  if (all) {
    dispatch_stack_len_ = c.attr("_len_torch_dispatch_stack");
    function_mode_on_ = c.attr("_is_torch_function_mode_enabled");
    functorch_on_ = c.attr("_are_functorch_transforms_active");
    tracing_state_ = c.attr("_get_tracing_state");
    profiler_on_ = c.attr("_autograd").attr("_profiler_enabled");
    grad_enabled_ = c.attr("is_grad_enabled");
    // The dispatch keys a plain dense tensor carries (its backend's, autograd's, autocast's; CPU or CUDA), and
    // those every thread includes (kiln._torch_native reads the same from C++): a key outside them (a negative or
    // conjugate view, a functional, sparse, meta or nested tensor; functionalization or a Python key switched on
    // for the thread) is torch's to see.
    dispatch_keys_ = c.attr("_dispatch_keys");
    tls_include_ = c.attr("_dispatch_tls_local_include_set");
    raw_repr_ = nb::str("raw_repr");
    nb::object key = c.attr("DispatchKey");
    nb::object plain = c.attr("DispatchKeySet")(key.attr("CUDA"));
    for (const char* k : {"CPU", "AutogradCUDA", "AutogradCPU", "ADInplaceOrView", "AutocastCUDA", "AutocastCPU"})
      plain = plain.attr("add")(key.attr(k));
    plain_keys_ = nb::cast<uint64_t>(plain.attr("raw_repr")());
    nb::object usual = c.attr("DispatchKeySet")(key.attr("BackendSelect")).attr("add")(key.attr("ADInplaceOrView"));
    usual_tls_keys_ = nb::cast<uint64_t>(usual.attr("raw_repr")());
  }
}

namespace {
bool call_true(const nb::object& f) {
  PyObject* r = PyObject_CallNoArgs(f.ptr());
  if (r == nullptr) throw nb::python_error();
  const bool yes = PyObject_IsTrue(r) == 1;
  Py_DECREF(r);
  return yes;
}
}  // namespace

uint64_t TorchRuntime::raw_keys(PyObject* keys) const {
  if (keys == nullptr) throw nb::python_error();
  nb::object set = nb::steal(keys);
  PyObject* raw = PyObject_CallMethodNoArgs(set.ptr(), raw_repr_.ptr());
  if (raw == nullptr) throw nb::python_error();
  return nb::cast<uint64_t>(nb::steal(raw));
}

bool TorchRuntime::plain_call(nb::handle args) const {
  if (!dispatch_stack_len_.is_valid() || !PyTuple_Check(args.ptr())) return false;
  const Py_ssize_t n = PyTuple_Size(args.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(PyTuple_GetItem(args.ptr(), i)));
    if (type != tensor_type_.ptr() && type != parameter_type_.ptr()) return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* keys = PyObject_CallOneArg(dispatch_keys_.ptr(), PyTuple_GetItem(args.ptr(), i));
    if ((raw_keys(keys) & ~plain_keys_) != 0) return false;
  }
  if ((raw_keys(PyObject_CallNoArgs(tls_include_.ptr())) & ~usual_tls_keys_) != 0) return false;
  if (call_true(dispatch_stack_len_) || call_true(function_mode_on_) || call_true(functorch_on_) ||
      call_true(profiler_on_))
    return false;
  {
    PyObject* tracing = PyObject_CallNoArgs(tracing_state_.ptr());
    if (tracing == nullptr) throw nb::python_error();
    const bool traced = tracing != Py_None;
    Py_DECREF(tracing);
    if (traced) return false;
  }
  // Autograd: an input that requires grad goes through the dispatcher, whose autograd fallback says (warns) that
  // the op has no backward, rather than outputs silently cut from the graph.
  if (call_true(grad_enabled_)) {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* rg = PyObject_GetAttr(PyTuple_GetItem(args.ptr(), i), requires_grad_.ptr());
      if (rg == nullptr) throw nb::python_error();
      const bool yes = rg == Py_True;
      Py_DECREF(rg);
      if (yes) return false;
    }
  }
  return true;
}

void* TorchRuntime::data_ptr(nb::handle tensor) const {
  PyObject* r = PyObject_CallMethodNoArgs(tensor.ptr(), data_ptr_name_.ptr());
  if (r == nullptr) throw nb::python_error();
  return reinterpret_cast<void*>(nb::cast<uintptr_t>(nb::steal(r)));
}

nb::handle TorchRuntime::device(int device) const {
  if (device < 0) bad_input("device: " + std::to_string(device) + ", a CUDA device index expected");
  const size_t i = static_cast<size_t>(device);
  if (i < devices_.size() && devices_[i].is_valid()) return devices_[i];
  nb::object d = nb::module_::import_("torch").attr("device")("cuda", device);  // may let another thread run
  if (i >= devices_.size()) devices_.resize(i + 1);
  devices_[i] = d;
  return devices_[i];
}

nb::object TorchRuntime::empty_strided(nb::handle shape, nb::handle strides, nb::handle dtype, int dev) const {
  PyObject* args[] = {shape.ptr(), strides.ptr(), dtype.ptr(), device(dev).ptr()};
  PyObject* r = PyObject_Vectorcall(empty_strided_.ptr(), args, 2, kwnames_.ptr());
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

void* TorchRuntime::workspace(int64_t bytes, int dev, cudaStream_t stream, nb::object* keep) {
  if (bytes <= 0) return nullptr;
  if (stream_capturing(stream)) {
    *keep = empty_(bytes, "dtype"_a = uint8_, "device"_a = device(dev));
    return data_ptr(*keep);
  }
  // torch.empty below may let another thread run (torch releases the GIL while it allocates): no iterator is kept
  // across it. A buffer replaced or evicted is moved out of the map first and released after the map's update:
  // releasing a tensor can run Python (a weakref callback), which could call an op and change the pool meanwhile.
  auto& p = pool();
  const auto key = std::make_pair(dev, reinterpret_cast<uintptr_t>(stream));
  auto it = p.find(key);
  if (it != p.end() && it->second.bytes >= bytes) {
    *keep = it->second.tensor;
    return it->second.ptr;
  }
  PooledWorkspace w;
  w.tensor = empty_(bytes, "dtype"_a = uint8_, "device"_a = device(dev));
  w.bytes = bytes;
  w.ptr = data_ptr(w.tensor);
  // Allocated while `stream` is torch's current one on `dev` (the caller checked), so the caching allocator reuses
  // the block it replaces only in that stream's order.
  *keep = w.tensor;
  void* ptr = w.ptr;
  PooledWorkspace gone, evicted;
  it = p.find(key);
  if (it != p.end()) {
    gone = std::move(it->second);
    it->second = std::move(w);
  } else {
    if (p.size() >= kPoolStreams) {  // streams come and go: the oldest-keyed entry makes room
      evicted = std::move(p.begin()->second);
      p.erase(p.begin());
    }
    p.emplace(key, std::move(w));
  }
  // `*keep` holds this buffer until the plan is enqueued, even if another thread regrows the pool's meanwhile.
  return ptr;  // `gone` and `evicted` are released here, after the map's update
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: the path that is safe either way
  }
  return capture != cudaStreamCaptureStatusNone;
}

TorchRuntime& torch_runtime() {
  // Not a function-local static: its guard would be held across Python calls that can let another thread take the
  // GIL and then wait on the guard (a deadlock). Two threads racing here make two; one is kept, neither is freed.
  static TorchRuntime* a = nullptr;
  if (a == nullptr) {
    auto* made = new TorchRuntime();
    if (a == nullptr) a = made;
  }
  return *a;
}

int64_t torch_workspace_pool_bytes() {
  int64_t n = 0;
  for (const auto& [key, w] : pool()) n += w.bytes;
  return n;
}

void torch_release_workspaces() {
  std::map<std::pair<int, uintptr_t>, PooledWorkspace> gone;
  gone.swap(pool());  // released after the swap (see TorchRuntime::workspace)
}

}  // namespace kiln::py
