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
// Streams come and go (a program that makes one per request); past this many, the pool starts again empty.
constexpr size_t kPoolStreams = 64;

void* data_ptr(const nb::object& t) { return reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")())); }

}  // namespace

TorchRuntime::TorchRuntime() {
  nb::module_ torch = nb::module_::import_("torch");
  empty_strided_ = torch.attr("empty_strided");
  empty_ = torch.attr("empty");
  uint8_ = torch.attr("uint8");
  kwnames_ = nb::make_tuple("dtype", "device");
  tensor_type_ = torch.attr("Tensor");
  parameter_type_ = torch.attr("nn").attr("Parameter");
  nb::object c = torch.attr("_C");
  if (nb::hasattr(c, "_len_torch_dispatch_stack") && nb::hasattr(c, "_is_torch_function_mode_enabled")) {
    dispatch_stack_len_ = c.attr("_len_torch_dispatch_stack");
    function_mode_on_ = c.attr("_is_torch_function_mode_enabled");
  }
}

bool TorchRuntime::plain_call(nb::handle args) const {
  if (!dispatch_stack_len_.is_valid() || !PyTuple_Check(args.ptr())) return false;
  const Py_ssize_t n = PyTuple_Size(args.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(PyTuple_GetItem(args.ptr(), i)));
    if (type != tensor_type_.ptr() && type != parameter_type_.ptr()) return false;
  }
  return nb::cast<int64_t>(dispatch_stack_len_()) == 0 && !nb::cast<bool>(function_mode_on_());
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
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;  // unknown: take the path that is safe either way
  }
  if (capture != cudaStreamCaptureStatusNone) {
    *keep = empty_(bytes, "dtype"_a = uint8_, "device"_a = device(dev));
    return data_ptr(*keep);
  }
  // torch.empty below may let another thread run (torch releases the GIL while it allocates): no iterator is kept
  // across it.
  auto& p = pool();
  const auto key = std::make_pair(dev, reinterpret_cast<uintptr_t>(stream));
  auto it = p.find(key);
  if (it == p.end() || it->second.bytes < bytes) {
    if (it == p.end() && p.size() >= kPoolStreams) p.clear();
    PooledWorkspace w;
    w.tensor = empty_(bytes, "dtype"_a = uint8_, "device"_a = device(dev));
    w.bytes = bytes;
    w.ptr = data_ptr(w.tensor);
    // Allocated while `stream` is torch's current one (the op runs there), so the caching allocator reuses the block
    // it replaces only in that stream's order.
    it = p.insert_or_assign(key, std::move(w)).first;
  }
  // `*keep` holds this buffer until the plan is enqueued, even if another thread regrows the pool's meanwhile.
  *keep = it->second.tensor;
  return it->second.ptr;
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

void torch_release_workspaces() { pool().clear(); }

}  // namespace kiln::py
