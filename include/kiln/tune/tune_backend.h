// kiln/tune/tune_backend.h: the seam between the autotuner's decisions (kiln/tune/tuner.h: which candidates, in what
// order, what each one's disposition is, what is timed, what wins, what the budget and an interrupt
// cut) and the machine that builds, runs, checks and times candidates. The real backend drives cuDNN on
// the GPU (make_cudnn_backend); a test gives a fake one, so that every decision is tested on the host.
//
// A backend never decides a disposition: it reports what happened (a Status, a CheckReport, a
// Measurement) and the tuner maps it, the same way for every backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/lower/lower.h"
#include "kiln/measure/measure.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace kiln {

struct TuneOptions;
struct GraphEvaluation;  // the inputs and reference of one graph, on the device (src/tune/evaluation.h)

class TuneBackend {
 public:
  virtual ~TuneBackend() = default;

  // Every engine configuration offered for the graph, in enumeration order (the tuner filters them).
  virtual StatusOr<std::vector<CandidateInfo>> candidates(const std::vector<HeuristicMode>& modes) = 0;

  // Builds candidate `index` (its configuration `config`) and returns its workspace size. Called from
  // several host threads at once, with distinct `worker`s in [0, workers) and distinct indices.
  // kNotSupported when the configuration is refused; any other error is a failed build.
  virtual StatusOr<int64_t> build(size_t worker, size_t index, const EngineConfig& config) = 0;

  // Makes the inputs and, when `verify`, the reference, once for all candidates (concurrently with the
  // builds). Returns the reference's kind ("device", "host"), or "none" when no reference could be made
  // (candidates are then NotVerified).
  virtual StatusOr<ReferenceKind> prepare(bool verify) = 0;

  // Runs built candidate `index` once on poisoned outputs and, after prepare() found a reference, checks
  // its outputs against it. An error (or a thrown exception) is a failed run.
  virtual StatusOr<CheckReport> run_and_check(size_t index) = 0;
  // Runs it once, unchecked (no reference).
  virtual Status run_once(size_t index) = 0;

  // Times built candidate `index` with the shared measurement module's method.
  virtual StatusOr<Measurement> time(size_t index, const MeasureOptions& options) = 0;

  // The serialized plan of built candidate `index` (for the store).
  virtual StatusOr<std::vector<uint8_t>> serialize(size_t index) = 0;

  // Drops what built candidate `index` holds; the tuner calls it once the candidate cannot win.
  virtual void release(size_t index) { (void)index; }

  // The runtime-compiled candidates this tune may build (after --exclude, --top-k and a pin), before the first
  // build(): the cuDNN backend starts its build helpers here when there are two or more.
  virtual void will_build(const std::vector<EngineConfig>& runtime_compiled) { (void)runtime_compiled; }

  // How many runtime-compiled candidates build side by side: 1 (cuDNN compiles one at a time per process), or
  // with build helpers (kiln/tune/build_helpers.h) one more per helper. Asked once the candidates are listed; the
  // candidate budget compiles its first `first` per lane.
  virtual int build_lanes() const { return 1; }

  // No build() comes after this (every candidate built, or the rest left): what only builds use may go (the
  // cuDNN backend ends its build helpers here, while the last candidates are still timed). May come twice.
  virtual void end_builds() {}

  // Which inputs prepare() used ("random seed N", "files DIR"; empty when unknown).
  virtual std::string inputs_description() const { return ""; }

  // The inputs and reference prepare() made, to share with the unfused alternative (null if none).
  virtual std::shared_ptr<const GraphEvaluation> evaluation() const { return nullptr; }

  // Work per execution, for TFLOP/s and GB/s in reports (0: unknown).
  virtual double work_flops() const { return 0; }
  virtual double work_bytes() const { return 0; }
};

// The cuDNN backend for `graph` on the current device. Inputs are generated on the device
// (generate_inputs_on_device, seed options.seed), the reference is the device reference kept on the
// device (the host reference with options.host_reference), and each candidate is compared on the device
// (DeviceChecker): nothing host-side per candidate grows with the tensors.
StatusOr<std::unique_ptr<TuneBackend>> make_cudnn_backend(const Graph& graph, const TuneOptions& options);

}  // namespace kiln
