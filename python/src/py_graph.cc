// kiln._kiln.Graph: a validated graph with its signature (docs/python.md "Graphs"). Made from a spec file or spec
// text (kiln/__init__.py turns a dict into text); immutable once made.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kiln/runtime/reshape_graph.h"
#include "kiln/spec/spec.h"
#include "py_common.h"
#include "py_graph.h"

namespace kiln::py {

BoundNames bound_names(const Graph& g) {
  BoundNames b;
  GraphRoles roles(g);
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) {
    if (roles.is_graph_input(t) && !g.tensors[t].by_value) b.inputs.push_back(t);
  }
  b.outputs = g.outputs;
  return b;
}

nb::dict tensor_dict(const Graph& g, int t) {
  const TensorDesc& d = g.tensors[t];
  nb::dict out;
  out["name"] = d.name;
  out["shape"] = d.shape();
  out["strides"] = d.strides;
  out["dtype"] = std::string(dtype_name(g.dtype_of(t)));
  out["layout"] = std::string(layout_name(d.layout));
  nb::list symbols;
  for (const Dim& dim : d.dims) {
    if (dim.is_dynamic()) {
      symbols.append(dim.symbol);
    } else if (dim.derived) {
      symbols.append("~");  // follows the symbols without being one (a convolution's output extent)
    } else {
      symbols.append(nb::none());
    }
  }
  out["symbols"] = symbols;
  if (d.by_value) out["value"] = d.value;
  return out;
}

PyGraph PyGraph::make(Graph g) {
  PyGraph p;
  p.signature = value_or_raise(compute_signature(g));
  p.graph = std::make_shared<const Graph>(std::move(g));
  return p;
}

PyGraph PyGraph::at(const std::map<std::string, int64_t>& shape) const {
  if (shape.empty()) return *this;
  // Dims left out keep their values; an unknown symbol is refused by reshape_graph.
  std::map<std::string, int64_t> full = graph->dynamic_dims;
  for (const auto& [symbol, value] : shape) full[symbol] = value;
  PyGraph p;
  Graph g = value_or_raise(reshape_graph(*graph, full));
  p.signature = value_or_raise(reshaped_signature(*graph, signature, g));
  p.graph = std::make_shared<const Graph>(std::move(g));
  return p;
}

namespace {

nb::list tensor_list(const Graph& g, const std::vector<int>& ids) {
  nb::list l;
  for (int t : ids) l.append(tensor_dict(g, t));
  return l;
}

}  // namespace

void init_graph(nb::module_& m) {
  nb::class_<PyGraph>(m, "Graph", "A validated graph and its signature (kiln.Graph wraps it).")
      .def_static(
          "from_file",
          [](const std::string& path, int target_sm) {
            check_target_sm(target_sm);
            ValidateOptions o;
            o.target_sm_version = target_sm;
            return PyGraph::make(value_or_raise(parse_spec_file(text_arg(path, "path"), o)));
          },
          "path"_a, "target_sm"_a = 0, "Reads and validates the spec at `path`.")
      .def_static(
          "from_json",
          [](const std::string& text, const std::string& source, int target_sm) {
            check_target_sm(target_sm);
            ValidateOptions o;
            o.target_sm_version = target_sm;
            return PyGraph::make(value_or_raise(parse_spec_string(text, source, o)));
          },
          "text"_a, "source"_a = "<spec>", "target_sm"_a = 0,
          "Parses and validates spec text; `source` starts every error message.")
      .def_prop_ro("name", [](const PyGraph& p) { return p.graph->name; })
      .def_prop_ro(
          "structure", [](const PyGraph& p) { return p.signature.structure; },
          "The structure signature (32 hex digits): what plans are stored under.")
      .def_prop_ro(
          "shape_key", [](const PyGraph& p) { return p.signature.shape_key; },
          "The dynamic dims' values in canonical order ('batch=8'); '' when nothing is dynamic.")
      .def_prop_ro(
          "dynamic", [](const PyGraph& p) { return p.graph->dynamic_dims; },
          "Each dynamic dim's symbol and its value in this graph.")
      .def_prop_ro(
          "inputs", [](const PyGraph& p) { return tensor_list(*p.graph, bound_names(*p.graph).inputs); },
          "The tensors a caller passes, in declaration order (scalars passed by value are not among them).")
      .def_prop_ro(
          "outputs", [](const PyGraph& p) { return tensor_list(*p.graph, p.graph->outputs); },
          "The tensors a plan writes for the caller.")
      .def(
          "tensor",
          [](const PyGraph& p, const std::string& name) {
            int t = p.graph->find_tensor(name);
            if (t < 0)
              raise(Status(StatusCode::kNotFound, "graph '" + p.graph->name + "' has no tensor '" + name + "'"));
            return tensor_dict(*p.graph, t);
          },
          "name"_a)
      .def("at", &PyGraph::at, "shape"_a,
           "The graph at other values of its dynamic dims (every extent derived anew); BadInput for an unknown "
           "symbol or a value below 1.")
      .def(
          "to_json", [](const PyGraph& p, int indent) { return value_or_raise(graph_to_spec_json(*p.graph, indent)); },
          "indent"_a = -1, "The graph as spec JSON (one line when indent < 0).")
      .def("__repr__", [](const PyGraph& p) {
        std::string s = "kiln.Graph('" + p.graph->name + "', structure=" + p.signature.structure;
        if (!p.signature.shape_key.empty()) s += ", shape='" + p.signature.shape_key + "'";
        return s + ")";
      });
}

}  // namespace kiln::py
