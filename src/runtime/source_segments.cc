// The segments source (runtime/plan_sources.h SegmentsSource): a graph cuDNN cannot fuse whole, run as its fused
// segments.
#include <set>
#include <string>

#include "kiln/runtime/unfused_plan.h"
#include "runtime/plan_sources.h"

namespace kiln::runtime_detail {

StatusOr<bool> SegmentsSource::serve(SourceRequest& r, Built* out) {
  if (state_.known_fusable(r.sig.structure)) return false;
  KILN_ASSIGN_OR_RETURN(SegmentDecision seg, state_.backend().segments(r.g));
  if (seg.segments.empty()) {
    state_.note_fusable(r.sig.structure);
    return false;
  }
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  std::string list;
  std::set<std::string> queued;  // the segments' keys queued by this serve
  for (const GraphPart& part : seg.segments) {
    const std::string where = "graph '" + r.g.name + "', segment '" + part.graph.name + "'";
    StatusOr<PreparedGraph> ppg = prepare_graph(part.graph);
    if (!ppg.is_ok()) return ppg.status().with_context(where);
    // Static plans only (store, bucket, heuristics): the chain is held whole and never promoted, so a stopgap in
    // it would stay. The store's mismatch policy is not the segment's: its miss is queued below.
    StatusOr<Built> got = chain_.build(*ppg, ppg->shape, /*allow_stopgap=*/false);
    if (!got.is_ok()) return got.status().with_context(where);
    // Each segment passes the gate (first use) before the chain made of them may serve.
    KILN_RETURN_IF_ERROR(state_.first_use().admit(*got->plan, got->source, part.graph.name).with_context(where));
    // A segment the store has no plan for is queued for re-tune as a graph of its own, as the whole graph's miss
    // would be: a worker tunes it, and the next Planner serves the chain of stored segments. At the graph's own
    // shape only, as for a whole graph: other shapes are the recorder's (a dynamic graph would otherwise queue
    // its segments at every shape it meets).
    const PlannerOptions& o = state_.options();
    if (got->plan->built_from() != PlanSource::kStore && o.policy.on_mismatch == MismatchPolicy::kHeuristicsAndQueue &&
        !o.store_path.empty() && r.shape == r.pg.shape &&
        queued.insert(ppg->signature.structure + "|" + ppg->signature.shape_key).second) {  // a repeated segment once
      std::string note;
      state_.backend().queue_retune(part.graph, ppg->signature, "miss, a segment of graph '" + r.g.name + "'", &note);
      if (!note.empty()) r.why.push_back("segment '" + part.graph.name + "': " + note);
    }
    list += (list.empty() ? "" : "; ") + part.graph.name + ": " + got->plan->identity() + " from " +
            plan_source_name(got->plan->built_from());
    plans.push_back(std::move(got->plan));
  }
  const size_t n = seg.segments.size();
  KILN_ASSIGN_OR_RETURN(out->plan,
                        make_unfused_plan(r.g, r.sig, seg.segments, std::move(plans), PlanSource::kSegments));
  out->source = PlanSource::kSegments;
  out->why =
      "whole graph not fusable (" + seg.why + "): runs as " + std::to_string(n) + " fused segments (" + list + ")";
  return true;
}

}  // namespace kiln::runtime_detail
