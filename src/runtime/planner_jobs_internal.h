// The Planner's jobs (kiln/runtime/planner_jobs.h) over its backend; Planner's methods (planner.cc) call these.
#pragma once

#include <functional>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/planner_options.h"

namespace kiln {
// kiln/runtime/planner_jobs.h and kiln/runtime/retune.h (their users include them).
struct TuneJob;
struct TunedGraph;
struct CompiledGraph;
struct RetuneOptions;
struct RetuneReport;
}  // namespace kiln

namespace kiln::planner_jobs {

// Drops what the Planner holds in memory for a structure: its plans and its tuned shapes (a job stored one).
using Forget = std::function<void(const GraphSignature&)>;

// The shapes the backend's store says were tuned for `sig`'s structure, as (shape key, winner): the candidate budget's
// priors (kiln/tune/tune_policy.h rank_prior_winners).
std::vector<std::pair<std::string, std::string>> tuned_winners(PlanBackend& backend, const GraphSignature& sig);

StatusOr<TunedGraph> tune_and_store(PlanBackend& backend, const PlannerOptions& options, const Graph& graph,
                                    const TuneJob& job, const Forget& forget);
StatusOr<CompiledGraph> compile(PlanBackend& backend, const PlannerOptions& options, const Graph& graph,
                                const std::optional<EngineConfig>& pin, const Forget& forget);
StatusOr<RetuneReport> retune_queued(PlanBackend& backend, const PlannerOptions& options, const RetuneOptions& retune,
                                     const Forget& forget);

}  // namespace kiln::planner_jobs
