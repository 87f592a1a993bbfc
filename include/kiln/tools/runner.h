// kiln/tools/runner.h: running a graph once with seeded or user-supplied inputs, its plan obtained from a
// kiln::Planner (kiln/runtime/planner.h: the store, else heuristics; or the pinned configuration; a graph cuDNN
// cannot fuse whole as its fused segments), optionally verified against a reference. `kiln run` is a thin
// shell over run_graph().
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/validate/host_tensor.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace kiln {

// Which reference(s) judge a verified run:
//   kAuto    the host reference where it is cheap: the graph's MACs (estimate_macs) within host_max_macs
//            and at most kHostAutoMaxElements elements in its tensors; else the device reference (and the
//            device reference if the host one fails)
//   kHost    the host reference only; a graph over host_max_macs is refused (kNotSupported) before the GPU
//            is touched
//   kDevice  the device reference only
//   kBoth    both, each reported; a graph over host_max_macs gets a NotSupported host entry saying so
enum class ReferenceChoice { kAuto, kHost, kDevice, kBoth };
constexpr int64_t kHostAutoMaxElements = int64_t{1} << 22;
inline constexpr EnumName<ReferenceChoice> kReferenceChoiceNames[] = {{ReferenceChoice::kAuto, "auto"},
                                                                      {ReferenceChoice::kHost, "host"},
                                                                      {ReferenceChoice::kDevice, "device"},
                                                                      {ReferenceChoice::kBoth, "both"}};
const char* reference_choice_name(ReferenceChoice c);                       // kReferenceChoiceNames' name
StatusOr<ReferenceChoice> parse_reference_choice(const std::string& name);  // InvalidArgument naming the choices

struct RunOptions {
  uint64_t seed = 1;
  std::string inputs_dir;          // <tensor name>.bin raw files (encode() bytes); empty: seeded random
  std::string save_outputs_dir;    // write <tensor name>.bin for each output; empty: don't
  bool overwrite_outputs = false;  // replace existing <tensor name>.bin files there (else refused before the run)
  bool verify = false;
  ReferenceChoice reference = ReferenceChoice::kAuto;      // with verify
  double host_max_macs = HostReferenceOptions().max_macs;  // the host reference's cost cap (> 0)
  CheckOptions check;
  std::optional<EngineConfig> pin;
  std::string store_path;  // empty: no store; else opened for writing (a miss queued, a re-tune stored)
  // What a store miss, stale or corrupt record does (PlannerOptions::policy, docs/store.md "Mismatch
  // policies"): kHeuristicsAndQueue runs cuDNN's heuristic plan and queues a re-tune; kRetune tunes now
  // (`retune`), stores and runs the winner (heuristics where tuning finds none, with why); kFail refuses a
  // stale record (FailedPrecondition naming the fields; a plain miss runs heuristics).
  EnvPolicy policy;
  RetuneNowOptions retune;  // how to tune when policy.on_mismatch is kRetune
};

struct RunReport {
  // Where the Planner got the plan: kStore, kHeuristics, kPinned, kTuned, kBucket (a dynamic graph's other
  // tuned shape) or kSegments.
  PlanSource plan_source = PlanSource::kHeuristics;
  std::vector<std::string> reasons;
  EngineConfig config;  // with "segments": unset (see `segments`)
  // A graph cuDNN cannot fuse whole runs as fused segments (kiln/runtime/segments.h), each obtained like a graph
  // of its own (store -> heuristics): "<segment>: <identity> from <source>", in run order.
  std::vector<std::string> segments;
  int64_t workspace_bytes = 0;
  double obtain_ms = 0;
  double run_ms = 0;  // one execution, host wall clock (includes launch)
  // The outputs on the host, when they were needed there (save_outputs_dir, or a host reference check);
  // empty otherwise: with random inputs and the device reference nothing the size of a tensor crosses
  // to the host (inputs generated on the device, the comparison made there).
  std::vector<HostTensor> outputs;
  // With verify, one entry per reference consulted (host before device). A reference that refused the
  // graph (the host's MAC cap) has verdict kNotSupported, no report, and says why in `message`.
  struct ReferenceCheck {
    ReferenceKind kind = ReferenceKind::kHost;
    Disposition verdict = Disposition::kNotVerified;
    std::optional<CheckReport> report;
    std::string message;
  };
  std::vector<ReferenceCheck> checks;
  std::optional<CheckReport> check;  // with verify: the first report in `checks`
  // The references that ran and reported (a refused one does not count), in order: {kHost, kDevice} for
  // --reference both; empty without verify.
  std::vector<ReferenceKind> references_run;
  // Incorrect or Failed if any reference says so, else Passed if one ran, else NotSupported (none could
  // run) or NotVerified (no verify).
  Disposition verdict() const;
};

StatusOr<RunReport> run_graph(const Graph& graph, const RunOptions& options);

}  // namespace kiln
