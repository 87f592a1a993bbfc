// check_graph_limits (kiln/graph/limits.h): what a graph may hold, checked before any other validation work.
#include "kiln/graph/limits.h"

namespace kiln {
namespace {

std::string over(const std::string& what, size_t got, int64_t limit, const char* unit) {
  return what + ": " + std::to_string(got) + " " + unit + ", over the limit of " + std::to_string(limit) +
         " (docs/spec.md \"Limits\")";
}

// A name too long to print whole is shown by its first bytes.
std::string shown(const std::string& name) {
  return name.size() <= 40 ? "'" + name + "'" : "'" + name.substr(0, 40) + "...'";
}

Status check_name(const std::string& what, const std::string& name) {
  if (name.size() <= limits::kMaxNameBytes) return Status::ok();
  return invalid_argument(
      over(what + " " + shown(name) + ": name", name.size(), static_cast<int64_t>(limits::kMaxNameBytes), "bytes"));
}

}  // namespace

Status check_graph_limits(const Graph& g) {
  if (static_cast<int64_t>(g.nodes.size()) > limits::kMaxNodes)
    return invalid_argument(over("graph", g.nodes.size(), limits::kMaxNodes, "nodes"));
  if (static_cast<int64_t>(g.tensors.size()) > limits::kMaxTensors)
    return invalid_argument(over("graph", g.tensors.size(), limits::kMaxTensors, "tensors"));
  if (static_cast<int64_t>(g.dynamic_dims.size()) > limits::kMaxDynamicDims)
    return invalid_argument(over("graph", g.dynamic_dims.size(), limits::kMaxDynamicDims, "dynamic dims"));
  KILN_RETURN_IF_ERROR(check_name("graph", g.name));
  if (g.pin.size() > limits::kMaxNameBytes)
    return invalid_argument(
        over("graph " + shown(g.name) + ": pin", g.pin.size(), static_cast<int64_t>(limits::kMaxNameBytes), "bytes"));
  for (const auto& [symbol, value] : g.dynamic_dims) KILN_RETURN_IF_ERROR(check_name("dynamic dim", symbol));
  for (const TensorDesc& t : g.tensors) {
    KILN_RETURN_IF_ERROR(check_name("tensor", t.name));
    if (t.dims.size() > limits::kMaxRank)
      return invalid_argument(
          over("tensor '" + t.name + "'", t.dims.size(), static_cast<int64_t>(limits::kMaxRank), "dims") +
          "; cuDNN takes at most " + std::to_string(limits::kCudnnDimMax) + " (CUDNN_DIM_MAX)");
    if (t.strides.size() > limits::kMaxRank)
      return invalid_argument(
          over("tensor '" + t.name + "'", t.strides.size(), static_cast<int64_t>(limits::kMaxRank), "strides"));
    for (const Dim& d : t.dims) KILN_RETURN_IF_ERROR(check_name("tensor '" + t.name + "': dynamic dim", d.symbol));
  }
  for (const Node& n : g.nodes) KILN_RETURN_IF_ERROR(check_name("node", n.name));
  return Status::ok();
}

}  // namespace kiln
