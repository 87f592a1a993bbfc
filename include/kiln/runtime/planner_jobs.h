// kiln/runtime/planner_jobs.h: what kiln::Planner does besides serving plans (kiln/runtime/planner.h), each one call that a
// `kiln` command wraps: tune a graph and store its winner (`kiln tune`), compile plans for a recorded
// device without one (`kiln compile`), and re-tune what the store's queue asks for (`kiln plans retune`).
// All of them store through keep_plan (kiln/runtime/plan_keeping.h), and a plan the Planner holds in memory for a
// key they store is dropped, so that its next obtain() serves the stored one.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/store/fusion_record.h"
#include "kiln/tune/tuner.h"  // TuneOptions, TuneResult (and through the tuner's seam Status and Graph)
#include "kiln/tune/unfused.h"

namespace kiln {

// Workshop::tune (kiln/runtime/workshop.h): one graph (or one fused segment of one) tuned, the fused winner against the
// unfused chain, the winner stored.
struct TuneJob {
  // Candidates, measurement, checks, budget (the whole job: the unfused alternative gets what the fused
  // tuning left of it). Its incumbent is set here from the store: the key's tuned record, runnable here.
  TuneOptions tune;
  bool store = true;          // put the winner into the Planner's store (needs PlannerOptions::store_writable)
  bool untuned_only = false;  // skip a key whose stored plan is already tuned (TunedGraph::skipped)
  // How the winner becomes active where its key has an active plan already (docs/rollout.md): at once, or as a
  // candidate (verify) or in shadow. The graph's own winner only: an unfused chain's parts and its decision are
  // stored at once.
  RolloutPolicy rollout = RolloutPolicy::kImmediate;
  // Also time the unfused alternative: for a graph of several nodes, without a pin, when the tuning was
  // complete and some of the budget is left.
  bool unfused = true;
  std::optional<DataType> materialized;  // the dtype of intermediates between unfused parts (unset: io dtype)
  FusionPolicy fusion_policy = FusionPolicy::kFaster;
  // What tunes (default: tune_graph in this process; `kiln tune`: a supervised worker process).
  std::function<StatusOr<TuneResult>(const Graph&, const TuneOptions&)> tuner;
  // What times the unfused alternative (default: tune_unfused; host tests: a fake).
  std::function<StatusOr<UnfusedResult>(const Graph&, const UnfusedOptions&)> unfused_tuner;
  // The whole command's end (kiln tune --budget over several graphs), checked after the skip: a key that
  // would be skipped is skipped, one not yet tuned is not tuned (TunedGraph::budget_spent) once it has
  // passed, and the job's time budget is at most what is left of it. Unset: tune.time_budget_s alone.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Lines about what the job is doing ("timing the unfused alternative (3 parts)"), for a progress log.
  std::function<void(const std::string&)> on_note;
};

struct TunedGraph {
  GraphSignature signature;
  EnvFingerprint environment;  // the Planner's, which the plan was tuned (and stored) for
  bool skipped = false;        // untuned_only, and the store holds it tuned: nothing was tuned
  bool budget_spent = false;   // the deadline had passed: nothing was tuned
  TuneResult result;           // its evaluation (device buffers) already freed
  std::optional<UnfusedResult> unfused;
  std::optional<StatusOr<FusionDecision>> fusion;  // with `unfused`: the decision under the job's policy
  // What was stored: the winner, untuned where the tuning was cut short (tuning_is_complete); unset when
  // there was no winner or the job did not store.
  std::optional<KeptPlan> kept;
  // Why the winner could not be stored (keep_plan's error); ok when stored or not to be. The result is
  // still returned, so that the tuning can be reported before the error.
  Status store_status;
  // Where the unfused chain was decided on and stored (docs/runtime.md "Fused or unfused, in service"): each
  // part's winner under its own signature, and the decision that makes the Planner serve the chain for this
  // key. Unset when the fused plan was decided on, or the job did not store.
  std::optional<FusionRecord> kept_fusion;
  std::vector<KeptPlan> kept_parts;
  // The fused plan was decided on where an earlier tuning had stored the chain: that decision was removed.
  bool fusion_removed = false;
  // Why the chain, decided on, could not be stored (the fused winner is stored and serves); ok otherwise.
  Status fusion_status;
};

// Workshop::compile: a graph's heuristic (or pinned) plan built for the Planner's recorded device profile.
enum class CompileOutcome {
  kCompiled,  // stored, untuned
  kNeedsGpu,  // this graph cannot be compiled without a CUDA driver (a result, not a failure)
  kFailed,    // cuDNN could not build it (or its pin); `why` says so
};
inline constexpr EnumName<CompileOutcome> kCompileOutcomeNames[] = {{CompileOutcome::kCompiled, "compiled"},
                                                                    {CompileOutcome::kNeedsGpu, "needs a GPU"},
                                                                    {CompileOutcome::kFailed, "failed"}};
const char* compile_outcome_name(CompileOutcome o);  // kCompileOutcomeNames' name

struct CompiledPart {
  std::string graph_name;
  GraphSignature signature;
  CompileOutcome outcome = CompileOutcome::kFailed;
  std::string why;  // kNeedsGpu, kFailed: one line
  EngineConfig config;
  size_t plan_bytes = 0;
  int64_t workspace_bytes = 0;
  std::vector<std::string> workarounds;  // known cuDNN defects worked around while building it
  std::vector<std::string> warnings;     // what keep_plan could not keep beside the plan
};

struct CompiledGraph {
  // The graph, or each of its fused segments where it exceeds cuDNN's operations per graph (each stored
  // under its own signature, as `kiln run` runs it): `segmented` then says why it was cut.
  std::vector<CompiledPart> parts;
  std::string segmented;
  CompileOutcome outcome = CompileOutcome::kCompiled;  // the worst of its parts'
  std::string why;                                     // that part's
};

}  // namespace kiln
