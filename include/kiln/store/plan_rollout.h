// kiln/store/plan_rollout.h: plan states and their history (docs/rollout.md). Every plan a store holds for a key
// (structure, shape, environment) is in one state:
//   candidate  stored, not served: waiting for verification or for shadow traffic;
//   shadow     run beside the active plan on sampled requests (outputs compared, times recorded), not served;
//   active     the one plan served for the key: the `plans` row, what get() and load_all() hand out;
//   retired    served before, replaced by a newer active plan: kept whole, so that a rollback can restore it;
//   rejected   refused (a disagreement in shadow, a failed check, a rollback), kept with its evidence.
// Every transition is a history row in the same transaction as the change it records: who, when, why, the
// evidence (measurements, verdicts, as JSON text), from which state to which. put() itself is the immediate
// policy's transition (the incoming record active at once, the one it replaces retired), so a rollback works
// whatever the policy was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/store/plan_lookup.h"
#include "kiln/store/plan_record.h"

namespace kiln {

enum class PlanState { kCandidate, kShadow, kActive, kRetired, kRejected };
inline constexpr EnumName<PlanState> kPlanStateNames[] = {{PlanState::kCandidate, "candidate"},
                                                          {PlanState::kShadow, "shadow"},
                                                          {PlanState::kActive, "active"},
                                                          {PlanState::kRetired, "retired"},
                                                          {PlanState::kRejected, "rejected"}};
const char* plan_state_name(PlanState s);
StatusOr<PlanState> parse_plan_state(const std::string& name);
// Whether a plan may go from `from` to `to` by transition(): candidate -> shadow, active or rejected; shadow ->
// active, rejected or candidate (shadow stopped); retired -> active (a rollback); active -> retired or rejected
// (only as another plan's activation or a rollback, never alone: a key keeps an active plan once it has one).
bool plan_transition_allowed(PlanState from, PlanState to);

// How a newly tuned plan becomes active (docs/rollout.md "Policies"), where its key already has an active plan (a
// key's first plan is active at once under every policy: there is nothing to protect yet):
//   immediate  at once (put: the plan it replaces retired); development, and every store before states existed;
//   verify     stored as a candidate; `kiln plans promote` (after `kiln plans verify --deep` or a check of one's own)
//              makes it active;
//   shadow     stored in shadow: serving Planners run it beside the active plan on sampled requests, and promote or
//              reject it by the shadow rule (kiln/runtime/shadow_rule.h).
enum class RolloutPolicy { kImmediate, kVerify, kShadow };
inline constexpr EnumName<RolloutPolicy> kRolloutPolicyNames[] = {
    {RolloutPolicy::kImmediate, "immediate"}, {RolloutPolicy::kVerify, "verify"}, {RolloutPolicy::kShadow, "shadow"}};
const char* rollout_policy_name(RolloutPolicy p);
StatusOr<RolloutPolicy> parse_rollout_policy(const std::string& name);

// A plan of a key in a state other than active (the active one is the plans row), whole.
struct RolloutEntry {
  PlanRecord record;
  PlanState state = PlanState::kCandidate;
  std::string reason;                  // why it is in this state
  int64_t changed_at = 0;              // unix seconds
  std::string config;                  // its plan identity ("eng4_k24=2")
  int64_t seq = 0;                     // the number of the history row that put it in this state
  std::string stored_fingerprint_key;  // the row's fingerprint_key column (what keys are matched by)
  std::string problem;                 // why the row is damaged ("" when sound); its other fields may then be defaults
};

// One row of a key's history.
struct PlanTransition {
  std::string structure_sig, shape_key, fingerprint_key;
  int64_t seq = 0;         // 1, 2, ...: the key's history in order
  std::string config;      // the plan that moved
  std::string from_state;  // "" for a plan that entered the store
  std::string to_state;
  std::string reason;    // "shadow: 200 agreeing samples, 1.07x faster (p=0.001)", "rollback by ops@host: ..."
  std::string evidence;  // JSON text: measurements, verdicts ("" when none)
  std::string by;        // user@host
  int64_t at = 0;        // unix seconds
};

// The states and history of a store's plans (PlanStore implements it).
class PlanRollout {
 public:
  // Stores `record` as a candidate of its key (not served): a candidate or shadow plan of the same configuration is
  // replaced, a retired or rejected one too (it enters again). FailedPrecondition when the key's active plan has
  // this configuration already (nothing to roll out). A history row says so, with `reason`.
  virtual StatusOr<PlanRecord> put_candidate(const PlanRecord& record, const std::string& reason) = 0;
  // The non-active plans matching the filter (structure prefix, shape, environment), without plan bytes, newest first.
  virtual StatusOr<std::vector<RolloutEntry>> rollout_entries(const ListFilter& filter = {}) = 0;
  // One non-active plan of a key, with its bytes; NotFound when the key has no such plan.
  virtual StatusOr<RolloutEntry> rollout_entry(const StoredPlanKey& key, const std::string& config) = 0;
  // Moves the key's plan of `config` to `to` (plan_transition_allowed), in one transaction with its history row:
  // to active, the plans row becomes it (with put()'s winner change) and the plan it replaces retired. NotFound
  // when the key has no plan of that configuration in a movable state; FailedPrecondition, naming both states,
  // for a transition that is not allowed.
  virtual Status transition(const StoredPlanKey& key, const std::string& config, PlanState to,
                            const std::string& reason, const std::string& evidence = "") = 0;
  // The key's active plan becomes rejected (with `reason`) and its newest retired plan active again, in one
  // transaction; returns the plan now active. FailedPrecondition when the key has no retired plan to go back to, or
  // when `if_active` is given and the active plan is not that configuration (another process changed it meanwhile);
  // NotFound when it has no active plan.
  virtual StatusOr<PlanRecord> rollback(const StoredPlanKey& key, const std::string& reason,
                                        const std::string& if_active = "") = 0;
  // The key's history in order (every environment of the key's structure and shape when
  // key.fingerprint_key is empty).
  virtual StatusOr<std::vector<PlanTransition>> plan_history(const StoredPlanKey& key) = 0;

 protected:
  ~PlanRollout() = default;
};

}  // namespace kiln
