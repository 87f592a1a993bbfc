// CapturedSequence (kiln/capture/capture.h): steps checked on the host, recorded by stream capture into a CUDA
// graph, instantiated once, launched per replay; rebinds recorded again and applied by cudaGraphExecUpdate.
#include "kiln/capture/capture.h"

#include <atomic>
#include <mutex>
#include <utility>

#include "kiln/core/log.h"
#include "kiln/cuda/cuda_graph.h"

namespace kiln {

const char* capture_mode_name(CaptureMode m) { return enum_name(kCaptureModeNames, m); }

namespace {

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string step_name(size_t i, const CaptureStep& s) {
  return "step " + std::to_string(i) + (s.plan ? " (graph '" + s.plan->graph().name + "')" : std::string());
}

Status check_steps(const std::vector<CaptureStep>& steps) {
  if (steps.empty()) return invalid_argument("a captured sequence needs at least one step");
  for (size_t i = 0; i < steps.size(); ++i) {
    const CaptureStep& s = steps[i];
    if (!s.plan) return invalid_argument(step_name(i, s) + ": no plan");
    Status st = s.plan->check_call(s.tensors, s.workspace);
    if (!st.is_ok()) return st.with_context(step_name(i, s));
  }
  return Status::ok();
}

Status launch_steps(cudaStream_t stream, const std::vector<CaptureStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    Status st = steps[i].plan->execute(stream, steps[i].tensors, steps[i].workspace);
    if (!st.is_ok()) return st.with_context(step_name(i, steps[i]));
  }
  return Status::ok();
}

const char* update_result_words(cudaGraphExecUpdateResult r) {
  switch (r) {
    case cudaGraphExecUpdateSuccess: return "success";
    case cudaGraphExecUpdateError: return "an invalid value";
    case cudaGraphExecUpdateErrorTopologyChanged: return "the graph's topology changed";
    case cudaGraphExecUpdateErrorNodeTypeChanged: return "a node's type changed";
    case cudaGraphExecUpdateErrorFunctionChanged: return "a kernel node's function changed";
    case cudaGraphExecUpdateErrorParametersChanged: return "a node's parameters changed beyond an update";
    case cudaGraphExecUpdateErrorNotSupported: return "something in the graph cannot be updated";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange: return "a kernel's function changed unsupportedly";
    case cudaGraphExecUpdateErrorAttributesChanged: return "a node's attributes changed";
  }
  return "an unknown reason";
}

// Records `steps` on `stream` into a graph (kiln/cuda/cuda_graph.h: the stream never stays capturing).
StatusOr<UniqueGraph> record(cudaStream_t stream, const std::vector<CaptureStep>& steps, CaptureMode mode) {
  StatusOr<UniqueGraph> g =
      capture_graph(stream, mode == CaptureMode::kRelaxed, [&] { return launch_steps(stream, steps); });
  if (!g.is_ok())
    return g.status().with_context("capturing " + plural(static_cast<int64_t>(steps.size()), "step", "steps") +
                                   " (mode " + capture_mode_name(mode) + ")");
  return g;
}

}  // namespace

std::string CaptureStats::text() const {
  if (!graphs) return "graphs off: " + plural(stream_runs, "stream run", "stream runs");
  std::string s = "graphs: " + plural(captures, "capture", "captures") + ", " +
                  plural(instantiations, "instantiation", "instantiations") + ", " +
                  plural(replays, "replay", "replays") + "; " + plural(rebinds, "rebind", "rebinds") + ": " +
                  plural(updates, "update", "updates") + ", " + std::to_string(update_refusals) + " refused, " +
                  plural(reinstantiations, "re-instantiation", "re-instantiations");
  if (!last_refusal.empty()) s += " (last refusal: " + last_refusal + ")";
  return s;
}

struct CapturedSequence::Impl {
  mutable std::mutex mu;
  std::vector<CaptureStep> steps;
  CaptureOptions options;
  bool graphs = true;
  bool warmed = false;
  UniqueGraphExec exec;  // independent of the graph it was made from (which is dropped once used)
  CaptureStats stats;
  std::shared_ptr<GraphCounters> totals;  // the Planner's, summed over its sequences

  // One more of `field` here and in the Planner's totals.
  void count(int64_t CaptureStats::*field, std::atomic<int64_t> GraphCounters::*total) {
    ++(stats.*field);
    ((*totals).*total).fetch_add(1, std::memory_order_relaxed);
  }

  Status warm_up(cudaStream_t stream) {
    if (warmed || !options.warm_up) return Status::ok();
    KILN_RETURN_IF_ERROR(launch_steps(stream, steps));
    warmed = true;
    return Status::ok();
  }

  Status capture_locked(cudaStream_t stream) {
    // Before the warm-up: a stream that is capturing already would record the warm-up into its graph.
    KILN_RETURN_IF_ERROR(check_capturable(stream));
    KILN_RETURN_IF_ERROR(warm_up(stream));
    KILN_ASSIGN_OR_RETURN(UniqueGraph g, record(stream, steps, options.mode));
    count(&CaptureStats::captures, &GraphCounters::captures);
    KILN_ASSIGN_OR_RETURN(UniqueGraphExec e, instantiate_graph(g.get()));
    count(&CaptureStats::instantiations, &GraphCounters::instantiations);
    exec = std::move(e);
    return Status::ok();
  }
};

CapturedSequence::CapturedSequence(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CapturedSequence::~CapturedSequence() = default;

StatusOr<std::unique_ptr<CapturedSequence>> CapturedSequence::create(const Planner& planner,
                                                                     std::vector<CaptureStep> steps,
                                                                     const CaptureOptions& options) {
  KILN_RETURN_IF_ERROR(check_steps(steps));
  auto impl = std::make_unique<Impl>();
  impl->steps = std::move(steps);
  impl->options = options;
  impl->graphs = options.cuda_graphs.value_or(planner.options().cuda_graphs);
  impl->stats.graphs = impl->graphs;
  impl->totals = planner.graph_counters();
  for (size_t i = 0; i < impl->steps.size(); ++i)
    if (plan_source_is_stopgap(impl->steps[i].plan->built_from()))
      KILN_LOG(kWarn, step_name(i, impl->steps[i]) << ": a " << plan_source_name(impl->steps[i].plan->built_from())
                                                   << " stopgap; the sequence keeps it after the Planner promotes it "
                                                      "(obtain the plan again and make a new sequence then)");
  return std::unique_ptr<CapturedSequence>(new CapturedSequence(std::move(impl)));
}

Status CapturedSequence::capture(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->graphs) return Status::ok();
  return impl_->capture_locked(stream);
}

Status CapturedSequence::replay(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->graphs) {
    KILN_RETURN_IF_ERROR(launch_steps(stream, impl_->steps));
    impl_->count(&CaptureStats::stream_runs, &GraphCounters::stream_runs);
    return Status::ok();
  }
  if (!impl_->exec) KILN_RETURN_IF_ERROR(impl_->capture_locked(stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(impl_->exec.get(), stream));
  impl_->count(&CaptureStats::replays, &GraphCounters::replays);
  return Status::ok();
}

Status CapturedSequence::rebind(std::vector<CaptureStep> steps, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  if (steps.size() != m.steps.size())
    return invalid_argument("rebind gives " + plural(static_cast<int64_t>(steps.size()), "step", "steps") +
                            " to a sequence of " + std::to_string(m.steps.size()) +
                            ": a rebind changes buffers only (make a new sequence for other plans)");
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].plan != m.steps[i].plan)
      return invalid_argument(step_name(i, steps[i]) +
                              ": another plan than the sequence's: a rebind changes buffers only (make a new "
                              "sequence for other plans)");
  KILN_RETURN_IF_ERROR(check_steps(steps));
  if (!m.graphs || !m.exec) {  // nothing recorded yet: the next capture takes the new bindings
    m.steps = std::move(steps);
    ++m.stats.rebinds;
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(UniqueGraph g, record(stream, steps, m.options.mode));
  m.count(&CaptureStats::captures, &GraphCounters::captures);
  bool updated = false;
  if (m.options.update_in_place) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t err = cudaGraphExecUpdate(m.exec.get(), g.get(), &info);
    if (err == cudaSuccess) {
      updated = true;
      m.count(&CaptureStats::updates, &GraphCounters::updates);
    } else if (err == cudaErrorGraphExecUpdateFailure) {
      (void)cudaGetLastError();
      m.count(&CaptureStats::update_refusals, &GraphCounters::update_refusals);
      m.stats.last_refusal = update_result_words(info.result);
    } else {
      (void)cudaGetLastError();
      return cuda_status(err, "cudaGraphExecUpdate");
    }
  }
  if (!updated) {
    KILN_ASSIGN_OR_RETURN(UniqueGraphExec e, instantiate_graph(g.get()));
    m.count(&CaptureStats::instantiations, &GraphCounters::instantiations);
    m.count(&CaptureStats::reinstantiations, &GraphCounters::reinstantiations);
    m.exec = std::move(e);
  }
  m.steps = std::move(steps);
  ++m.stats.rebinds;
  return Status::ok();
}

bool CapturedSequence::uses_graphs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->graphs;
}

bool CapturedSequence::captured() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->exec != nullptr;
}

size_t CapturedSequence::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->steps.size();
}

CaptureStats CapturedSequence::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kiln
