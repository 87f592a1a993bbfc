// kiln tune's options (cmd_tune_options.cc registers them) and the command (cmd_tune.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/shape_recorder.h"

namespace kiln::cli {

struct TuneCliOptions {
  std::string rollout = "immediate";  // --rollout: immediate, verify or shadow (docs/rollout.md)
  std::vector<std::string> specs;
  bool list = false, json = false, hot_cache = false, untuned_only = false, no_verify = false, use_store = false;
  bool no_unfused = false, no_isolate = false, graph_replay = false;
  std::string pin, store_path, objective = "time", fusion_policy = "faster", materialize, inputs_dir;
  std::string shapes_file, buckets;  // --shapes FILE [--hottest N] [--buckets POLICY]
  int hottest = 0;
  std::vector<std::string> exclude;
  int top_k = 0;
  bool exhaustive = false;                      // every runtime-compiled candidate (no candidate budget)
  int compile_first = CandidateBudget{}.first;  // the candidate budget's first and patience
  int compile_patience = CandidateBudget{}.patience;
  int build_helpers = -1;  // --build-helpers: processes for runtime-compiled builds; -1: the machine's default
  int64_t max_workspace = -1;
  double budget_s = 0, candidate_budget_ms = 1000, target_noise = 0.005, workspace_tolerance = 0.05;
  double settle_us = MeasureOptions{}.settle_us;  // --settle-us: idle after each L2 flush
  uint64_t seed = 1;
};

// The job every graph of the command is tuned with: the flags checked (InvalidArgument naming the flag for
// a number that means nothing, an unknown objective, fusion policy, dtype or pin) and converted. Its
// store, budget and progress are the command's to set; `cancel` is the command's interrupt flag.
StatusOr<TuneJob> tune_job_from(const TuneCliOptions& o, const std::atomic<bool>* cancel);

// Each spec's graph (its advice printed); with --shapes (and not --list), each spec at the shapes
// `recorded` holds for its structure instead (shapes_to_tune: hottest first, bucket representatives, at
// most --hottest). InvalidArgument when --shapes matches no spec.
StatusOr<std::vector<std::pair<std::string, Graph>>> graphs_to_tune(const TuneCliOptions& o,
                                                                    const std::vector<RecordedShape>& recorded,
                                                                    const BucketPolicy& buckets);

Status tune_cmd(const TuneCliOptions& o);

}  // namespace kiln::cli
