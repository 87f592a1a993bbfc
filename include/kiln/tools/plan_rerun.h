// kiln/tools/plan_rerun.h: two engine configurations of one graph re-run side by side on this GPU (`kiln plans diff
// --rerun`, docs/rollout.md "Upgrade report"): each built here from its configuration (a plan stored under another
// cuDNN or frontend cannot be deserialized here; its configuration can be rebuilt where this cuDNN still offers it),
// run on the same seeded inputs, checked against the reference, compared with the other's outputs, and timed by the
// measure layer in alternation.
#pragma once

#include <string>

#include "kiln/core/engine_config.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/graph.h"
#include "kiln/measure/measure.h"
#include "kiln/tools/deep_verify.h"

namespace kiln {

struct RerunSide {
  std::string config;     // the configuration's identity
  bool ran = false;       // false: see why
  std::string why;        // "not offered by this cuDNN: ...", "did not run: ..."
  DeepCheckResult check;  // its outputs against the reference
  double median_ms = 0, min_ms = 0, rel_error = 0;
  int samples = 0;
  bool throttled = false;  // the SM clock dropped or was capped during one of its measurements
};

struct RerunResult {
  RerunSide from, to;
  bool both_ran() const { return from.ran && to.ran; }
  double time_ratio = 0;       // to / from medians, when both ran
  double max_abs_between = 0;  // the largest |to - from| over every output element (same inputs)
  double nmse_between = 0;     // sum (to - from)^2 / sum from^2, the worst output's (a NaN difference: infinity)
  std::string note;            // outputs that could not be compared element by element, and why
};

struct RerunOptions {
  DeepCheckOptions check;
  MeasureOptions measure;
  // Each side measured this many times (at least 2), the order alternating by round; the medians' median.
  int rounds = 4;
};

// Never fails: a side that cannot be built or run says why in its RerunSide.
RerunResult rerun_configs(const Graph& graph, const EngineConfig& from, const EngineConfig& to, cudnnHandle_t handle,
                          cudaStream_t stream, const RerunOptions& options = {});

}  // namespace kiln
