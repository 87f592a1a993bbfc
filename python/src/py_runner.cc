// kiln._kiln.TorchRunner: the body of a kiln.torch op (python/kiln/torch.py, docs/python.md "PyTorch"). One call reads
// the input tensors, takes the dynamic dims from their shapes, obtains the plan (a memory hit once served), allocates
// the outputs and the workspace with PyTorch's caching allocator on the inputs' device, and runs the plan on torch's
// current stream: one crossing from Python per call, the GIL released while Kiln runs.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"
#include "py_planner.h"
#include "py_tensors.h"

namespace kiln::py {
namespace {

class TorchRunner {
 public:
  explicit TorchRunner(PyPrepared pg) : pg_(std::move(pg)) {
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
    empty_strided_ = torch.attr("empty_strided");
    empty_ = torch.attr("empty");
    uint8_ = torch.attr("uint8");
    static const std::map<DataType, const char*> torch_names = {
        {DataType::kFloat32, "float32"},       {DataType::kFloat16, "float16"},     {DataType::kBFloat16, "bfloat16"},
        {DataType::kFp8E4M3, "float8_e4m3fn"}, {DataType::kFp8E5M2, "float8_e5m2"}, {DataType::kInt8, "int8"},
        {DataType::kInt32, "int32"},           {DataType::kInt64, "int64"}};
    for (int t : outputs_) out_dtypes_.push_back(torch.attr(torch_names.at(g.dtype_of(t))));
  }

  // The plan a call with these inputs runs (what kiln.torch.plan reports).
  PyPlan plan_for(nb::args args) {
    std::vector<TensorView> views;
    return PyPlan{pg_.planner, obtain_for(args, views)};
  }

  nb::object run(nb::args args) {
    std::vector<TensorView> views;
    Obtained got = obtain_for(args, views);
    const ExecutablePlan& plan = *got.plan;
    const Graph& g = plan.graph();
    TensorBindings bindings;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      bindings[g.tensors[inputs_[i]].name] = checked_binding(views[i], g, inputs_[i]);
    }
    nb::object device = args[0].attr("device");
    nb::list outs;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const TensorDesc& d = g.tensors[outputs_[i]];
      nb::object t = empty_strided_(nb::tuple(nb::cast(d.shape())), nb::tuple(nb::cast(d.strides)),
                                    "dtype"_a = out_dtypes_[i], "device"_a = device);
      bindings[d.name] = TensorBinding{reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")())), 0};
      outs.append(t);
    }
    nb::object workspace;
    void* ws = nullptr;
    if (plan.workspace_bytes() > 0) {
      workspace = empty_(plan.workspace_bytes(), "dtype"_a = uint8_, "device"_a = device);
      ws = reinterpret_cast<void*>(nb::cast<uintptr_t>(workspace.attr("data_ptr")()));
    }
    cudaStream_t stream = read_stream(nb::none());
    Status st;
    {
      nb::gil_scoped_release release;
      st = plan.execute(stream, bindings, ws);
    }
    check(st);
    if (outs.size() == 1) return outs[0];
    return nb::tuple(outs);
  }

  const PyPrepared& prepared() const { return pg_; }

 private:
  // Reads the inputs, takes the dynamic dims from their shapes, and obtains the plan for them.
  Obtained obtain_for(nb::args args, std::vector<TensorView>& views) {
    const Graph& base = *pg_.graph.graph;
    if (args.size() != inputs_.size()) {
      bad_input("graph '" + base.name + "': " + std::to_string(args.size()) + " inputs given, it takes " +
                std::to_string(inputs_.size()) + " (" + names(base, inputs_) + ")");
    }
    views.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) views.push_back(read_tensor(args[i], base.tensors[inputs_[i]].name));
    std::map<std::string, int64_t> shape;
    for (const auto& [symbol, at] : symbol_at_) {
      const TensorView& v = views[at.first];
      if (static_cast<size_t>(at.second) >= v.shape.size()) {
        bad_input("tensor '" + base.tensors[inputs_[at.first]].name + "': rank " + std::to_string(v.shape.size()) +
                  ", the graph's is " + std::to_string(base.tensors[inputs_[at.first]].dims.size()));
      }
      shape[symbol] = v.shape[at.second];
    }
    return obtain(*pg_.planner, pg_.prepared, shape);
  }

  static std::string names(const Graph& g, const std::vector<int>& ids) {
    std::string s;
    for (int t : ids) s += (s.empty() ? "" : ", ") + g.tensors[t].name;
    return s;
  }

  PyPrepared pg_;
  std::vector<int> inputs_, outputs_;
  std::vector<std::pair<std::string, std::pair<int, int>>> symbol_at_;  // symbol -> (input position, axis)
  nb::object empty_strided_, empty_, uint8_;
  std::vector<nb::object> out_dtypes_;
};

}  // namespace

void init_runner(nb::module_& m) {
  nb::class_<TorchRunner>(m, "TorchRunner", "The body of a kiln.torch op: inputs in, outputs allocated by torch.")
      .def(nb::init<PyPrepared>(), "prepared"_a)
      .def("__call__", &TorchRunner::run,
           "Runs the graph on torch tensors (its inputs, in order); returns its outputs.")
      .def("plan", &TorchRunner::plan_for, "The plan a call with these inputs runs (obtained, not run).")
      .def_prop_ro("prepared", &TorchRunner::prepared);
}

}  // namespace kiln::py
