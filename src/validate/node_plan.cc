#include "validate/node_plan.h"

#include <sstream>

#include "kiln/validate/host_tensor.h"
#include "validate/ops/reference_ops.h"

namespace kiln::validate_internal {

std::string dims_str(const std::vector<int64_t>& d) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? "," : "") << d[i];
  os << "]";
  return os.str();
}

std::string tensor_label(const Graph& g, int t) { return "'" + g.tensors[static_cast<size_t>(t)].name + "'"; }

std::vector<int64_t> tensor_dims(const Graph& g, int t) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  std::vector<int64_t> v;
  v.reserve(d.dims.size());
  for (const Dim& x : d.dims) v.push_back(x.value);
  if (v.empty() && d.by_value) v.push_back(1);
  return v;
}

std::vector<int64_t> tensor_strides(const Graph& g, int t) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  auto dims = tensor_dims(g, t);
  if (d.strides.size() == dims.size() && !dims.empty()) return d.strides;
  return row_major_strides(dims);
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

std::string node_label(const Graph& g, int node) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  return "node '" + n.name + "' (" + op_kind_name(n.op) + ")";
}

StatusOr<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return invalid_argument("dims " + dims_str(in) + " do not broadcast to " + dims_str(out));
  const auto packed = row_major_strides(in);
  std::vector<int64_t> s(out.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t oi = out.size() - in.size() + i;
    if (in[i] == out[oi]) s[oi] = in[i] == 1 ? 0 : packed[i];
    else if (in[i] != 1) return invalid_argument("dims " + dims_str(in) + " do not broadcast to " + dims_str(out));
  }
  return s;
}

StatusOr<NodePlan> plan_node(const Graph& g, int node_index) {
  const Node& node = g.nodes[static_cast<size_t>(node_index)];
  const std::string where = node_label(g, node_index);
  NodePlan p;
  p.node = node_index;
  p.op = node.op;
  size_t want_in = 0;
  switch (node.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad:
    case OpKind::kMatmul: want_in = 2; break;
    case OpKind::kReduction: want_in = 1; break;
    case OpKind::kSdpa: want_in = 3; break;
    default: want_in = node.inputs.size(); break;  // checked per op below
  }
  if (node.inputs.size() != want_in)
    return invalid_argument(where + ": expected " + std::to_string(want_in) + " inputs, got " +
                            std::to_string(node.inputs.size()));
  if (node.outputs.size() != 1) return invalid_argument(where + ": expected 1 output");
  std::vector<int> all = node.inputs;
  all.push_back(node.outputs[0]);
  for (int t : all) {
    if (t < 0 || static_cast<size_t>(t) >= g.tensors.size())
      return invalid_argument(where + ": tensor index " + std::to_string(t) + " out of range");
    const auto d = tensor_dims(g, t);
    if (d.empty()) return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has no dims");
    for (int64_t v : d)
      if (v <= 0)
        return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has non-positive dims " + dims_str(d));
    const auto& s = g.tensors[static_cast<size_t>(t)].strides;
    if (!s.empty() && s.size() != d.size())
      return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has " + std::to_string(s.size()) +
                              " strides for " + std::to_string(d.size()) + " dims");
    for (int64_t v : s)
      if (v < 0) return invalid_argument(where + ": tensor " + tensor_label(g, t) + " has a negative stride");
  }
  KILN_RETURN_IF_ERROR(reference_family(node.op).plan(g, node, where, p));
  return p;
}

}  // namespace kiln::validate_internal
