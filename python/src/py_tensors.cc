// Reading a caller's tensors and streams (py_tensors.h).
#include "py_tensors.h"

#include <nanobind/ndarray.h>

#include <map>
#include <mutex>
#include <string>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_graph.h"

namespace kiln::py {
namespace {

std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// torch dtypes are singletons: each is named once (str(dtype)) and remembered by identity.
bool torch_dtype(nb::handle dtype, DataType* out, std::string* text) {
  static std::mutex mu;
  static std::map<PyObject*, std::pair<int, std::string>> known;  // -1: no Kiln dtype
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(dtype.ptr());
  if (it == known.end()) {
    std::string name = nb::cast<std::string>(nb::str(dtype));
    static const std::map<std::string, DataType> names = {
        {"torch.float32", DataType::kFloat32},     {"torch.float16", DataType::kFloat16},
        {"torch.bfloat16", DataType::kBFloat16},   {"torch.float8_e4m3fn", DataType::kFp8E4M3},
        {"torch.float8_e5m2", DataType::kFp8E5M2}, {"torch.int8", DataType::kInt8},
        {"torch.int32", DataType::kInt32},         {"torch.int64", DataType::kInt64}};
    auto n = names.find(name);
    Py_INCREF(dtype.ptr());  // kept with the table
    it = known.emplace(dtype.ptr(), std::make_pair(n == names.end() ? -1 : static_cast<int>(n->second), name)).first;
  }
  *text = it->second.second;
  if (it->second.first < 0) return false;
  *out = static_cast<DataType>(it->second.first);
  return true;
}

// Attribute names made once (an attribute looked up by a C string makes a Python string each time: a call reads five
// per tensor, and this is most of what a call costs from Python; docs/python.md "Cost of a call").
struct TorchNames {
  nb::object get_device = nb::str("get_device"), data_ptr = nb::str("data_ptr"), shape = nb::str("shape"),
             stride = nb::str("stride"), dtype = nb::str("dtype"), element_size = nb::str("element_size"),
             is_cuda = nb::str("is_cuda");
};
const TorchNames& torch_names() {
  static const TorchNames* names = new TorchNames();  // never freed: outlives the interpreter's last call
  return *names;
}

nb::object call_method(nb::handle obj, const nb::object& name) {
  PyObject* r = PyObject_CallMethodObjArgs(obj.ptr(), name.ptr(), nullptr);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

void read_ints(nb::handle seq, std::vector<int64_t>* out) {
  const Py_ssize_t n = PyTuple_Check(seq.ptr()) ? PyTuple_Size(seq.ptr()) : -1;
  if (n < 0) {  // not a tuple (a tensor-like object of another kind)
    for (nb::handle d : seq) out->push_back(nb::cast<int64_t>(d));
    return;
  }
  out->reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) out->push_back(nb::cast<int64_t>(nb::handle(PyTuple_GetItem(seq.ptr(), i))));
}

// A torch.Tensor (or an object with its methods): five reads, by names made once.
void read_torch(nb::handle obj, TensorView& v) {
  const TorchNames& n = torch_names();
  v.kind = "torch.Tensor";
  v.device = nb::cast<int>(call_method(obj, n.get_device));  // -1: on the host
  v.on_cuda = v.device >= 0;
  v.ptr = nb::cast<uintptr_t>(call_method(obj, n.data_ptr));
  read_ints(obj.attr(n.shape), &v.shape);
  read_ints(call_method(obj, n.stride), &v.strides);
  v.dtype_known = torch_dtype(obj.attr(n.dtype), &v.dtype, &v.dtype_text);
  v.itemsize = v.dtype_known ? dtype_size(v.dtype) : nb::cast<size_t>(call_method(obj, n.element_size));
}

// Whether `obj` is read as a torch tensor: an instance of torch.Tensor (a type check, once torch is imported), else
// anything with its data_ptr and is_cuda.
bool is_torch_like(nb::handle obj) {
  static PyObject* tensor_type = nullptr;  // a strong reference, kept for the process
  if (tensor_type == nullptr) {
    PyObject* modules = PySys_GetObject("modules");  // borrowed
    PyObject* torch = modules ? PyDict_GetItemString(modules, "torch") : nullptr;
    if (torch != nullptr) {
      tensor_type = PyObject_GetAttrString(torch, "Tensor");
      if (tensor_type == nullptr) PyErr_Clear();
    }
  }
  if (tensor_type != nullptr && PyObject_IsInstance(obj.ptr(), tensor_type) == 1) return true;
  const TorchNames& n = torch_names();
  return PyObject_HasAttr(obj.ptr(), n.data_ptr.ptr()) && PyObject_HasAttr(obj.ptr(), n.is_cuda.ptr());
}

// typestr of the CUDA array interface: '<f2', '|i1', ...: a byte order, a kind, a size. 'V' (bfloat16 and fp8 from
// ml_dtypes) is known by its size only; a big-endian number, or a kind Kiln binds no tensor of, is refused.
void read_typestr(const std::string& ts, TensorView& v, const std::string& name) {
  v.dtype_text = ts;
  const bool digits = ts.size() >= 3 && ts.find_first_not_of("0123456789", 2) == std::string::npos;
  if (!digits || std::string("<>|=").find(ts[0]) == std::string::npos)
    bad_input("tensor '" + name + "': typestr '" + ts + "' is not a CUDA array interface type ('<f2', '|i1', ...)");
  const char kind = ts[1];
  const int bytes = std::atoi(ts.c_str() + 2);
  if (ts[0] == '>' && bytes > 1) bad_input("tensor '" + name + "': typestr '" + ts + "' is big-endian");
  v.itemsize = static_cast<size_t>(bytes);
  v.dtype_known = true;
  if (kind == 'f' && bytes == 4) v.dtype = DataType::kFloat32;
  else if (kind == 'f' && bytes == 2) v.dtype = DataType::kFloat16;
  else if (kind == 'i' && bytes == 1) v.dtype = DataType::kInt8;
  else if (kind == 'i' && bytes == 4) v.dtype = DataType::kInt32;
  else if (kind == 'i' && bytes == 8) v.dtype = DataType::kInt64;
  else if (kind == 'V') v.dtype_known = false;
  else bad_input("tensor '" + name + "': typestr '" + ts + "' is no dtype Kiln binds");
}

void read_cai(nb::handle obj, TensorView& v, const std::string& name) {
  v.kind = "__cuda_array_interface__";
  nb::dict d = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
  for (const char* key : {"data", "shape", "typestr"})
    if (!d.contains(key)) bad_input("tensor '" + name + "': its __cuda_array_interface__ has no '" + key + "'");
  v.on_cuda = true;
  nb::tuple data = nb::cast<nb::tuple>(d["data"]);
  if (data.size() < 1) bad_input("tensor '" + name + "': its __cuda_array_interface__'s 'data' is an empty tuple");
  v.ptr = nb::cast<uintptr_t>(data[0]);
  for (nb::handle s : nb::cast<nb::tuple>(d["shape"])) v.shape.push_back(nb::cast<int64_t>(s));
  read_typestr(nb::cast<std::string>(d["typestr"]), v, name);
  nb::object st = d.contains("strides") ? nb::object(d["strides"]) : nb::none();
  if (st.is_none()) {
    v.strides.assign(v.shape.size(), 1);
    for (int i = static_cast<int>(v.shape.size()) - 2; i >= 0; --i) v.strides[i] = v.strides[i + 1] * v.shape[i + 1];
    return;
  }
  for (nb::handle s : nb::cast<nb::tuple>(st)) {
    int64_t b = nb::cast<int64_t>(s);
    if (b % static_cast<int64_t>(v.itemsize) != 0) {
      bad_input("tensor '" + name + "': a stride of " + std::to_string(b) + " bytes is not a whole number of elements");
    }
    v.strides.push_back(b / static_cast<int64_t>(v.itemsize));
  }
}

void read_dlpack(nb::handle obj, TensorView& v, const std::string& name) {
  v.kind = "DLPack";
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a)) {
    bad_input("tensor '" + name + "': a " + nb::cast<std::string>(nb::type_name(obj.type())) +
              " is not a tensor Kiln can read (a torch.Tensor, an object with __cuda_array_interface__, or DLPack)");
  }
  v.on_cuda = a.device_type() == nb::device::cuda::value;
  v.device = a.device_id();
  v.ptr = reinterpret_cast<uintptr_t>(a.data());
  for (size_t i = 0; i < a.ndim(); ++i) {
    v.shape.push_back(static_cast<int64_t>(a.shape(i)));
    v.strides.push_back(a.stride(i));
  }
  nb::dlpack::dtype t = a.dtype();
  v.itemsize = (t.bits * t.lanes) / 8;
  v.dtype_text = "DLPack(code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits)";
  using C = nb::dlpack::dtype_code;
  v.dtype_known = true;
  if (t.code == static_cast<uint8_t>(C::Float) && t.bits == 32) v.dtype = DataType::kFloat32;
  else if (t.code == static_cast<uint8_t>(C::Float) && t.bits == 16) v.dtype = DataType::kFloat16;
  else if (t.code == static_cast<uint8_t>(C::Bfloat) && t.bits == 16) v.dtype = DataType::kBFloat16;
  else if (t.code == static_cast<uint8_t>(C::Int) && t.bits == 8) v.dtype = DataType::kInt8;
  else if (t.code == static_cast<uint8_t>(C::Int) && t.bits == 32) v.dtype = DataType::kInt32;
  else if (t.code == static_cast<uint8_t>(C::Int) && t.bits == 64) v.dtype = DataType::kInt64;
  else v.dtype_known = false;  // fp8 exporters differ in their codes: checked by size only
}

}  // namespace

TensorView read_tensor(nb::handle obj, const std::string& name) {
  TensorView v;
  if (obj.is_none()) bad_input("tensor '" + name + "': None, a CUDA tensor expected");
  // An exporter's fields of the wrong kind (a list for a tuple, a negative pointer, a property that raises) are bad
  // input naming the tensor, never a crash or a bare cast error (found by a hostile trial).
  try {
    if (is_torch_like(obj)) {
      read_torch(obj, v);
    } else if (nb::hasattr(obj, "__cuda_array_interface__")) {
      read_cai(obj, v, name);
    } else {
      read_dlpack(obj, v, name);
    }
  } catch (const StatusError&) {
    throw;
  } catch (const nb::python_error& e) {
    bad_input("tensor '" + name + "': reading it as a " + (*v.kind ? v.kind : "tensor") + " failed: " + e.what());
  } catch (const std::exception& e) {
    bad_input("tensor '" + name + "': its " + (*v.kind ? v.kind : "tensor") + " holds a field of the wrong type (" +
              e.what() + ")");
  }
  if (v.strides.size() != v.shape.size())
    bad_input("tensor '" + name + "': " + std::to_string(v.strides.size()) + " strides for " +
              std::to_string(v.shape.size()) + " dims");
  return v;
}

TensorBinding checked_binding(const TensorView& v, const Graph& g, int t) {
  const TensorDesc& d = g.tensors[t];
  // Messages are made only when one is needed: this runs for every tensor of every call.
  const auto what = [&] { return "tensor '" + d.name + "'"; };
  if (!v.on_cuda) bad_input(what() + ": a " + v.kind + " on the host; a plan runs on CUDA tensors");
  const DataType want = g.dtype_of(t);
  if (v.dtype_known ? v.dtype != want : v.itemsize != dtype_size(want)) {
    bad_input(what() + ": dtype " + v.dtype_text + ", the graph's is " + dtype_name(want));
  }
  bool same_shape = v.shape.size() == d.dims.size();
  for (size_t i = 0; same_shape && i < d.dims.size(); ++i) same_shape = v.shape[i] == d.dims[i].value;
  if (!same_shape) {
    bad_input(what() + ": shape " + dims_text(v.shape) + ", the graph's is " + dims_text(d.shape()) +
              (g.dynamic_dims.empty() ? "" : " (obtain a plan for the shape you run)"));
  }
  for (size_t i = 0; i < d.dims.size(); ++i) {
    if (d.dims[i].value > 1 && v.strides[i] != d.strides[i]) {
      bad_input(what() + ": strides " + dims_text(v.strides) + ", the plan needs " + dims_text(d.strides) +
                " (layout " + layout_name(d.layout) + (d.layout == Layout::kNHWC ? ": torch's channels_last" : "") +
                ")");
    }
  }
  size_t span = 1;
  for (size_t i = 0; i < d.dims.size(); ++i) span += static_cast<size_t>((d.dims[i].value - 1) * d.strides[i]);
  if (v.ptr == 0 && span > 0)
    bad_input(what() + ": a " + v.kind + " with no storage (data pointer 0: a meta, fake or functional tensor?)");
  return TensorBinding{reinterpret_cast<void*>(v.ptr), span * dtype_size(want)};
}

namespace {

cudaStream_t stream_of(nb::handle stream) {
  if (PyLong_Check(stream.ptr())) return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(stream));
  if (nb::hasattr(stream, "cuda_stream")) {
    return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(stream.attr("cuda_stream")));
  }
  if (nb::hasattr(stream, "__cuda_stream__")) {
    nb::tuple t = nb::cast<nb::tuple>(stream.attr("__cuda_stream__")());
    if (t.size() < 2)
      bad_input("stream: __cuda_stream__() gave a tuple of " + std::to_string(t.size()) +
                ", (version, handle) expected");
    return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(t[1]));
  }
  if (nb::hasattr(stream, "ptr")) return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(stream.attr("ptr")));
  bad_input(
      "stream: a " + nb::cast<std::string>(nb::type_name(stream.type())) +
      " is not a stream (None, an int cudaStream_t, a torch.cuda.Stream, or an object with __cuda_stream__ or ptr)");
}

}  // namespace

namespace {
struct TorchStreams {
  nb::object get_device, raw_stream;  // torch._C's, cached once torch is seen
};
// Null until torch is imported. Never freed (outlives the interpreter's last call).
const TorchStreams* torch_streams() {
  static TorchStreams* t = nullptr;
  if (t != nullptr) return t;
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  if (modules == nullptr || PyDict_GetItemString(modules, "torch") == nullptr) return nullptr;
  nb::object c = nb::module_::import_("torch").attr("_C");
  auto* made = new TorchStreams{c.attr("_cuda_getDevice"), c.attr("_cuda_getCurrentRawStream")};
  if (t == nullptr) t = made;
  return t;
}
}  // namespace

cudaStream_t torch_stream_for(int device, const std::string& tensor) {
  const TorchStreams* ts = torch_streams();
  if (ts == nullptr) return nullptr;
  const int current = nb::cast<int>(ts->get_device());
  if (device >= 0 && device != current)
    bad_input("tensor '" + tensor + "' is on cuda:" + std::to_string(device) +
              " and the current device is cuda:" + std::to_string(current) + ": call the op under torch.cuda.device(" +
              std::to_string(device) + ") (its plans, stream and workspace are the current device's)");
  return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(ts->raw_stream(current)));
}

cudaStream_t read_stream(nb::handle stream) {
  if (stream.is_none()) {
    const TorchStreams* ts = torch_streams();
    if (ts == nullptr) return nullptr;
    return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(ts->raw_stream(ts->get_device())));
  }
  try {
    return stream_of(stream);
  } catch (const StatusError&) {
    throw;
  } catch (const nb::python_error& e) {
    bad_input(std::string("stream: reading it failed: ") + e.what());
  } catch (const std::exception& e) {
    bad_input("stream: not a stream handle (a negative or non-integer value: " + std::string(e.what()) + ")");
  }
}

void* read_workspace(nb::handle workspace, int64_t need) {
  if (workspace.is_none()) return nullptr;
  if (PyLong_Check(workspace.ptr())) return reinterpret_cast<void*>(nb::cast<uintptr_t>(workspace));
  TensorView v = read_tensor(workspace, "workspace");
  if (!v.on_cuda) bad_input("workspace: on the host; a CUDA buffer expected");
  int64_t elems = 1;
  for (int64_t s : v.shape) elems *= s;
  if (elems * static_cast<int64_t>(v.itemsize) < need) {
    bad_input("workspace: " + std::to_string(elems * static_cast<int64_t>(v.itemsize)) + " bytes, the plan needs " +
              std::to_string(need));
  }
  return reinterpret_cast<void*>(v.ptr);
}

StreamScratch::StreamScratch(cudaStream_t stream, int64_t bytes) : stream_(stream) {
  if (bytes <= 0) return;
  cudaError_t e = cudaMallocAsync(&ptr_, static_cast<size_t>(bytes), stream);
  if (e != cudaSuccess) {
    ptr_ = nullptr;
    raise(Status(StatusCode::kUnavailable,
                 "workspace: cudaMallocAsync of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(e)));
  }
}

StreamScratch::~StreamScratch() {
  if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
}

}  // namespace kiln::py

namespace kiln::py {

// The reading and the checks alone, for tests and for callers that want to check a tensor before a call.
void init_tensors(nb::module_& m) {
  m.def(
      "_describe_tensor",
      [](nb::handle obj, const std::string& name) {
        TensorView v = read_tensor(obj, name);
        nb::dict d;
        d["kind"] = std::string(v.kind);
        d["ptr"] = v.ptr;
        d["shape"] = nb::tuple(nb::cast(v.shape));
        d["strides"] = nb::tuple(nb::cast(v.strides));
        d["dtype"] = v.dtype_known ? nb::object(nb::str(dtype_name(v.dtype))) : nb::none();
        d["itemsize"] = v.itemsize;
        d["on_cuda"] = v.on_cuda;
        return d;
      },
      nb::arg("obj").none(), "name"_a = "tensor",
      "How Kiln reads a tensor argument (torch, CUDA array interface or DLPack).");
  m.def(
      "_check_tensor",
      [](nb::handle obj, const PyGraph& g, const std::string& name) {
        int t = g.graph->find_tensor(name);
        if (t < 0) raise(Status(StatusCode::kNotFound, "graph '" + g.graph->name + "' has no tensor '" + name + "'"));
        return checked_binding(read_tensor(obj, name), *g.graph, t).bytes;
      },
      nb::arg("obj").none(), "graph"_a, "name"_a,
      "Checks a tensor argument against the graph's tensor `name` (device, dtype, shape, strides) as a call does; "
      "returns the bytes it spans. BadInput naming the tensor otherwise.");
  m.def(
      "_stream_of", [](nb::handle s) { return reinterpret_cast<uintptr_t>(read_stream(s)); },
      nb::arg("stream").none() = nb::none(), "The cudaStream_t a call would run on for this stream argument.");
}

}  // namespace kiln::py
