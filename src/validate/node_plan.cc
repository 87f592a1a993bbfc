#include "validate/node_plan.h"

#include <sstream>

#include "kiln/validate/host_tensor.h"

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

}  // namespace kiln::validate_internal
