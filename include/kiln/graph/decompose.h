// kiln/graph/decompose.h: the unfused alternative to a fused graph. Each node becomes a graph of its own whose
// inputs and outputs live in memory, as a framework running one kernel per op would keep them; the tuner
// times that chain against the fused graph (kiln/tune/unfused.h).
#pragma once

#include <cstdint>

#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

struct GraphPart {
  Graph graph;                  // validated; named "<graph>/<first node>" ("+N" when it has N more nodes)
  std::vector<int> tensor_map;  // part tensor index -> tensor index in the original graph
};

// One part per group of nodes (`group_of[node]` = its group number); parts run in ascending group number,
// so no node may read a tensor written by a later group (InvalidArgument naming the node). A tensor that
// crosses between groups and was virtual in `graph` is stored in memory with its declared dtype, or else
// `materialized`;
// tensors that stay inside a group stay virtual; graph inputs and outputs keep their dtypes and layouts.
StatusOr<std::vector<GraphPart>> partition_graph(const Graph& graph, const std::vector<int>& group_of,
                                                 DataType materialized);

// The decompositions `kiln tune` times against a fused graph (kiln/tune/unfused.h), as group numbers for
// partition_graph: first each node alone (decompose_graph's grouping), then, for a graph of three or more nodes, the
// graph cut once after each of its first N - 1 nodes in topological order (two parts: the nodes up to the cut, then
// the rest), so that a fused part may run beside a part of its own (a GEMM with its bias in cuBLASLt, then the GELU).
StatusOr<std::vector<std::vector<int>>> unfused_groupings(const Graph& graph);

// Group numbers that cut a graph after every reduction whose result another node reads: cuDNN 9.19 has
// no Hopper engine for a pointwise that consumes a reduction's output (the FP8 recipe's 448 / amax), so
// such a graph runs as fused segments (group 0: up to and including the reductions, ...). Likewise after an
// sdpa whose output another attention node (an sdpa_backward) reads: cuDNN runs each as one composite operation.
std::vector<int> split_after_reductions(const Graph& graph);

// Group numbers (for partition_graph) that cut a graph into pieces whose nodes' costs (`cost[node]`) sum to
// at most `budget`. `base` is a grouping to refine (e.g. split_after_reductions; all zeros for none): its
// groups are taken in ascending order, each in topological order, and a new group starts where the next
// node would not fit or the base group changes. A group also holds at most `shape.max_entrances` entrance
// nodes (none of whose inputs another node of the group writes), `shape.max_exits` exit nodes (whose
// output no other node of the group reads) and `shape.max_readers` nodes reading any one tensor: a node that
// would pass one starts a new group.
// InvalidArgument naming the node when one node alone costs more than `budget`. Used to cut graphs past
// cuDNN's operations, entrance nodes and exit nodes per graph (kiln/graph/limits.h).
struct GroupShape {
  int64_t max_entrances = INT64_MAX;
  int64_t max_exits = INT64_MAX;
  int64_t max_readers = INT64_MAX;
};
StatusOr<std::vector<int>> split_by_budget(const Graph& graph, const std::vector<int>& base,
                                           const std::vector<int64_t>& cost, int64_t budget,
                                           const GroupShape& shape = {});

// The entrance nodes of a validated graph (none of whose inputs another node writes: they read graph
// inputs only) and its exit nodes (whose output no node reads).
int64_t entrance_node_count(const Graph& graph);
int64_t exit_node_count(const Graph& graph);
// The most nodes reading any one tensor of a validated graph (a node reading it twice counts once).
int64_t max_tensor_readers(const Graph& graph);

// One part per node of a validated graph, in topological order. A tensor that was virtual in the fused
// graph (an intermediate) is materialized in memory with its declared dtype, or else `materialized` (e.g. the
// graph's io dtype, the precision an unfused framework would store it in); graph inputs and outputs keep their dtypes and
// layouts; by-value scalars stay by value. A part declares only the dynamic dims its tensors use.
// InvalidArgument when a part does not validate (the message names the part).
StatusOr<std::vector<GraphPart>> decompose_graph(const Graph& graph, DataType materialized);

}  // namespace kiln
