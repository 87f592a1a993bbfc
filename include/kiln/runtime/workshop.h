// kiln::Workshop: the Planner's jobs (tune, compile, re-tune), beside the Planner and sharing its backend (its
// environment, store and cuDNN handles): `planner->workshop()`. A job that stores a plan makes the Planner drop what
// it holds for that structure, so its next obtain() reads the store again.
//
//   KILN_ASSIGN_OR_RETURN(auto planner, Planner::create(PlannerOptions::offline("plans.db")));
//   KILN_ASSIGN_OR_RETURN(TuneWork work, planner->workshop().work_for(graph));   // the graph, or its segments
//   for (const Graph& g : work.graphs) KILN_ASSIGN_OR_RETURN(TunedGraph t, planner->workshop().tune(g, job));
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/planner_options.h"
#include "kiln/runtime/retune.h"

namespace kiln {

// What tuning a graph tunes.
struct TuneWork {
  std::vector<Graph> graphs;  // the graph itself, or its fused segments (each stored under its own signature)
  std::string segmented;      // why the graph is cut into segments; empty when it is tuned whole
};

class Workshop {
 public:
  using Forget = std::function<void(const GraphSignature&)>;
  // Made by the Planner: its backend and options, and how it drops a structure a job stored a plan for.
  Workshop(PlanBackend& backend, const PlannerOptions& options, Forget forget)
      : backend_(backend), options_(options), forget_(std::move(forget)) {}

  // The graph, or where cuDNN cannot fuse it whole, its fused segments: the same decision the Planner's segments
  // source makes when it serves the graph (PlanBackend::segments), so `kiln run` finds each segment's tuned plan.
  StatusOr<TuneWork> work_for(const Graph& graph);
  // Tunes `graph` (validated) like `kiln tune`: its stored tuned plan is the incumbent, the unfused alternative is
  // timed and decided on, the winner is stored (keep_plan; untuned where the tuning was cut short). Needs a GPU
  // and, to store, PlannerOptions::store_writable. A tuning without a correct candidate is a result (no `kept`),
  // not an error.
  StatusOr<TunedGraph> tune(const Graph& graph, const TuneJob& job);
  // Compiles `graph` (validated; its fused segments where it exceeds cuDNN's limits per graph) for
  // PlannerOptions::target and stores each plan, untuned. Per-graph outcomes are results; errors are the store's,
  // or FailedPrecondition for a Planner without a target.
  StatusOr<CompiledGraph> compile(const Graph& graph, const std::optional<EngineConfig>& pin = std::nullopt);
  // Drains the store's re-tune queue for this environment (kiln/runtime/retune.h retune_queued, its `current` the
  // Planner's fingerprint). Needs a GPU and PlannerOptions::store_writable.
  StatusOr<RetuneReport> retune_queued(const RetuneOptions& options);

 private:
  PlanBackend& backend_;
  const PlannerOptions& options_;
  Forget forget_;
};

}  // namespace kiln
