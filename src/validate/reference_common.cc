#include "validate/reference_common.h"

#include <cmath>

#include "kiln/reference.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

StatusOr<PreparedGraph> prepare_graph(const Graph& g) {
  PreparedGraph p;
  KILN_ASSIGN_OR_RETURN(p.order, topological_order(g));
  for (int n : p.order) {
    KILN_ASSIGN_OR_RETURN(NodePlan plan, plan_node(g, n));
    p.macs += plan.macs;
    p.plans.push_back(std::move(plan));
  }
  return p;
}

StatusOr<std::map<int, std::vector<double>>> load_inputs(const Graph& g, const std::map<int, HostTensor>& inputs) {
  const auto prod = producers(g);
  std::vector<bool> needed(g.tensors.size(), false);
  for (const Node& n : g.nodes)
    for (int t : n.inputs) needed[static_cast<size_t>(t)] = true;
  for (int t : g.outputs) needed[static_cast<size_t>(t)] = true;
  std::map<int, std::vector<double>> values;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    if (prod[i] >= 0 || !needed[i]) continue;
    const TensorDesc& desc = g.tensors[i];
    const auto dims = tensor_dims(g, t);
    const DataType dt = dtype_of(g, t);
    auto it = inputs.find(t);
    std::vector<double> v;
    if (it != inputs.end()) {
      if (it->second.dims != dims) {
        return invalid_argument("input '" + desc.name + "': given dims do not match the graph's (" +
                                it->second.describe() + " given)");
      }
      if (it->second.strides.size() != it->second.dims.size() ||
          static_cast<int64_t>(it->second.storage.size()) < it->second.storage_span())
        return invalid_argument("input '" + desc.name + "': storage does not cover its strides");
      v = it->second.values();
    } else if (desc.by_value) {
      v.assign(static_cast<size_t>(product(dims)), desc.value);
    } else {
      return invalid_argument("input '" + desc.name + "' (tensor " + std::to_string(t) + ") has no value");
    }
    for (double& x : v) x = round_to_dtype(x, dt);
    values[t] = std::move(v);
  }
  return values;
}

StatusOr<std::vector<HostTensor>> make_outputs(const Graph& g, const std::map<int, std::vector<double>>& values) {
  std::vector<HostTensor> out;
  for (int t : g.outputs) {
    auto it = values.find(t);
    if (it == values.end())
      return internal_error("output '" + g.tensors[static_cast<size_t>(t)].name + "' was not computed");
    HostTensor h = HostTensor::zeros(dtype_of(g, t), tensor_dims(g, t), tensor_strides(g, t));
    h.set_values(it->second);
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<std::vector<HostTensor>> make_magnitude_outputs(const Graph& g,
                                                         const std::map<int, std::vector<double>>& magnitudes) {
  std::vector<HostTensor> out;
  for (int t : g.outputs) {
    auto it = magnitudes.find(t);
    if (it == magnitudes.end())
      return internal_error("the magnitude of output '" + g.tensors[static_cast<size_t>(t)].name + "' was not computed");
    HostTensor h = HostTensor::zeros(DataType::kFloat32, tensor_dims(g, t), tensor_strides(g, t));
    h.set_values(it->second);
    out.push_back(std::move(h));
  }
  return out;
}

double pointwise_apply(PointwiseMode mode, double a, double b) { return pointwise_value(mode, a, b); }

}  // namespace kiln::validate_internal

namespace kiln {

const char* reference_kind_name(ReferenceKind k) { return k == ReferenceKind::kHost ? "host" : "device"; }

StatusOr<double> estimate_macs(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(auto p, validate_internal::prepare_graph(graph));
  return p.macs;
}

namespace {
StatusOr<std::map<int, HostTensor>> make_random_inputs_unchecked(const Graph& g, uint64_t seed);
}  // namespace

StatusOr<std::map<int, HostTensor>> make_random_inputs(const Graph& g, uint64_t seed) {
  // One host buffer per input, sized by the graph: a graph too large for this host is a Status.
  return catch_exceptions("graph '" + g.name + "': making random inputs",
                          [&] { return make_random_inputs_unchecked(g, seed); });
}

namespace {
StatusOr<std::map<int, HostTensor>> make_random_inputs_unchecked(const Graph& g, uint64_t seed) {
  using namespace validate_internal;
  KILN_RETURN_IF_ERROR(topological_order(g).status());
  const auto prod = producers(g);
  // The range a tensor needs, from the first consumer that cares.
  std::vector<std::pair<double, double>> range(g.tensors.size(), {-1.0, 1.0});
  std::vector<bool> used(g.tensors.size(), false);
  for (const Node& n : g.nodes) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const size_t t = static_cast<size_t>(n.inputs[i]);
      used[t] = true;
      if ((n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) && i == 1) range[t] = {0.5, 1.5};
      if (n.op == OpKind::kLayerNorm && i == 2) range[t] = {-0.5, 0.5};
      if (n.op == OpKind::kPointwise && i == 1 && n.pointwise.mode == PointwiseMode::kBiasAdd) range[t] = {-0.5, 0.5};
      if (n.op == OpKind::kPointwise && i == 1 && n.pointwise.mode == PointwiseMode::kDiv) range[t] = {0.5, 1.5};
    }
  }
  for (int t : g.outputs) used[static_cast<size_t>(t)] = true;
  std::map<int, HostTensor> out;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    if (prod[i] >= 0 || !used[i]) continue;
    const int t = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    HostTensor h = HostTensor::zeros(dtype_of(g, t), tensor_dims(g, t), tensor_strides(g, t));
    if (d.by_value) {
      h.set_values(std::vector<double>(static_cast<size_t>(h.element_count()), d.value));
    } else {
      // Mix the tensor index into the seed (splitmix-style odd constant) so each tensor has its own stream.
      h.fill_uniform(seed ^ (0x9E3779B97F4A7C15ull * (i + 1)), range[i].first, range[i].second);
    }
    out.emplace(t, std::move(h));
  }
  return out;
}
}  // namespace

}  // namespace kiln
