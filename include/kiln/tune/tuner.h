// kiln/tune/tuner.h: the autotuner. For one graph it enumerates every engine configuration cuDNN offers
// (heuristic modes A, B and FALLBACK, de-duplicated by identity), builds them on host threads while the
// earlier ones are checked and timed (a pipeline), runs each once against a reference made once per graph
// (incorrect ones are excluded), times the correct ones with the shared measurement module
// (kiln/measure/measure.h), and picks the winner deterministically (kiln/tune/tune_policy.h). The decisions live in
// tune_with_backend, over the TuneBackend seam (kiln/tune/tune_backend.h); tune_graph runs them on cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// The seam brings what its users and the types here share: Status, Graph, the lowering (EngineConfig,
// HeuristicMode), MeasureOptions, CheckOptions and the references (ReferenceKind, HostTensor).
#include "kiln/tune/build_helper_options.h"
#include "kiln/tune/tune_backend.h"
#include "kiln/tune/tune_policy.h"

namespace kiln {

// What the tuner reports as it goes, for a process that supervises it (kiln/tune/tune_supervisor.h): which
// candidates there are, when each one's build and run start and end, and each one's result.
struct TuneEvent {
  enum class Kind {
    kCandidates,  // identities (every candidate after the filters, skipped ones included) and notes
    kPrepared,    // reference_kind and inputs are known
    kBuildStart,  // index/identity: a worker thread starts building it
    kBuildEnd,
    kRunStart,   // the loop starts running it (the gate and the timing)
    kCandidate,  // its result (and its check summary; its plan when Passed and timed, with events_with_plans)
  };
  Kind kind = Kind::kCandidates;
  size_t index = 0;
  std::string identity;
  std::vector<std::string> identities, notes;
  std::vector<int> ranks;
  ReferenceKind reference_kind = ReferenceKind::kNone;
  std::string inputs;
  double prepare_ms = 0;  // kPrepared: wall time of the inputs and reference
  CandidateResult result;
  std::string check;
  std::vector<uint8_t> plan;
};

struct TuneOptions {
  // cuDNN's heuristic modes, cuBLASLt's algorithms for a lone matmul (with a bias and a ReLU) and Kiln's own
  // kernels (the AMAX of a whole tensor): HeuristicMode in kiln/lower/lower.h.
  std::vector<HeuristicMode> modes = {HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback,
                                      HeuristicMode::kCublasLt, HeuristicMode::kKiln};
  int top_k = 0;                     // > 0: only the heuristic's (mode A) first k configurations
  int64_t max_workspace_bytes = -1;  // < 0: no limit; larger plans are NotSupported
  std::vector<std::string> exclude;  // identities ("eng12_k2=1"), engines ("eng12", "blt66") or "blt" to skip
  std::optional<EngineConfig> pin;   // build, check and time exactly this configuration
  int build_threads = 0;             // 0: hardware concurrency
  // Runtime-compiled candidates built in helper processes (kiln/tune/build_helpers.h: cuDNN compiles one at a
  // time per process); processes 0 or no executable: every build on the threads above.
  BuildHelperOptions build_helpers;
  MeasureOptions measure;  // warm-up, L2 flush (default) or hot cache, stopping rule
  // Time each candidate replayed from a CUDA graph (one execution captured by stream capture, each sample
  // a cudaGraphLaunch) instead of stream launches (the default): the time an application that replays
  // its plans (kiln/capture/capture.h) sees. The numerics gate runs the candidate as usual.
  bool graph_replay = false;
  // The whole run: enumeration, builds, inputs and reference included; 0: none. Candidates not reached
  // are reported NotVerified ("not run: time budget reached"); the best verified one so far wins.
  double time_budget_s = 0;
  // Which runtime-compiled candidates are compiled, in what order, and when the rest are left
  // (kiln/tune/tune_policy.h "Candidate budget"); budget.exhaustive: every one. A pinned tune has one candidate.
  CandidateBudget budget;
  WinnerOptions winner;
  CheckOptions check;
  uint64_t seed = 1;  // inputs are seeded random (the counter-based generator)...
  // ...unless recorded inputs are given: <inputs_dir>/<tensor name>.bin (kiln/validate/device_io.h
  // read_graph_inputs), uploaded once, so that candidates are gated on data like the service's.
  std::string inputs_dir;
  bool verify = true;                  // run the numerics gate
  bool host_reference = false;         // the reference on the host (all cores) instead of the device
  std::optional<Incumbent> incumbent;  // from an earlier tuning of the same key
  IncumbentOptions incumbent_options;
  // The share of the GPU's time the tune may take, in (0, 1]: after each candidate's device work (its
  // numerics gate and its timing), the tune rests for that work's time x (1/gpu_share - 1) before the next
  // (gpu_share_rest_ms), so that a background tune beside a service keeps the device busy at most this
  // fraction of the time. 1: no rest. The rest counts against time_budget_s (a budgeted tune at a small
  // share reaches fewer candidates) and ends early when the tune is cancelled or out of budget.
  double gpu_share = 1.0;
  // Set (e.g. by SIGINT or SIGTERM) to stop after the candidate in progress: builds not started are
  // skipped, the rest is reported NotVerified ("not run: interrupted") and the result is cancelled.
  const std::atomic<bool>* cancel = nullptr;
  // Test hook: called with each candidate's output buffers (tensor index -> device pointer) after its run
  // and before the check, on the stream it ran on; may alter them (to inject a wrong result).
  std::function<Status(const EngineConfig&, const std::map<int, void*>&, cudaStream_t)> output_hook;
  // Progress: called after each candidate is finished (done, total, identity), total being the number
  // of candidates after the filters.
  std::function<void(size_t, size_t, const std::string&)> progress;
  // For a supervised worker (kiln/tune/tune_supervisor.h): events as the run goes (called from build threads
  // too: must be thread-safe); plans of Passed, timed candidates in their kCandidate events; identities
  // already settled by an earlier worker, neither built nor reported; and `pipeline` false to build each
  // candidate on the loop's thread just before its run, so that a crash names exactly one candidate.
  std::function<void(const TuneEvent&)> on_event;
  bool events_with_plans = false;
  std::vector<std::string> skip;
  bool pipeline = true;
};

// How long a tune at `gpu_share` rests after `device_ms` of device work: device_ms x (1/gpu_share - 1); 0 for a
// share of 1 or more, or no device work. (A share <= 0 is refused by the callers' checks; here it is 0.)
double gpu_share_rest_ms(double device_ms, double gpu_share);

struct TuneResult {
  std::string graph_name;
  std::vector<CandidateResult> candidates;  // every candidate, in enumeration order
  std::vector<std::string> behavior_notes;  // per candidate, "; "-joined
  std::optional<size_t> winner;             // index into candidates (after the incumbent rule)
  std::optional<size_t> fastest;            // fastest correct candidate, before the incumbent rule
  std::optional<IncumbentDecision> incumbent_decision;
  std::vector<uint8_t> winner_plan;  // serialized plan of the winner
  EngineConfig winner_config;
  ReferenceKind reference_kind = ReferenceKind::kNone;
  std::string inputs;          // which inputs the gate used: "random seed 1" or "files DIR"
  std::string winner_check;    // the winner's numerics summary
  double build_wall_ms = 0;    // from the first build started to the last one finished
  double prepare_wall_ms = 0;  // inputs and reference (concurrent with the builds)
  double total_wall_ms = 0;
  bool cancelled = false;
  bool budget_exhausted = false;
  // The inputs and reference the gate used, kept on the device for the unfused alternative (null
  // without a GPU backend or when none was made).
  std::shared_ptr<const GraphEvaluation> evaluation;
};

// The tuner's decisions over any backend (the cuDNN one, or a test's fake): `graph_name` names the result.
StatusOr<TuneResult> tune_with_backend(TuneBackend& backend, const std::string& graph_name, const TuneOptions& options);

// tune_with_backend on make_cudnn_backend(graph, options).
StatusOr<TuneResult> tune_graph(const Graph& graph, const TuneOptions& options);

}  // namespace kiln
