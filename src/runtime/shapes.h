// Shapes of one prepared graph: the graph at another shape, and how far apart two shapes are. Private to the
// runtime layer (the Planner's sources).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "kiln/runtime/plan_types.h"

namespace kiln::runtime_detail {

// The prepared graph at `shape` and its own signature (a structure whose derived extents are not symbolic
// changes with the shape: it is then looked up under its own structure).
Status graph_at(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, Graph* g, GraphSignature* sig);

// Distance between two shapes of one bucket: the sum of |log(a/b)| over their dims (the nearest tuned
// shape shares the most of its tiling choices with this one).
double shape_distance(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b);

// Milliseconds since `t0` (steady clock).
double ms_since(std::chrono::steady_clock::time_point t0);

}  // namespace kiln::runtime_detail
