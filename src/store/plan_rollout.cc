// Plan states' names and rules (kiln/store/plan_rollout.h); the store's tables for them are store/plan_states.cc.
#include "kiln/store/plan_rollout.h"

namespace kiln {

const char* plan_state_name(PlanState s) { return enum_name(kPlanStateNames, s, "?"); }
StatusOr<PlanState> parse_plan_state(const std::string& name) {
  return parse_enum(kPlanStateNames, name, "plan state");
}

const char* rollout_policy_name(RolloutPolicy p) { return enum_name(kRolloutPolicyNames, p, "?"); }
StatusOr<RolloutPolicy> parse_rollout_policy(const std::string& name) {
  return parse_enum(kRolloutPolicyNames, name, "rollout policy");
}

bool plan_transition_allowed(PlanState from, PlanState to) {
  switch (from) {
    case PlanState::kCandidate:
      return to == PlanState::kShadow || to == PlanState::kActive || to == PlanState::kRejected;
    case PlanState::kShadow:
      return to == PlanState::kActive || to == PlanState::kRejected || to == PlanState::kCandidate;
    case PlanState::kRetired: return to == PlanState::kActive;
    case PlanState::kActive:
    case PlanState::kRejected: return false;
  }
  return false;
}

}  // namespace kiln
