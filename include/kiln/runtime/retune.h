// kiln/runtime/retune.h: re-tuning what the plan store could not serve. kiln::Planner::obtain (kiln/runtime/planner.h)
// queues a re-tune under the policy kHeuristicsAndQueue, or tunes at once under kRetune; retune_queued() drains the
// queue on a machine of the environment that asked (`kiln plans retune`). docs/store.md "The re-tune
// queue".
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/store/plan_store.h"
#include "kiln/tune/tuner.h"

namespace kiln {

// The queue reason for a lookup that gave no runnable plan: "store miss", "store stale: <field reasons
// joined by "; ">", "store corrupt: <what was wrong>".
std::string retune_reason(const LookupResult& look);

// The request to re-tune `graph` (validated) for the environment `env`: its signature and its spec JSON.
// InvalidArgument for a graph that cannot be written as a spec.
StatusOr<RetuneRequest> retune_request_for(const Graph& graph, const EnvFingerprint& env, const std::string& reason);
// Queues retune_request_for(graph, env, reason). FailedPrecondition for a read-only store (which never queues).
StatusOr<RetuneQueueEntry> queue_retune(PlanStore& store, const Graph& graph, const EnvFingerprint& env,
                                        const std::string& reason);

// `given`, else this machine's environment (device 0): Unavailable "<needs>, and there is none: <why>" without
// a usable GPU (a worker, kiln plans retune).
StatusOr<EnvFingerprint> this_machine_environment(const std::optional<EnvFingerprint>& given, const std::string& needs);

// How kiln run tunes when the policy is kRetune (a short tuning: the run waits for it); run_graph hands these
// to the Planner as PromotionTuning.
struct RetuneNowOptions {
  double time_budget_s = 30;         // the whole tuning of the graph; 0: none
  double candidate_budget_ms = 100;  // sampling budget per candidate
  int top_k = 0;                     // > 0: only the heuristic's first k configurations
  uint64_t seed = 1;                 // seeded random inputs of the numerics gate
};
TuneOptions tune_options_for(const RetuneNowOptions& o);

enum class RetuneOutcome {
  kTuned,             // tuned here; the winner is in the store and the row is gone (a tuning the time
                      // budget cut short: stored untuned, the row kept; kiln/runtime/plan_keeping.h)
  kAlreadyTuned,      // the store already had a tuned plan for this environment; the row is gone
  kFailed,            // the spec did not parse or give its key, tuning failed or found no correct plan; kept
  kOtherEnvironment,  // queued by another environment (GPU, cuDNN, ...); left for a machine of that kind
  kNotReached,        // the whole-run budget ran out or the run was interrupted first; kept
};
inline constexpr EnumName<RetuneOutcome> kRetuneOutcomeNames[] = {
    {RetuneOutcome::kTuned, "tuned"},
    {RetuneOutcome::kAlreadyTuned, "already tuned"},
    {RetuneOutcome::kFailed, "failed"},
    {RetuneOutcome::kOtherEnvironment, "other environment"},
    {RetuneOutcome::kNotReached, "not reached"}};
const char* retune_outcome_name(RetuneOutcome o);  // kRetuneOutcomeNames' name

struct RetuneRowReport {
  RetuneQueueEntry entry;
  RetuneOutcome outcome = RetuneOutcome::kNotReached;
  std::string message;                              // why it failed / which environment / the winner's check summary
  std::string winner;                               // identity of the stored plan ("eng41_k2=4_k13=0") when tuned
  double median_ms = 0;                             // the winner's median time
  Disposition verdict = Disposition::kNotVerified;  // the winner's numerics verdict
  double seconds = 0;                               // wall time spent on this row
  PlanState state = PlanState::kActive;             // what the stored winner is (RolloutPolicy: held back or not)
};

struct RetuneReport {
  std::vector<RetuneRowReport> rows;  // every queued row, in queue order
  int64_t tuned = 0, already_tuned = 0, failed = 0, other_environment = 0, not_reached = 0;
  bool budget_exhausted = false;
  bool cancelled = false;
};

struct RetuneOptions {
  // Per graph: candidates, measurement, checks, seed. Its time_budget_s (0: none) is further capped by what
  // is left of budget_s.
  TuneOptions tune;
  double budget_s = 0;                                 // the whole run; 0: none. Rows not started in time: kNotReached
  std::optional<EnvFingerprint> current;               // this environment; default: collect_environment() (needs a GPU)
  const std::atomic<bool>* cancel = nullptr;           // also handed to the tuner
  std::function<void(const RetuneRowReport&)> on_row;  // after each row (progress)
  // How a winner becomes active where its key has an active plan already (docs/rollout.md "Policies"; keep_plan).
  RolloutPolicy rollout = RolloutPolicy::kImmediate;
};

// For each queued row whose fingerprint_key is this environment's: parses the stored spec, checks it gives
// the queued key, tunes it, stores the winner (record_from_tuning, keep_plan: its graph spec beside it, the
// row removed). Rows of other environments are left alone and reported. Per-row failures are reported,
// not returned. Errors: Unavailable without a GPU (when `current` is not given), store errors.
StatusOr<RetuneReport> retune_queued(PlanStore& store, const RetuneOptions& options);

// One queued row, tuned as retune_queued tunes each row of this environment (`kiln worker` takes rows one at
// a time under a lease: kiln/tools/worker.h). `current` must be the row's environment; to.cancel interrupts
// it (kNotReached). The report's outcome says what happened; nothing is returned as an error.
RetuneRowReport retune_one(PlanStore& store, const EnvFingerprint& current, RetuneQueueEntry entry,
                           const TuneOptions& to, RolloutPolicy rollout = RolloutPolicy::kImmediate);

}  // namespace kiln
