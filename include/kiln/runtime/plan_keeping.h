// kiln/runtime/plan_keeping.h: the one way a plan enters the plan store. `kiln tune`, `kiln compile`, `kiln plans
// retune`, `kiln run` under the re-tune policy and the Planner's tuned promotion all store through
// keep_plan, so a plan is stored with the same companions and the same error policy everywhere:
//   - the record itself (PlanStore::put): its failure is the call's error, nothing else is tried;
//   - the graph's spec beside it (remember_graph_spec: `plans verify --deep` and re-tuning read it);
//   - for a tuned record, no re-tune left queued for its key in its environment (the request is served).
// The last two do not undo a stored plan: each failure is a warning in KeptPlan, for the caller to say.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/store/plan_store.h"
#include "kiln/tune/tuner.h"

namespace kiln {

struct KeptPlan {
  PlanRecord record;                     // as stored (tuned_by, created_at, checksum filled)
  bool dequeued = false;                 // a queued re-tune of its key and environment was removed
  std::vector<std::string> warnings;     // "graph spec not kept beside the plan: ...", "re-tune queue row ..."
  PlanState state = PlanState::kActive;  // what the record is now: active, or a candidate or in shadow (rollout)
};

// Stores `record`, a plan for `graph` (validated), as described above. FailedPrecondition for a read-only
// store; the store's error where put() fails. Under RolloutPolicy::kVerify or kShadow, a key that has an active plan
// of another configuration gets `record` as a candidate (kVerify) or in shadow (kShadow) instead (KeptPlan::state),
// with `why` as its reason; an untuned record is never a candidate (it is stored as put() stores it).
StatusOr<KeptPlan> keep_plan(PlanStore& store, const Graph& graph, const PlanRecord& record,
                             RolloutPolicy rollout = RolloutPolicy::kImmediate, const std::string& why = "tuned");

// Whether a tuning's winner stands as tuned in the store: a complete tuning. One cut short, by an
// interrupt or a time budget, is the best of the candidates it reached: stored untuned, so that it
// neither stands for its bucket as a tuned representative nor stops a later complete tuning (`kiln tune
// --untuned` completes it).
bool tuning_is_complete(const TuneResult& tr);

// Keeps `graph`'s spec JSON in the store's graph specs under its signature, so that its plans can be
// re-run and deep-verified without the spec file. keep_plan calls it beside put(); the re-tune queue
// (kiln/runtime/retune.h) calls it for a graph it queues.
Status remember_graph_spec(PlanStore& store, const Graph& graph);

}  // namespace kiln
