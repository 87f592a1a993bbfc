// graph_to_spec_json: a Kiln graph back to spec JSON (docs/spec.md "Writing a graph back"). nlohmann::json
// throws on text that is not UTF-8 when dumping: that is caught here and becomes InvalidArgument.
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/spec/spec.h"
#include "spec/op_table.h"
#include "spec/ops/spec_ops.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// The spec op name of a node (the canonical name of the op table, never an alias).
const char* spec_op_name(const Node& n) {
  size_t count = 0;
  const spec_internal::OpInfo* ops = spec_internal::op_table(&count);
  for (size_t i = 0; i < count; ++i) {
    const spec_internal::OpInfo& op = ops[i];
    if (op.kind != n.op) continue;
    if (n.op == OpKind::kPointwise && op.pointwise != n.pointwise.mode) continue;
    if (n.op == OpKind::kReduction && op.reduction != n.reduction.mode) continue;
    return op.name;
  }
  return nullptr;
}

Json dims_json(const std::vector<Dim>& dims) {
  Json a = Json::array();
  for (const Dim& d : dims) {
    if (d.is_dynamic()) a.push_back(d.symbol);
    else a.push_back(d.value);
  }
  return a;
}

Json tensor_json(const TensorDesc& t) {
  Json j = Json::object();
  if (!t.dims.empty()) j["dims"] = dims_json(t.dims);
  if (t.layout == Layout::kExplicit) j["strides"] = t.strides;
  else j["layout"] = layout_name(t.layout);
  if (t.dtype) j["dtype"] = dtype_name(*t.dtype);
  if (t.by_value) j["value"] = t.value;
  return j;
}

StatusOr<Json> node_json(const Graph& g, const Node& n) {
  const char* op = spec_op_name(n);
  if (!op) return invalid_argument("node '" + n.name + "': its op has no spec name");
  Json j;
  j["name"] = n.name;
  j["op"] = op;
  Json ins = Json::array(), outs = Json::array();
  for (int t : n.inputs) {
    if (t < 0 || t >= static_cast<int>(g.tensors.size()))
      return invalid_argument("node '" + n.name + "': input index " + std::to_string(t) + " is not a tensor");
    ins.push_back(g.tensors[t].name);
  }
  for (int t : n.outputs) {
    if (t < 0 || t >= static_cast<int>(g.tensors.size()))
      return invalid_argument("node '" + n.name + "': output index " + std::to_string(t) + " is not a tensor");
    outs.push_back(g.tensors[t].name);
  }
  j["inputs"] = ins;
  j["outputs"] = outs;
  if (n.compute_dtype) j["compute_dtype"] = dtype_name(*n.compute_dtype);
  spec_internal::spec_family(n.op).write(n, j);
  return j;
}

StatusOr<Json> graph_json(const Graph& g) {
  Json doc;
  if (!g.name.empty()) doc["name"] = g.name;
  doc["io_dtype"] = dtype_name(g.io_dtype);
  doc["intermediate_dtype"] = dtype_name(g.intermediate_dtype);
  doc["compute_dtype"] = dtype_name(g.compute_dtype);
  if (!g.dynamic_dims.empty()) {
    Json d = Json::object();
    for (const auto& [symbol, value] : g.dynamic_dims) d[symbol] = value;
    doc["dynamic"] = d;
  }
  if (!g.pin.empty()) doc["pin"] = g.pin;

  Json tensors = Json::object();
  std::set<std::string> names;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorDesc& t = g.tensors[i];
    if (t.name.empty()) return invalid_argument("tensor " + std::to_string(i) + " has no name");
    if (!names.insert(t.name).second) return invalid_argument("tensor '" + t.name + "' is declared twice");
    tensors[t.name] = tensor_json(t);
  }
  doc["tensors"] = tensors;

  Json nodes = Json::array();
  std::set<std::string> node_names;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.name.empty()) return invalid_argument("node " + std::to_string(i) + " has no name");
    if (!node_names.insert(n.name).second) return invalid_argument("node '" + n.name + "' is declared twice");
    KILN_ASSIGN_OR_RETURN(Json nj, node_json(g, n));
    nodes.push_back(std::move(nj));
  }
  doc["nodes"] = nodes;

  Json outputs = Json::array();
  for (int t : g.outputs) {
    if (t < 0 || t >= static_cast<int>(g.tensors.size()))
      return invalid_argument("output index " + std::to_string(t) + " is not a tensor");
    outputs.push_back(g.tensors[t].name);
  }
  doc["outputs"] = outputs;
  return doc;
}

}  // namespace

StatusOr<std::string> graph_to_spec_json(const Graph& graph, int indent) {
  std::string where = "graph '" + graph.name + "'";
  // nlohmann's writer grows its indent buffer by doubling once per level: a step past its size overruns it
  // (found by a hostile trial: indent 100000 crashed).
  if (indent > kMaxSpecIndent)
    return invalid_argument(where + ": indent " + std::to_string(indent) + " is over the limit of " +
                            std::to_string(kMaxSpecIndent));
  try {
    StatusOr<Json> doc = graph_json(graph);
    if (!doc.is_ok()) return doc.status().with_context(where + ": cannot be written as a spec");
    return doc->dump(indent < 0 ? -1 : indent);
  } catch (const Json::exception& e) {  // type_error.316: a name that is not UTF-8
    return invalid_argument(where + ": cannot be written as a spec: " + e.what());
  }
}

}  // namespace kiln
