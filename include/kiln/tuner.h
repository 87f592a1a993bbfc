// kiln/tuner.h: the autotuner. For one graph it enumerates every engine configuration cuDNN offers
// (heuristic modes A, B and FALLBACK, de-duplicated by identity), builds them in parallel on host
// threads, runs each once against a reference (incorrect ones are excluded), times the correct ones with
// the shared measurement module (kiln/measure.h), and picks the winner deterministically
// (kiln/tune_policy.h).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/lower.h"
#include "kiln/measure.h"
#include "kiln/numerics.h"
#include "kiln/status.h"
#include "kiln/tune_policy.h"

namespace kiln {

struct TuneOptions {
  std::vector<HeuristicMode> modes = {HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback};
  int top_k = 0;                      // > 0: only the heuristic's (mode A) first k configurations
  int64_t max_workspace_bytes = -1;   // < 0: no limit; larger plans are NotSupported
  std::vector<std::string> exclude;   // identities ("eng12_k2=1") or engine prefixes ("eng12") to skip
  std::optional<EngineConfig> pin;    // build, check and time exactly this configuration
  int build_threads = 0;              // 0: hardware concurrency
  MeasureOptions measure;             // warm-up, L2 flush (default) or hot cache, stopping rule
  double time_budget_s = 0;           // whole run; 0: none. Candidates not reached are reported NotVerified.
  WinnerOptions winner;
  CheckOptions check;
  uint64_t seed = 1;                  // inputs are seeded random
  bool verify = true;                 // run the numerics gate
  std::optional<Incumbent> incumbent; // from an earlier tuning of the same key
  IncumbentOptions incumbent_options;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by Ctrl-C) to stop after the candidate in progress
  // Test hook: called with each candidate's outputs before the check; may alter them (to inject a wrong one).
  std::function<void(const EngineConfig&, std::vector<HostTensor>&)> output_hook;
  // Progress: called after each candidate is finished (done, total, identity).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct TuneResult {
  std::string graph_name;
  std::vector<CandidateResult> candidates;   // every candidate, in enumeration order
  std::vector<std::string> behavior_notes;   // per candidate, "; "-joined
  std::optional<size_t> winner;              // index into candidates (after the incumbent rule)
  std::optional<size_t> fastest;             // fastest correct candidate, before the incumbent rule
  std::optional<IncumbentDecision> incumbent_decision;
  std::vector<uint8_t> winner_plan;          // serialized plan of the winner
  EngineConfig winner_config;
  std::string reference_kind;                // "host", "device" or "none"
  std::string winner_check;                  // the winner's numerics summary
  double build_wall_ms = 0;                  // wall time of the parallel build
  double total_wall_ms = 0;
  bool cancelled = false;
  bool budget_exhausted = false;
};

StatusOr<TuneResult> tune_graph(const Graph& graph, const TuneOptions& options);

// FLOPs of one execution of the graph (matmul/conv: 2 per MAC; others: per element), for TFLOP/s.
double graph_flops(const Graph& graph);
// Bytes that must move through memory at least once (inputs read, outputs written).
double graph_min_bytes(const Graph& graph);

}  // namespace kiln
