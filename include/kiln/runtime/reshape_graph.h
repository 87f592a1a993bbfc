// A validated graph at another value of its dynamic dims (what the Planner builds a new shape from).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// The graph at another shape: every dim with a symbol takes its new value, every tensor a node writes is
// inferred again (so derived extents follow), layouts give strides again. InvalidArgument naming the
// symbol or tensor when that cannot be done (an unknown or missing symbol, explicit strides on a dynamic
// tensor).
StatusOr<Graph> reshape_graph(const Graph& validated_graph, const std::map<std::string, int64_t>& shape);

}  // namespace kiln
