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

void read_torch(nb::handle obj, TensorView& v) {
  v.kind = "torch.Tensor";
  v.on_cuda = nb::cast<bool>(obj.attr("is_cuda"));
  if (v.on_cuda) v.device = nb::cast<int>(obj.attr("get_device")());
  v.ptr = nb::cast<uintptr_t>(obj.attr("data_ptr")());
  for (nb::handle d : obj.attr("shape")) v.shape.push_back(nb::cast<int64_t>(d));
  for (nb::handle s : obj.attr("stride")()) v.strides.push_back(nb::cast<int64_t>(s));
  v.itemsize = nb::cast<size_t>(obj.attr("element_size")());
  v.dtype_known = torch_dtype(obj.attr("dtype"), &v.dtype, &v.dtype_text);
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
    if (nb::hasattr(obj, "data_ptr") && nb::hasattr(obj, "is_cuda")) {
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
  const std::string what = "tensor '" + d.name + "'";
  if (!v.on_cuda) bad_input(what + ": a " + v.kind + " on the host; a plan runs on CUDA tensors");
  const DataType want = g.dtype_of(t);
  if (v.dtype_known ? v.dtype != want : v.itemsize != dtype_size(want)) {
    bad_input(what + ": dtype " + v.dtype_text + ", the graph's is " + dtype_name(want));
  }
  const std::vector<int64_t> shape = d.shape();
  if (v.shape != shape) {
    bad_input(what + ": shape " + dims_text(v.shape) + ", the graph's is " + dims_text(shape) +
              (g.dynamic_dims.empty() ? "" : " (obtain a plan for the shape you run)"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] > 1 && v.strides[i] != d.strides[i]) {
      bad_input(what + ": strides " + dims_text(v.strides) + ", the plan needs " + dims_text(d.strides) + " (layout " +
                layout_name(d.layout) + (d.layout == Layout::kNHWC ? ": torch's channels_last" : "") + ")");
    }
  }
  size_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) span += static_cast<size_t>((shape[i] - 1) * d.strides[i]);
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

cudaStream_t read_stream(nb::handle stream) {
  if (stream.is_none()) {
    static nb::object torch_get_device, torch_raw_stream;  // cached once torch is seen
    PyObject* modules = PySys_GetObject("modules");        // borrowed
    if (modules == nullptr || PyDict_GetItemString(modules, "torch") == nullptr) return nullptr;
    if (!torch_raw_stream.is_valid()) {
      nb::object c = nb::module_::import_("torch").attr("_C");
      torch_get_device = c.attr("_cuda_getDevice");
      torch_raw_stream = c.attr("_cuda_getCurrentRawStream");
    }
    nb::object dev = torch_get_device();
    return reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(torch_raw_stream(dev)));
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
