// kiln/decompose.h: the unfused alternative to a fused graph. Each node becomes a graph of its own whose
// inputs and outputs live in memory, as a framework running one kernel per op would keep them; the tuner
// times that chain against the fused graph (kiln/unfused.h).
#pragma once

#include <vector>

#include "kiln/graph.h"
#include "kiln/status.h"

namespace kiln {

struct GraphPart {
  Graph graph;                  // one node, validated; named "<graph>/<node>"
  std::vector<int> tensor_map;  // part tensor index -> tensor index in the original graph
};

// One part per node of a validated graph, in topological order. A tensor that was virtual in the fused
// graph (an intermediate) is materialized in memory with dtype `materialized` (e.g. the graph's io dtype,
// the precision an unfused framework would store it in); graph inputs and outputs keep their dtypes and
// layouts; by-value scalars stay by value. A part declares only the dynamic dims its tensors use.
// InvalidArgument when a part does not validate (the message names the part).
StatusOr<std::vector<GraphPart>> decompose_graph(const Graph& graph, DataType materialized);

}  // namespace kiln
