// keep_plan (kiln/runtime/plan_keeping.h): a plan into the store, with its graph spec, its re-tune request served.
#include "kiln/runtime/plan_keeping.h"

#include "kiln/core/engine_config.h"
#include "kiln/spec/spec.h"
#include "kiln/store/env_policy.h"

namespace kiln {

namespace {

// Whether `record` goes in as a candidate: a tuned record, a policy that holds it back, and an active plan of another
// configuration for its key (a damaged or missing one protects nothing).
StatusOr<bool> held_back(PlanStore& store, const PlanRecord& record, RolloutPolicy rollout) {
  if (rollout == RolloutPolicy::kImmediate || !record.tuned) return false;
  StatusOr<PlanRecord> active = store.read(record.structure_sig, record.shape_key, record.fingerprint_key());
  if (!active.is_ok()) {
    if (active.status().code() == StatusCode::kNotFound) return false;
    return active.status();
  }
  return plan_identity(active->engine_id, active->knobs) != plan_identity(record.engine_id, record.knobs);
}

}  // namespace

StatusOr<KeptPlan> keep_plan(PlanStore& store, const Graph& graph, const PlanRecord& record, RolloutPolicy rollout,
                             const std::string& why) {
  if (store.read_only())
    return failed_precondition("plan store " + store.path() + " was opened read-only: the plan for graph '" +
                               graph.name + "' was not stored");
  KeptPlan out;
  KILN_ASSIGN_OR_RETURN(bool candidate, held_back(store, record, rollout));
  if (candidate) {
    KILN_ASSIGN_OR_RETURN(out.record,
                          store.put_candidate(record, why + " (rollout " + rollout_policy_name(rollout) + ")"));
    out.state = PlanState::kCandidate;
    if (rollout == RolloutPolicy::kShadow) {
      const StoredPlanKey key{out.record.structure_sig, out.record.shape_key, out.record.fingerprint_key()};
      KILN_RETURN_IF_ERROR(store.transition(key, plan_identity(out.record.engine_id, out.record.knobs),
                                            PlanState::kShadow, "rollout shadow: sampled beside the active plan"));
      out.state = PlanState::kShadow;
    }
  } else {
    KILN_ASSIGN_OR_RETURN(out.record, store.put(record));
  }
  if (Status st = remember_graph_spec(store, graph); !st.is_ok())
    out.warnings.push_back("graph spec of '" + graph.name + "' not kept beside its plan: " + st.message());
  // An untuned plan (kiln compile, a tuning cut short) does not serve a re-tune request: it stays queued.
  if (out.record.tuned) {
    StatusOr<bool> removed = store.remove_from_retune_queue(out.record.structure_sig, out.record.shape_key,
                                                            fingerprint_key(out.record.fingerprint));
    if (removed.is_ok()) out.dequeued = *removed;
    else out.warnings.push_back("re-tune queue row of '" + graph.name + "' not removed: " + removed.status().message());
  }
  return out;
}

bool tuning_is_complete(const TuneResult& tr) { return !tr.cancelled && !tr.budget_exhausted; }

Status remember_graph_spec(PlanStore& store, const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(graph));
  KILN_ASSIGN_OR_RETURN(std::string spec, graph_to_spec_json(graph));
  KILN_ASSIGN_OR_RETURN(GraphSpecEntry e, store.put_graph_spec(sig.structure, sig.shape_key, graph.name, spec));
  (void)e;
  return Status::ok();
}

}  // namespace kiln
