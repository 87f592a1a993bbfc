// compute_signature: the canonical text form of a validated graph and its hash (docs/spec.md "Signatures").
//
// Order: graph outputs are sorted by a structural key (a Merkle-style hash of everything that computes
// them, names left out), then the graph is walked depth-first from each output, inputs in operand order,
// and every tensor and node gets a canonical id (t0, t1, ..., n0, n1, ...) when it is first emitted.
// Dynamic symbols become $0, $1, ... in order of first appearance in that text.
#include <algorithm>

#include "graph/ops/op_family.h"
#include "kiln/graph/ops/families.h"
#include "graph/validate_internal.h"
#include "kiln/core/hash.h"

namespace kiln {
namespace {

// Renders dynamic dims: `canonical` assigns $k names; otherwise every symbol prints as "?".
class SymbolNamer {
 public:
  std::string name(const std::string& symbol) {
    for (size_t i = 0; i < order_.size(); ++i)
      if (order_[i] == symbol) return "$" + std::to_string(i);
    order_.push_back(symbol);
    return "$" + std::to_string(order_.size() - 1);
  }
  const std::vector<std::string>& order() const { return order_; }

 private:
  std::vector<std::string> order_;
};

// A dim a node derives from the symbols (Dim::derived, e.g. a conv's output extent) is written "~": the
// inputs' dims and the nodes' attributes determine it, so the structure covers every value of the symbols.
// Only on node-written tensors: a graph input's extent is its own.
std::string tensor_text(const Graph& g, const GraphRoles& roles, int t, SymbolNamer* namer) {
  const TensorDesc& d = g.tensors[t];
  const bool written = !roles.is_graph_input(t);
  std::string s = std::string("dtype=") + dtype_name(roles.dtype_of(t)) + " dims=[";
  for (size_t i = 0; i < d.dims.size(); ++i) {
    if (i) s += ",";
    if (d.dims[i].is_dynamic()) s += namer ? namer->name(d.dims[i].symbol) : "?";
    else if (written && d.dims[i].derived) s += "~";
    else s += std::to_string(d.dims[i].value);
  }
  s += "]";
  if (d.layout == Layout::kExplicit) s += " strides=" + graph_internal::ints_text(d.strides);
  else s += std::string(" layout=") + layout_name(d.layout);
  // A by-value scalar's value is part of the computation: cuDNN Frontend bakes it into the plan it builds (the
  // frontend passes it itself at execution), so two graphs that differ only in it must never share a plan.
  // Written as the float lowering hands over, so values that round to one float share one.
  if (d.by_value)
    s += " by_value=" + graph_internal::canonical_number(static_cast<double>(static_cast<float>(d.value)));
  return s;
}

std::string node_text(const Graph& g, const Node& n) {
  std::string s = node_op_name(n);
  s += std::string(" compute=") + dtype_name(n.compute_dtype ? *n.compute_dtype : g.compute_dtype);
  return s + graph_internal::op_family(n.op).signature_attrs(g, n);
}

}  // namespace

StatusOr<GraphSignature> compute_signature(const Graph& g) {
  // The graph must be validated: check what this function relies on rather than crash on a raw graph.
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> writer(nt, -1);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    size_t lo = 1, hi = 1;
    node_output_arity(n, &lo, &hi);
    if (n.outputs.size() < lo || n.outputs.size() > hi)
      return failed_precondition("compute_signature: graph is not validated");
    for (int t : n.inputs)
      if (t < 0 || t >= nt) return failed_precondition("compute_signature: graph is not validated");
    for (int o : n.outputs) {
      if (o < 0 || o >= nt || writer[o] >= 0) return failed_precondition("compute_signature: graph is not validated");
      writer[o] = static_cast<int>(ni);
    }
  }
  if (g.outputs.empty()) return failed_precondition("compute_signature: graph has no outputs");
  for (int t : g.outputs)
    if (t < 0 || t >= nt) return failed_precondition("compute_signature: graph is not validated");
  for (const Node& n : g.nodes) {
    if (is_attention(n.op) && (n.inputs.empty() || g.tensors[n.inputs[0]].dims.size() != 4))
      return failed_precondition("compute_signature: graph is not validated");
  }
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(g, &order));
  const GraphRoles roles(g);

  // Structural keys, names and symbol names left out, in topological order.
  std::vector<std::string> key(nt);
  for (int t = 0; t < nt; ++t)
    if (writer[t] < 0) key[t] = hex64(stable_hash64("I|" + tensor_text(g, roles, t, nullptr)));
  for (int ni : order) {
    const Node& n = g.nodes[ni];
    std::string k = "N|" + node_text(g, n) + "|";
    for (int t : n.inputs) k += key[t] + ",";
    for (int o : n.outputs) k += "|" + tensor_text(g, roles, o, nullptr);
    // A node's first output keys as a one-output node's did; a further output adds its place.
    for (size_t o = 0; o < n.outputs.size(); ++o)
      key[n.outputs[o]] = hex64(stable_hash64(o == 0 ? k : k + "#" + std::to_string(o)));
  }

  std::vector<int> outs = g.outputs;
  std::stable_sort(outs.begin(), outs.end(), [&](int a, int b) { return key[a] < key[b]; });

  // Depth-first emission from the sorted outputs (iterative: graphs may be deep).
  SymbolNamer namer;
  std::vector<int> tensor_id(nt, -1);
  int next_tensor = 0, next_node = 0;
  std::string text = "kiln-graph 1\n";
  std::vector<int> out_pos(static_cast<size_t>(nt), -1);  // first place in the sorted outputs
  for (size_t i = outs.size(); i-- > 0;) out_pos[static_cast<size_t>(outs[i])] = static_cast<int>(i);
  auto role = [&](int t) -> std::string {
    if (out_pos[static_cast<size_t>(t)] >= 0) return "output " + std::to_string(out_pos[static_cast<size_t>(t)]);
    return writer[t] < 0 ? "input" : "virtual";
  };
  auto tid = [&](int t) { return "t" + std::to_string(tensor_id[t]); };
  for (int root : outs) {
    std::vector<std::pair<int, size_t>> stack = {{root, 0}};  // tensor, next operand to visit
    while (!stack.empty()) {
      auto& [t, next] = stack.back();
      if (tensor_id[t] >= 0) {
        stack.pop_back();
        continue;
      }
      if (writer[t] < 0) {
        tensor_id[t] = next_tensor++;
        text += "tensor " + tid(t) + " " + role(t) + " " + tensor_text(g, roles, t, &namer) + "\n";
        stack.pop_back();
        continue;
      }
      const Node& n = g.nodes[writer[t]];
      if (next < n.inputs.size()) {
        int in = n.inputs[next++];
        if (tensor_id[in] < 0) stack.push_back({in, 0});
        continue;
      }
      // Every output of the node at once, in the node's order (one output reads as it always has: "out=t3").
      for (int o : n.outputs) tensor_id[o] = next_tensor++;
      text += "node n" + std::to_string(next_node++) + " " + node_text(g, n) + " in=[";
      for (size_t i = 0; i < n.inputs.size(); ++i) text += (i ? "," : "") + tid(n.inputs[i]);
      text += "] out=";
      for (size_t o = 0; o < n.outputs.size(); ++o) text += (o ? "," : "") + tid(n.outputs[o]);
      text += "\n";
      for (int o : n.outputs)
        text += "tensor " + tid(o) + " " + role(o) + " " + tensor_text(g, roles, o, &namer) + "\n";
      stack.pop_back();
    }
  }

  GraphSignature sig;
  sig.canonical = text;
  sig.structure = stable_hash128_hex(text);
  sig.tensor_ids = tensor_id;
  for (const std::string& sym : namer.order()) {
    auto it = g.dynamic_dims.find(sym);
    int64_t v = it == g.dynamic_dims.end() ? 0 : it->second;
    sig.shape_key += (sig.shape_key.empty() ? "" : ",") + sym + "=" + std::to_string(v);
  }
  return sig;
}

namespace {

// True when every piece of the canonical text (tensor by tensor, node by node) reads the same for both graphs:
// the same dtypes, layouts and strides, every dim either dynamic in both (the symbol is written, not the
// value), derived in both where written ("~"), or the same value, and the same node text (attributes that
// read an extent, such as an SDPA's default scale from a dynamic head dim, are compared as written).
bool same_canonical_text(const Graph& a, const Graph& b) {
  if (a.io_dtype != b.io_dtype || a.intermediate_dtype != b.intermediate_dtype || a.compute_dtype != b.compute_dtype ||
      a.tensors.size() != b.tensors.size() || a.nodes.size() != b.nodes.size() || a.outputs != b.outputs)
    return false;
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    const TensorDesc& x = a.tensors[t];
    const TensorDesc& y = b.tensors[t];
    if (x.dtype != y.dtype || x.layout != y.layout || x.by_value != y.by_value || x.dims.size() != y.dims.size())
      return false;
    if (x.layout == Layout::kExplicit && x.strides != y.strides) return false;
    for (size_t i = 0; i < x.dims.size(); ++i) {
      const Dim& dx = x.dims[i];
      const Dim& dy = y.dims[i];
      if (dx.symbol != dy.symbol || dx.derived != dy.derived) return false;
      if (!dx.is_dynamic() && !dx.derived && dx.value != dy.value) return false;
    }
  }
  for (size_t n = 0; n < a.nodes.size(); ++n) {
    const Node& x = a.nodes[n];
    const Node& y = b.nodes[n];
    if (x.op != y.op || x.inputs != y.inputs || x.outputs != y.outputs || node_text(a, x) != node_text(b, y))
      return false;
  }
  return true;
}

}  // namespace

StatusOr<GraphSignature> reshaped_signature(const Graph& base, const GraphSignature& base_sig, const Graph& reshaped) {
  if (!same_canonical_text(base, reshaped)) return compute_signature(reshaped);
  GraphSignature sig;
  sig.structure = base_sig.structure;
  sig.canonical = base_sig.canonical;
  sig.tensor_ids = base_sig.tensor_ids;
  // The base's shape key names the symbols in canonical order: the same order, the new values.
  size_t at = 0;
  while (at < base_sig.shape_key.size()) {
    size_t comma = base_sig.shape_key.find(',', at);
    if (comma == std::string::npos) comma = base_sig.shape_key.size();
    const size_t eq = base_sig.shape_key.find('=', at);
    if (eq == std::string::npos || eq > comma) return compute_signature(reshaped);
    const std::string sym = base_sig.shape_key.substr(at, eq - at);
    auto it = reshaped.dynamic_dims.find(sym);
    if (it == reshaped.dynamic_dims.end()) return compute_signature(reshaped);
    sig.shape_key += (sig.shape_key.empty() ? "" : ",") + sym + "=" + std::to_string(it->second);
    at = comma + 1;
  }
  return sig;
}

}  // namespace kiln
