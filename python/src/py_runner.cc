// kiln._kiln.TorchRunner: the body of a kiln.torch op (python/kiln/torch.py, docs/python.md "PyTorch"). One call reads
// the input tensors, takes the dynamic dims from their shapes, obtains the plan (a memory hit once served), allocates
// the outputs and the workspace with PyTorch's caching allocator on the inputs' device, and runs the plan on torch's
// current stream: one crossing from Python per call, the GIL released while Kiln runs.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"
#include "py_planner.h"
#include "py_tensors.h"
#include "py_torch_runtime.h"
#include "torch_bridge.h"

namespace kiln::py {
namespace {

// Whether the bridge's call (kiln._torch_native) releases the GIL while the plan is enqueued; on unless the Python
// overhead benchmark turns it off to measure what the release costs (kiln._kiln._set_bridge_releases_gil).
std::atomic<bool> g_bridge_execute_releases_gil{true};

// Calls that share a stream share its pooled workspace, and a plan of several launches (an unfused chain, a padded
// or split stopgap) passes data through it between them: two threads enqueueing on one stream at once would
// interleave those launches. So a call enqueues holding its stream's lock (striped: two streams may share one),
// taken with the GIL released.
std::mutex& stream_lock(cudaStream_t stream) {
  static std::mutex locks[64];
  return locks[(reinterpret_cast<uintptr_t>(stream) >> 4) % 64];
}

// torch_bridge.h's dtypes and Kiln's, one table for both directions.
constexpr std::pair<int32_t, DataType> kBridgeDTypes[] = {
    {bridge::kF32, DataType::kFloat32},     {bridge::kF16, DataType::kFloat16},
    {bridge::kBF16, DataType::kBFloat16},   {bridge::kFp8E4M3, DataType::kFp8E4M3},
    {bridge::kFp8E5M2, DataType::kFp8E5M2}, {bridge::kI8, DataType::kInt8},
    {bridge::kI32, DataType::kInt32},       {bridge::kI64, DataType::kInt64}};

// Enqueues `plan` on `stream` with the GIL released (unless `release_gil` is false) and the stream's lock held.
Status enqueue(const ExecutablePlan& plan, cudaStream_t stream, const TensorBindings& bindings, void* ws,
               bool release_gil = true) {
  if (!release_gil) return plan.execute(stream, bindings, ws);  // the GIL held: no other call enqueues meanwhile
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(stream_lock(stream));
  return plan.execute(stream, bindings, ws);
}

// What one thread's calls of a runner reuse (run_bridge): the shape map, its keys the runner's dynamic dims, and the
// bindings of the plan it ran last, their keys that plan's tensor names: a call in a loop allocates neither.
struct CallScratch {
  uint64_t runner = 0;  // TorchRunner::id_ (0: none)
  std::map<std::string, int64_t> shape;
  std::weak_ptr<const ExecutablePlan> plan;  // whose tensors `bindings` names (compared by owner: no ABA)
  TensorBindings bindings;
  std::vector<TensorBinding*> slot;  // the runner's inputs, then its outputs, in `bindings`
  bool busy = false;
};

// The thread's scratch for `runner`: one of eight slots (a model's ops), the oldest taken for a ninth runner; null
// where that slot is in use further up this thread's stack (an allocator's callback running Python that calls an
// op), and the caller then uses its own.
CallScratch* lease_scratch(uint64_t runner) {
  constexpr unsigned kSlots = 8;
  thread_local CallScratch slots[kSlots];
  thread_local unsigned next = 0;
  for (CallScratch& s : slots)
    if (s.runner == runner) return s.busy ? nullptr : &s;
  CallScratch& s = slots[next++ % kSlots];
  if (s.busy) return nullptr;
  s = CallScratch{};
  s.runner = runner;
  return &s;
}

// Marks a scratch in use for one call.
class ScratchHold {
 public:
  explicit ScratchHold(CallScratch* s) : s_(s) { s_->busy = true; }
  ~ScratchHold() { s_->busy = false; }
  ScratchHold(const ScratchHold&) = delete;
  ScratchHold& operator=(const ScratchHold&) = delete;

 private:
  CallScratch* s_;
};

bool same_plan(const std::weak_ptr<const ExecutablePlan>& a, const std::shared_ptr<const ExecutablePlan>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

struct OutMeta {
  std::vector<int64_t> shape, strides;
  nb::object shape_t, strides_t;
};
constexpr size_t kOutMetaCap = 256;  // sets of dims remembered; past it, the table starts again

class TorchRunner {
 public:
  explicit TorchRunner(PyPrepared pg) : pg_(std::move(pg)), id_(next_id()) {
    const Graph& g = *pg_.graph.graph;
    BoundNames b = bound_names(g);
    inputs_ = b.inputs;
    outputs_ = b.outputs;
    for (const auto& [symbol, value] : g.dynamic_dims) {
      bool found = false;
      for (size_t i = 0; i < inputs_.size() && !found; ++i) {
        const std::vector<Dim>& dims = g.tensors[inputs_[i]].dims;
        for (size_t a = 0; a < dims.size() && !found; ++a) {
          if (dims[a].symbol == symbol) {
            symbol_at_.push_back({symbol, {static_cast<int>(i), static_cast<int>(a)}});
            found = true;
          }
        }
      }
      if (!found) {
        bad_input("graph '" + g.name + "': dynamic dim '" + symbol +
                  "' is on no input tensor, so a call cannot read it from its inputs");
      }
    }
    nb::module_ torch = nb::module_::import_("torch");
    torch_runtime();  // made now, at registration, not by a first call racing others
    static const std::map<DataType, const char*> torch_names = {
        {DataType::kFloat32, "float32"},       {DataType::kFloat16, "float16"},     {DataType::kBFloat16, "bfloat16"},
        {DataType::kFp8E4M3, "float8_e4m3fn"}, {DataType::kFp8E5M2, "float8_e5m2"}, {DataType::kInt8, "int8"},
        {DataType::kInt32, "int32"},           {DataType::kInt64, "int64"}};
    for (int t : outputs_) out_dtypes_.push_back(torch.attr(torch_names.at(g.dtype_of(t))));
  }

  // The plan a call with these inputs runs (what kiln.torch.plan reports).
  PyPlan plan_for(nb::args args) {
    std::vector<TensorView> views;
    std::vector<int64_t> dims;
    return PyPlan{pg_.planner, obtain_for(args, views, &dims)};
  }

  // The dispatcher's kernel: torch has checked nothing, and the tensors are real CUDA tensors.
  nb::object run(nb::args args) {
    std::vector<TensorView> views;
    std::vector<int64_t> dims;
    Obtained got = obtain_for(args, views, &dims);
    const ExecutablePlan& plan = *got.plan;
    const Graph& g = plan.graph();
    TensorBindings bindings;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      bindings[g.tensors[inputs_[i]].name] = checked_binding(views[i], g, inputs_[i]);
    }
    TorchRuntime& rt = torch_runtime();
    const int device = views[0].device;
    for (size_t i = 1; i < views.size(); ++i) {
      if (views[i].device != device)
        bad_input("tensor '" + g.tensors[inputs_[i]].name + "' is on cuda:" + std::to_string(views[i].device) +
                  ", tensor '" + g.tensors[inputs_[0]].name + "' on cuda:" + std::to_string(device) +
                  ": every input of one call on one device");
    }
    // Before anything is allocated: the inputs' device must be the current one (the stream, the workspace pool's
    // key and the Planner's plans are the current device's).
    cudaStream_t stream = torch_stream_for(device, g.tensors[inputs_[0]].name);
    // A reference counted copy: torch.empty_strided lets other threads run, and one may change the table.
    const std::shared_ptr<const std::vector<OutMeta>> metas = out_metas(dims, g);
    nb::list outs;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      nb::object t = rt.empty_strided((*metas)[i].shape_t, (*metas)[i].strides_t, out_dtypes_[i], device);
      bindings[g.tensors[outputs_[i]].name] = TensorBinding{rt.data_ptr(t), 0};
      outs.append(t);
    }
    nb::object workspace;  // held until the plan is enqueued
    void* ws = rt.workspace(plan.workspace_bytes(), device, stream, &workspace);
    check(enqueue(plan, stream, bindings, ws));
    if (outs.size() == 1) return outs[0];
    return nb::tuple(outs);
  }

  // An eager call from Python (the function kiln.torch.op returns, outside torch.compile): a call torch need not see
  // (TorchRuntime::plain_call) runs here at once, without the dispatcher's Python-kernel path; any other goes through
  // `op`, torch.ops.kiln.<name>.
  nb::object eager(nb::handle op, nb::args args) {
    if (!torch_runtime().plain_call(args)) return op(*args);
    return run(args);
  }

  const PyPrepared& prepared() const { return pg_; }

  // torch_bridge.h's Api::run: kiln._torch_native's eager call, its tensors read in C++. Throws nothing: an error
  // becomes the Python exception a call through `run` would raise.
  int run_bridge(const bridge::Input* in, size_t n, void* stream, const bridge::Memory* memory) noexcept {
    try {
      const Graph& base = *pg_.graph.graph;
      if (n != inputs_.size()) {
        bad_input("graph '" + base.name + "': " + std::to_string(n) + " inputs given, it takes " +
                  std::to_string(inputs_.size()) + " (" + names(base, inputs_) + ")");
      }
      for (size_t i = 0; i < n; ++i) {  // a dtype Kiln has no name for is refused before any plan is looked for
        if (in[i].dtype == bridge::kUnknown) bridge_view(in[i], base, inputs_[i]);
      }
      CallScratch own;
      CallScratch* sc = lease_scratch(id_);
      if (sc == nullptr) sc = &own;
      ScratchHold hold(sc);
      Obtained got = obtain_dims(
          [&](size_t i) { return std::make_pair(in[i].shape, static_cast<size_t>(std::max(in[i].rank, 0))); }, nullptr,
          sc->shape);
      const ExecutablePlan& plan = *got.plan;
      const Graph& g = plan.graph();
      if (!same_plan(sc->plan, got.plan)) rebind(sc, got.plan);
      for (size_t i = 0; i < n; ++i) *sc->slot[i] = bridge_binding(in[i], g, inputs_[i]);
      const int32_t device = in[0].device;
      for (size_t i = 0; i < outputs_.size(); ++i) {
        const TensorDesc& d = g.tensors[outputs_[i]];
        int64_t dims[16];
        std::vector<int64_t> many;  // a rank over 16
        const int64_t* shape = dims;
        if (d.dims.size() <= 16) {
          for (size_t a = 0; a < d.dims.size(); ++a) dims[a] = d.dims[a].value;
        } else {
          many = d.shape();
          shape = many.data();
        }
        const bridge::Output out{shape, d.strides.data(), static_cast<int32_t>(d.dims.size()),
                                 bridge_dtype(g.dtype_of(outputs_[i]))};
        void* p = memory->output(memory->ctx, i, &out, device);
        if (p == nullptr) throw nb::python_error();
        *sc->slot[n + i] = TensorBinding{p, 0};
      }
      const auto s = static_cast<cudaStream_t>(stream);
      void* ws = nullptr;
      if (plan.workspace_bytes() > 0) {
        ws = memory->workspace(memory->ctx, plan.workspace_bytes(), device, stream, stream_capturing(s) ? 1 : 0);
        if (ws == nullptr) throw nb::python_error();
      }
      check(enqueue(plan, s, sc->bindings, ws, g_bridge_execute_releases_gil.load(std::memory_order_relaxed)));
      return 0;
    } catch (const StatusError& e) {
      set_python_error(e.status);
    } catch (nb::python_error& e) {
      e.restore();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return -1;
  }

 private:
  // Reads the inputs, takes the dynamic dims from their shapes, and obtains the plan for them.
  // `dims`: the dynamic dims' values, in symbol_at_'s order.
  Obtained obtain_for(nb::args args, std::vector<TensorView>& views, std::vector<int64_t>* dims) {
    const Graph& base = *pg_.graph.graph;
    if (args.size() != inputs_.size()) {
      bad_input("graph '" + base.name + "': " + std::to_string(args.size()) + " inputs given, it takes " +
                std::to_string(inputs_.size()) + " (" + names(base, inputs_) + ")");
    }
    views.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) views.push_back(read_tensor(args[i], base.tensors[inputs_[i]].name));
    return obtain_views(views, dims);
  }

  // The plan for inputs already read: the dynamic dims from their shapes (`dims`, in symbol_at_'s order).
  Obtained obtain_views(const std::vector<TensorView>& views, std::vector<int64_t>* dims) {
    std::map<std::string, int64_t> shape;
    return obtain_dims([&](size_t i) { return std::make_pair(views[i].shape.data(), views[i].shape.size()); }, dims,
                       shape);
  }

  // The plan for the inputs whose shapes `shape_of(i)` gives (pointer, rank): the dynamic dims taken from them.
  // `shape`: the map the dims are written into (a scratch's, its keys already there: no allocation).
  template <class ShapeOf>
  Obtained obtain_dims(const ShapeOf& shape_of, std::vector<int64_t>* dims, std::map<std::string, int64_t>& shape) {
    const Graph& base = *pg_.graph.graph;
    for (const auto& [symbol, at] : symbol_at_) {
      const auto [sizes, rank] = shape_of(static_cast<size_t>(at.first));
      if (static_cast<size_t>(at.second) >= rank) {
        bad_input("tensor '" + base.tensors[inputs_[at.first]].name + "': rank " + std::to_string(rank) +
                  ", the graph's is " + std::to_string(base.tensors[inputs_[at.first]].dims.size()));
      }
      shape[symbol] = sizes[at.second];
      if (dims) dims->push_back(sizes[at.second]);
    }
    // A memory hit with the GIL held (it never blocks); only a miss releases the GIL, for obtain()'s walk.
    if (std::optional<Obtained> held = pg_.planner->obtain_held(pg_.prepared, shape)) return std::move(*held);
    return obtain(*pg_.planner, pg_.prepared, shape);
  }

  // The outputs' shapes and strides as tuples, made once per set of dynamic dims (a call in a loop makes none).
  // Checked against the plan's graph each time, so a plan whose graph differs gets its own, never a stale one.
  std::shared_ptr<const std::vector<OutMeta>> out_metas(const std::vector<int64_t>& dims, const Graph& g) {
    auto it = out_metas_.find(dims);
    bool fresh = it != out_metas_.end();
    for (size_t i = 0; fresh && i < outputs_.size(); ++i) {
      const TensorDesc& d = g.tensors[outputs_[i]];
      fresh = (*it->second)[i].strides == d.strides && (*it->second)[i].shape == d.shape();
    }
    if (fresh) return it->second;
    if (out_metas_.size() >= kOutMetaCap) out_metas_.clear();
    std::vector<OutMeta> metas;
    for (int t : outputs_) {
      const TensorDesc& d = g.tensors[t];
      OutMeta m;
      m.shape = d.shape();
      m.strides = d.strides;
      m.shape_t = nb::tuple(nb::cast(m.shape));
      m.strides_t = nb::tuple(nb::cast(m.strides));
      metas.push_back(std::move(m));
    }
    auto made = std::make_shared<const std::vector<OutMeta>>(std::move(metas));
    out_metas_.insert_or_assign(dims, made);
    return made;
  }

  // A scratch's bindings made for `plan`: one entry per input and output of the runner, by the plan graph's names.
  void rebind(CallScratch* sc, const std::shared_ptr<const ExecutablePlan>& plan) const {
    const Graph& g = plan->graph();
    sc->bindings.clear();
    sc->slot.clear();
    for (int t : inputs_) sc->slot.push_back(&sc->bindings[g.tensors[t].name]);
    for (int t : outputs_) sc->slot.push_back(&sc->bindings[g.tensors[t].name]);
    sc->plan = plan;
  }

  static uint64_t next_id() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }

  // checked_binding for an input read by kiln._torch_native, on its arrays (no TensorView made): where a check
  // fails, the TensorView is made and checked_binding raises its own message.
  static TensorBinding bridge_binding(const bridge::Input& in, const Graph& g, int t) {
    const TensorDesc& d = g.tensors[t];
    const DataType want = g.dtype_of(t);
    bool ok =
        in.ptr != 0 && in.dtype == bridge_dtype(want) && in.rank >= 0 && static_cast<size_t>(in.rank) == d.dims.size();
    for (size_t i = 0; ok && i < d.dims.size(); ++i)
      ok = in.shape[i] == d.dims[i].value && (d.dims[i].value <= 1 || in.strides[i] == d.strides[i]);
    if (!ok) return checked_binding(bridge_view(in, g, t), g, t);
    size_t span = 1;
    for (size_t i = 0; i < d.dims.size(); ++i) span += static_cast<size_t>((d.dims[i].value - 1) * d.strides[i]);
    return TensorBinding{reinterpret_cast<void*>(in.ptr), span * dtype_size(want)};
  }

  // An input read by kiln._torch_native, as read_tensor would have read it.
  static TensorView bridge_view(const bridge::Input& in, const Graph& g, int t) {
    TensorView v;
    v.ptr = in.ptr;
    v.shape.assign(in.shape, in.shape + in.rank);
    v.strides.assign(in.strides, in.strides + in.rank);
    v.kind = "torch.Tensor";
    v.on_cuda = true;
    v.device = in.device;
    v.dtype_text = in.dtype_text ? in.dtype_text : "?";
    const std::pair<int32_t, DataType>* named = nullptr;
    for (const auto& p : kBridgeDTypes)
      if (p.first == in.dtype) named = &p;
    if (named == nullptr) {
      bad_input("tensor '" + g.tensors[t].name + "': dtype " + v.dtype_text + ", the graph's is " +
                dtype_name(g.dtype_of(t)));
    }
    v.dtype = named->second;
    v.itemsize = dtype_size(v.dtype);
    return v;
  }

  // The bridge's name of a Kiln dtype (torch_bridge.h DType), kUnknown for one torch has no name for.
  static int32_t bridge_dtype(DataType d) {
    for (const auto& [b, kiln] : kBridgeDTypes)
      if (kiln == d) return b;
    return bridge::kUnknown;
  }

  static std::string names(const Graph& g, const std::vector<int>& ids) {
    std::string s;
    for (int t : ids) s += (s.empty() ? "" : ", ") + g.tensors[t].name;
    return s;
  }

  PyPrepared pg_;
  uint64_t id_;  // never 0; names this runner in a thread's CallScratch (an address could be reused)
  std::vector<int> inputs_, outputs_;
  std::vector<std::pair<std::string, std::pair<int, int>>> symbol_at_;  // symbol -> (input position, axis)
  std::vector<nb::object> out_dtypes_;
  std::map<std::vector<int64_t>, std::shared_ptr<const std::vector<OutMeta>>>
      out_metas_;  // by the dynamic dims' values
};

int bridge_run(void* runner, const bridge::Input* in, size_t n, void* stream, const bridge::Memory* memory) {
  return static_cast<TorchRunner*>(runner)->run_bridge(in, n, stream, memory);
}
void* bridge_runner(PyObject* obj) {
  TorchRunner* r = nullptr;
  if (!nb::try_cast<TorchRunner*>(nb::handle(obj), r) || r == nullptr) {
    PyErr_Format(PyExc_TypeError, "kiln torch bridge: a kiln._kiln.TorchRunner expected, got %s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return r;
}
const bridge::Api kBridge{bridge::kVersion, sizeof(bridge::Api), &bridge_runner, &bridge_run};

}  // namespace

void init_runner(nb::module_& m) {
  nb::class_<TorchRunner>(m, "TorchRunner", "The body of a kiln.torch op: inputs in, outputs allocated by torch.")
      .def(nb::init<PyPrepared>(), "prepared"_a)
      .def("__call__", &TorchRunner::run,
           "Runs the graph on torch tensors (its inputs, in order); returns its outputs.")
      .def("eager", &TorchRunner::eager, "op"_a, "args"_a,
           "An eager call: runs at once on plain CUDA tensors with no torch mode on, else calls `op` "
           "(torch.ops.kiln.<name>) with the same arguments.")
      .def("plan", &TorchRunner::plan_for, "The plan a call with these inputs runs (obtained, not run).")
      .def_prop_ro("prepared", &TorchRunner::prepared);
  m.def(
      "_set_bridge_releases_gil", [](bool on) { g_bridge_execute_releases_gil = on; }, "on"_a,
      "For bench/python/overhead.py only: whether kiln._torch_native's call releases the GIL while the plan is "
      "enqueued (on by default).");
  m.def(
      "_torch_bridge", [] { return nb::capsule(&kBridge, bridge::kCapsuleName); },
      "The C table kiln._torch_native calls TorchRunners through (python/src/torch_bridge.h).");
  m.def(
      "_torch_plain_call", [](nb::args args) { return torch_runtime().plain_call(args); }, "args"_a,
      "Whether a kiln.torch op called eagerly with these arguments skips the dispatcher (kiln.torch's docstring).");
  m.def("_torch_workspace_pool_bytes", &torch_workspace_pool_bytes,
        "Workspace bytes kiln.torch ops hold in their pool (one buffer per device and stream).");
  m.def("_torch_release_workspaces", &torch_release_workspaces,
        "Drops the pool's buffers (torch's caching allocator gets them back).");
}

}  // namespace kiln::py
