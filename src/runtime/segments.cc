// segments_if_unfusable / graph_segments (kiln/runtime/segments.h).
#include "kiln/runtime/segments.h"

#include <algorithm>

#include "kiln/lower/cudnn_limits.h"
#include "kiln/lower/plan_words.h"

namespace kiln {

StatusOr<std::vector<GraphPart>> graph_segments(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(std::vector<int> groups, cudnn_segment_groups(graph));
  return partition_graph(graph, groups, graph.intermediate_dtype);
}

StatusOr<SegmentDecision> segments_if_unfusable(const Graph& graph, cudnnHandle_t handle) {
  SegmentDecision d;
  // Past cuDNN's operations or entrance nodes per graph, the whole graph cannot be handed over: cut it
  // without asking.
  if (exceeds_cudnn_graph_limits(graph)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int> groups, cudnn_segment_groups(graph));
    KILN_ASSIGN_OR_RETURN(d.segments, partition_graph(graph, groups, graph.intermediate_dtype));
    d.why = check_cudnn_limits(graph).message();
    return d;
  }
  std::vector<int> groups = split_after_reductions(graph);
  if (std::all_of(groups.begin(), groups.end(), [](int g) { return g == 0; })) return d;
  LowerTarget target;
  target.handle = handle;
  auto lg = LoweredGraph::create(graph, target);
  Status why;
  if (lg.is_ok()) {
    auto c = lg->list_candidates({HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback});
    if (c.is_ok() && !c->empty()) return d;
    why = c.is_ok() ? not_supported("cuDNN offers no engine configuration for the whole graph") : c.status();
  } else {
    why = lg.status();
  }
  KILN_ASSIGN_OR_RETURN(d.segments, partition_graph(graph, groups, graph.intermediate_dtype));
  d.why = plan_failure_in_words(why, graph.name).message();
  return d;
}

}  // namespace kiln
