// partition_graph / decompose_graph / split_after_reductions (kiln/graph/decompose.h).
#include "kiln/graph/decompose.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/validate_internal.h"
#include "kiln/core/hash.h"
#include "kiln/graph/limits.h"

namespace kiln {
namespace {

// The graph of the nodes in `group` (in topological order): tensors crossing the group's boundary are its
// inputs and outputs, the rest stay virtual.
// Per tensor, the lowest and highest group that reads it (-1: none), so that "does it leave its group"
// costs O(1) per tensor rather than a scan of every node.
struct ReaderGroups {
  std::vector<int> lo, hi;
  ReaderGroups(const Graph& graph, const std::vector<int>& group_of)
      : lo(graph.tensors.size(), -1), hi(graph.tensors.size(), -1) {
    for (size_t ni = 0; ni < graph.nodes.size(); ++ni)
      for (int t : graph.nodes[ni].inputs) {
        const size_t ti = static_cast<size_t>(t);
        if (lo[ti] < 0 || group_of[ni] < lo[ti]) lo[ti] = group_of[ni];
        hi[ti] = std::max(hi[ti], group_of[ni]);
      }
  }
  bool read_outside(int t, int group) const {
    const size_t ti = static_cast<size_t>(t);
    return lo[ti] >= 0 && (lo[ti] != group || hi[ti] != group);
  }
};

StatusOr<GraphPart> make_part(const Graph& graph, const GraphRoles& roles, const ReaderGroups& readers,
                              const std::vector<int>& group, const std::vector<int>& group_of, DataType materialized) {
  GraphPart part;
  Graph& g = part.graph;
  g.name = graph.name + "/" + graph.nodes[static_cast<size_t>(group.front())].name;
  if (group.size() > 1) g.name += "+" + std::to_string(group.size() - 1);
  // Within the name limit however long the graph's and node's names are (each may be the limit itself): a
  // prefix, then a hash of the whole name so that parts stay distinct.
  if (g.name.size() > limits::kMaxNameBytes) {
    const std::string tail = "~" + hex64(stable_hash64(g.name));
    g.name = g.name.substr(0, limits::kMaxNameBytes - tail.size()) + tail;
  }
  g.io_dtype = graph.io_dtype;
  g.intermediate_dtype = graph.intermediate_dtype;
  g.compute_dtype = graph.compute_dtype;
  g.dynamic_dims.clear();
  const int me = group_of[static_cast<size_t>(group.front())];
  // A tensor written in this group leaves it when the caller reads it or another group consumes it.
  auto leaves = [&](int t) { return roles.is_graph_output(t) || readers.read_outside(t, me); };
  std::map<int, int> local;  // original tensor -> part tensor
  auto add = [&](int t) {
    auto it = local.find(t);
    if (it != local.end()) return it->second;
    TensorDesc d = graph.tensors[static_cast<size_t>(t)];
    const int producer = roles.producer(t);
    const bool inside = producer >= 0 && group_of[static_cast<size_t>(producer)] == me;
    if (!roles.is_virtual(t)) d.dtype = roles.dtype_of(t);
    // Crosses the boundary: stored in memory, in the dtype the author declared (an sdpa's fp32 statistics, a bf16 o
    // a backward reads) or else `materialized`.
    else if (!inside || leaves(t)) d.dtype = graph.tensors[static_cast<size_t>(t)].dtype.value_or(materialized);
    int idx = static_cast<int>(g.tensors.size());
    g.tensors.push_back(std::move(d));
    part.tensor_map.push_back(t);
    local.emplace(t, idx);
    return idx;
  };
  for (int ni : group) {
    Node n = graph.nodes[static_cast<size_t>(ni)];
    for (int& t : n.inputs) t = add(t);
    for (int& t : n.outputs) t = add(t);
    if (!n.compute_dtype) n.compute_dtype = graph.compute_dtype;
    g.nodes.push_back(std::move(n));
  }
  for (int ni : group)
    for (int t : graph.nodes[static_cast<size_t>(ni)].outputs)
      if (leaves(t)) g.outputs.push_back(local.at(t));
  std::set<std::string> symbols;
  for (const TensorDesc& d : g.tensors)
    for (const Dim& dim : d.dims)
      if (dim.is_dynamic()) symbols.insert(dim.symbol);
  for (const std::string& s : symbols) {
    auto it = graph.dynamic_dims.find(s);
    if (it == graph.dynamic_dims.end())
      return invalid_argument("graph '" + graph.name + "': dynamic dim '" + s + "' is not declared");
    g.dynamic_dims[s] = it->second;
  }
  // A part's inputs have extents of their own (a derived dim of the graph is a number here); what the part
  // writes is inferred again.
  for (TensorDesc& d : g.tensors)
    for (Dim& dim : d.dims) dim.derived = false;
  Status st = validate_graph(g);
  if (!st.is_ok()) return st.with_context("part '" + g.name + "'");
  return part;
}

}  // namespace

StatusOr<std::vector<GraphPart>> partition_graph(const Graph& graph, const std::vector<int>& group_of,
                                                 DataType materialized) {
  if (group_of.size() != graph.nodes.size())
    return invalid_argument("partition of graph '" + graph.name + "': " + std::to_string(group_of.size()) +
                            " group numbers for " + std::to_string(graph.nodes.size()) + " nodes");
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(graph, &order));
  const GraphRoles roles(graph);
  // Groups must be runnable one after another in ascending number: no node may read a later group.
  for (size_t ni = 0; ni < graph.nodes.size(); ++ni)
    for (int t : graph.nodes[ni].inputs)
      if (int p = roles.producer(t); p >= 0 && group_of[static_cast<size_t>(p)] > group_of[ni])
        return invalid_argument("partition of graph '" + graph.name + "': node '" + graph.nodes[ni].name + "' reads '" +
                                graph.tensors[static_cast<size_t>(t)].name + "' from a later group");
  std::map<int, std::vector<int>> groups;  // ascending group number; nodes in topological order
  for (int ni : order) groups[group_of[static_cast<size_t>(ni)]].push_back(ni);
  const ReaderGroups readers(graph, group_of);
  std::vector<GraphPart> parts;
  for (const auto& [number, nodes] : groups) {
    KILN_ASSIGN_OR_RETURN(GraphPart p, make_part(graph, roles, readers, nodes, group_of, materialized));
    parts.push_back(std::move(p));
  }
  return parts;
}

StatusOr<std::vector<GraphPart>> decompose_graph(const Graph& graph, DataType materialized) {
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(graph, &order));
  std::vector<int> group_of(graph.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) group_of[static_cast<size_t>(order[i])] = static_cast<int>(i);
  return partition_graph(graph, group_of, materialized);
}

StatusOr<std::vector<std::vector<int>>> unfused_groupings(const Graph& graph) {
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(graph, &order));
  std::vector<std::vector<int>> out(1, std::vector<int>(graph.nodes.size()));
  for (size_t i = 0; i < order.size(); ++i) out[0][static_cast<size_t>(order[i])] = static_cast<int>(i);
  if (order.size() < 3) return out;
  for (size_t cut = 1; cut < order.size(); ++cut) {
    std::vector<int> g(graph.nodes.size());
    for (size_t i = 0; i < order.size(); ++i) g[static_cast<size_t>(order[i])] = i < cut ? 0 : 1;
    out.push_back(std::move(g));
  }
  return out;
}

int64_t entrance_node_count(const Graph& graph) {
  const GraphRoles roles(graph);
  int64_t n = 0;
  for (const Node& node : graph.nodes)
    n += std::all_of(node.inputs.begin(), node.inputs.end(), [&](int t) { return roles.producer(t) < 0; }) ? 1 : 0;
  return n;
}

int64_t exit_node_count(const Graph& graph) {
  const GraphRoles roles(graph);
  int64_t n = 0;
  for (const Node& node : graph.nodes)
    n += std::all_of(node.outputs.begin(), node.outputs.end(), [&](int t) { return roles.consumer_count(t) == 0; }) ? 1
                                                                                                                    : 0;
  return n;
}

int64_t max_tensor_readers(const Graph& graph) {
  std::map<int, int64_t> readers;
  int64_t most = 0;
  for (const Node& node : graph.nodes)
    for (int t : std::set<int>(node.inputs.begin(), node.inputs.end())) most = std::max(most, ++readers[t]);
  return most;
}

std::vector<int> split_after_reductions(const Graph& graph) {
  std::vector<int> order;
  std::vector<int> group_of(graph.nodes.size(), 0);
  if (!graph_internal::topological_order(graph, &order).is_ok()) return group_of;
  const GraphRoles roles(graph);
  for (int ni : order) {
    int s = 0;
    for (int t : graph.nodes[static_cast<size_t>(ni)].inputs) {
      const int p = roles.producer(t);
      if (p < 0) continue;
      const OpKind from = graph.nodes[static_cast<size_t>(p)].op, to = graph.nodes[static_cast<size_t>(ni)].op;
      const bool reduction = from == OpKind::kReduction;
      // An attention node reading another's output (a backward pass reading its forward's o and statistics):
      // each is one composite cuDNN operation, and cuDNN offers no graph of two.
      s = std::max(s,
                   group_of[static_cast<size_t>(p)] + (reduction || (is_attention(from) && is_attention(to)) ? 1 : 0));
    }
    group_of[static_cast<size_t>(ni)] = s;
  }
  return group_of;
}

}  // namespace kiln

namespace kiln {

StatusOr<std::vector<int>> split_by_budget(const Graph& graph, const std::vector<int>& base,
                                           const std::vector<int64_t>& cost, int64_t budget, const GroupShape& shape) {
  if (base.size() != graph.nodes.size() || cost.size() != graph.nodes.size())
    return invalid_argument("split of graph '" + graph.name + "': " + std::to_string(base.size()) +
                            " group numbers and " + std::to_string(cost.size()) + " costs for " +
                            std::to_string(graph.nodes.size()) + " nodes");
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(graph, &order));
  // Inside one base group a node's producers come earlier in the topological order, and a base group
  // only reads lower ones, so taking base groups in ascending order keeps every group runnable in turn.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return base[static_cast<size_t>(a)] < base[static_cast<size_t>(b)]; });
  const GraphRoles roles(graph);
  std::vector<int> group(graph.nodes.size(), -1);
  std::vector<char> read_in_group(graph.nodes.size(), 0);  // a node of its own group reads its output
  std::map<int, int64_t> readers;                          // tensor -> nodes of the current group reading it
  int current = 0;
  int current_base = order.empty() ? 0 : base[static_cast<size_t>(order.front())];
  int64_t used = 0, entrances = 0, exits = 0;
  bool empty = true;
  for (int ni : order) {
    const size_t i = static_cast<size_t>(ni);
    if (cost[i] > budget)
      return invalid_argument("split of graph '" + graph.name + "': node '" + graph.nodes[i].name + "' alone costs " +
                              std::to_string(cost[i]) + ", over the budget of " + std::to_string(budget));
    // In the current group: whether no input is written by a node already in it, and how many of its exit
    // nodes this one reads (they stop being exits).
    std::set<int> reads_exits;
    bool entrance = true;
    for (int t : graph.nodes[i].inputs) {
      const int p = roles.producer(t);
      if (p < 0 || group[static_cast<size_t>(p)] != current) continue;
      entrance = false;
      if (!read_in_group[static_cast<size_t>(p)]) reads_exits.insert(p);
    }
    const int64_t exits_after = exits + 1 - static_cast<int64_t>(reads_exits.size());
    const std::set<int> inputs(graph.nodes[i].inputs.begin(), graph.nodes[i].inputs.end());
    bool too_many_readers = false;
    for (int t : inputs) too_many_readers = too_many_readers || readers[t] + 1 > shape.max_readers;
    if (base[i] != current_base || used + cost[i] > budget || (entrance && entrances + 1 > shape.max_entrances) ||
        exits_after > shape.max_exits || too_many_readers) {
      if (!empty) ++current;
      current_base = base[i];
      used = entrances = exits = 0;
      entrance = true;  // a new group: whatever the node reads comes from outside it
      reads_exits.clear();
      readers.clear();
    }
    for (int t : inputs) ++readers[t];
    for (int p : reads_exits) read_in_group[static_cast<size_t>(p)] = 1;
    group[i] = current;
    used += cost[i];
    entrances += entrance ? 1 : 0;
    exits += 1 - static_cast<int64_t>(reads_exits.size());
    empty = false;
  }
  return group;
}

}  // namespace kiln
