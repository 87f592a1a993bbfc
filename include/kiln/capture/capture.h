// kiln::CapturedSequence: a sequence of Kiln executions (one plan or many, from one Planner) recorded into a
// CUDA graph and replayed on a stream (docs/runtime.md, "CUDA Graphs"). Launch overhead dominates small
// shapes and chains of small ops; one graph launch replaces a launch per plan.
//
//   KILN_ASSIGN_OR_RETURN(auto seq, CapturedSequence::create(*planner, {{conv.plan, {{"x", {x}}, ...}, ws}}));
//   KILN_RETURN_IF_ERROR(seq->capture(stream));       // optional: replay() captures on first use
//   for (...) KILN_RETURN_IF_ERROR(seq->replay(stream));
//   KILN_RETURN_IF_ERROR(seq->rebind(steps_on_new_buffers, stream));  // update in place, or re-instantiate
//
// What is captured is each step's ExecutablePlan::execute(): the tuned plan the Planner holds, never the
// frontend's own graph population. Capture is stream capture (cudaStreamBeginCapture) on a stream the
// caller created; the legacy default stream cannot be captured. A capture that fails ends the capture and
// discards its graph: no stream is left capturing.
//
// Data pointers only: rebind() takes new bindings for the same plans, records them again and updates the
// executable graph in place (cudaGraphExecUpdate); when CUDA refuses the update the graph is instantiated
// again, and the stats say so (update_refusals, reinstantiations, last_refusal).
//
// Off switch: PlannerOptions::cuda_graphs (per Planner) or CaptureOptions::cuda_graphs (per sequence). Off,
// replay() launches the steps on the stream one by one (execute()), and nothing is captured.
//
// Stopgaps: a sequence records the plans it is given. A dynamic-shape stopgap (PlanSource::kDynamic) stays
// in the sequence after the Planner promotes it (create() logs a warning): obtain the plan again and make
// a new sequence to replay the promoted, tuned plan.
//
// Lifetimes: the sequence holds its plans (and so the Planner's cuDNN handles); the caller keeps every bound
// buffer and workspace alive and unchanged in size while the sequence may replay on them. Replays read
// the buffers at the time they run on the GPU, as a stream launch would.
//
// Threads: every method takes the sequence's lock, so a sequence may be shared; calls are serialized (a
// replay waits for a rebind). Replays on several streams are ordered by CUDA behind each other's launches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/runtime/planner.h"

namespace kiln {

// One execution: a plan, the caller's buffers bound by tensor name, and its workspace (null when the plan
// needs none). Steps run in order; each may read what an earlier one wrote.
struct CaptureStep {
  std::shared_ptr<const ExecutablePlan> plan;
  TensorBindings tensors;
  void* workspace = nullptr;
};

// cudaStreamCaptureModeThreadLocal (default): a call CUDA deems unsafe during capture (a synchronous
// cudaMalloc, a stream query) from this thread fails the capture instead of silently escaping it; other
// threads are unaffected. kRelaxed allows those calls (for code that must make them while capturing).
// Either way the capture holds the capture gate (kiln/cuda/capture_gate.h): Kiln's device-synchronizing
// work on other threads (a Planner's background builds, first-use checks) waits until it ends.
enum class CaptureMode { kThreadLocal, kRelaxed };
inline constexpr EnumName<CaptureMode> kCaptureModeNames[] = {{CaptureMode::kThreadLocal, "thread-local"},
                                                              {CaptureMode::kRelaxed, "relaxed"}};
const char* capture_mode_name(CaptureMode m);  // kCaptureModeNames' name

struct CaptureOptions {
  std::optional<bool> cuda_graphs;  // unset: the Planner's PlannerOptions::cuda_graphs
  CaptureMode mode = CaptureMode::kThreadLocal;
  // Before the first capture, each step runs once on the stream, eagerly: kernels load (lazy module
  // loading) and cuDNN settles outside the capture. The outputs are written then, as by a replay.
  bool warm_up = true;
  // false: rebind() always instantiates the graph again (to compare the two; the stats count each).
  bool update_in_place = true;
};

struct CaptureStats {
  bool graphs = true;            // replays come from a CUDA graph (false: stream launches)
  int64_t captures = 0;          // sequences recorded into a graph (first capture and every rebind)
  int64_t instantiations = 0;    // executable graphs made (the first, plus reinstantiations)
  int64_t replays = 0;           // graph launches
  int64_t stream_runs = 0;       // sequences launched step by step (graphs off)
  int64_t rebinds = 0;           // rebind() calls that succeeded
  int64_t updates = 0;           // rebinds applied in place (cudaGraphExecUpdate)
  int64_t update_refusals = 0;   // updates CUDA refused (each followed by a re-instantiation)
  int64_t reinstantiations = 0;  // rebinds that instantiated again (refused, or update_in_place off)
  std::string last_refusal;      // why the last refused update was refused ("" when none was)
  // "graphs: 2 captures, 1 instantiation, 100 replays; 1 rebind: 1 update, 0 refused, 0 re-instantiations"
  // or "graphs off: 100 stream runs".
  std::string text() const;
};

class CapturedSequence {
 public:
  // Checks every step (a plan, its bindings and workspace: ExecutablePlan::check_call) before anything
  // touches the GPU: InvalidArgument naming the step and the tensor. An empty sequence is refused. Plans
  // should come from `planner`, whose cuda_graphs switch applies unless `options` sets one.
  static StatusOr<std::unique_ptr<CapturedSequence>> create(const Planner& planner, std::vector<CaptureStep> steps,
                                                            const CaptureOptions& options = {});
  ~CapturedSequence();
  CapturedSequence(const CapturedSequence&) = delete;
  CapturedSequence& operator=(const CapturedSequence&) = delete;

  // Records the steps on `stream` (one the caller created, not capturing already) into a graph and
  // instantiates it; again after a capture, records and instantiates anew. Graphs off: nothing to do.
  Status capture(cudaStream_t stream);
  // The sequence on `stream`: one graph launch (capturing first, on `stream`, if not captured yet), or
  // graphs off, each step's execute() in order.
  Status replay(cudaStream_t stream);
  // New bindings (and workspaces) for the same plans, in the same order: InvalidArgument otherwise, and for
  // a bad binding; the sequence then keeps its old bindings. Captured already: records again on `stream`
  // and updates the executable graph in place, or instantiates it again when CUDA refuses the update (or
  // update_in_place is off). On an error the old graph and bindings stay.
  Status rebind(std::vector<CaptureStep> steps, cudaStream_t stream);

  bool uses_graphs() const;
  bool captured() const;  // an executable graph is ready
  size_t size() const;    // steps
  CaptureStats stats() const;

 private:
  struct Impl;
  explicit CapturedSequence(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
