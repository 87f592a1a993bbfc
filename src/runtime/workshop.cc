// kiln::Workshop (kiln/runtime/workshop.h): the Planner's jobs over its backend (runtime/planner_jobs_internal.h).
#include "kiln/runtime/workshop.h"

#include "runtime/planner_jobs_internal.h"

namespace kiln {

StatusOr<TuneWork> Workshop::work_for(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(SegmentDecision seg, backend_.segments(graph));
  TuneWork work;
  if (seg.segments.empty()) {
    work.graphs.push_back(graph);
    return work;
  }
  work.segmented = seg.why;
  for (GraphPart& p : seg.segments) work.graphs.push_back(std::move(p.graph));
  return work;
}

StatusOr<TunedGraph> Workshop::tune(const Graph& graph, const TuneJob& job) {
  return planner_jobs::tune_and_store(backend_, options_, graph, job, forget_);
}

StatusOr<CompiledGraph> Workshop::compile(const Graph& graph, const std::optional<EngineConfig>& pin) {
  return planner_jobs::compile(backend_, options_, graph, pin, forget_);
}

StatusOr<RetuneReport> Workshop::retune_queued(const RetuneOptions& options) {
  return planner_jobs::retune_queued(backend_, options_, options, forget_);
}

}  // namespace kiln
