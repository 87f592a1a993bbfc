// The Planner's first-use gate (first_use.h).
#include "runtime/first_use.h"

#include <algorithm>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/dropout_probe.h"

namespace kiln::runtime_detail {
namespace {

// Plans whose configuration passed the numerics gate before they reach the caller: a tune checks every
// candidate it times, the split and padded stopgaps run the structure's tuned plans at their tuned shapes, and a
// chain of plans (an unfused chain from a stored fusion decision, a graph run as its segments) is made of parts
// the Planner admitted one by one (its intermediates are stored in memory by design, which the whole graph's
// gate would count as error).
bool known_to_pass(const ExecutablePlan& plan, PlanSource source) {
  return source == PlanSource::kTuned || source == PlanSource::kSplit || source == PlanSource::kPadded ||
         !plan.parts().empty();
}

}  // namespace

Status FirstUseGate::admit(const ExecutablePlan& plan, PlanSource source, const std::string& graph_name) {
  if (mode_ == FirstUse::kOff || known_to_pass(plan, source)) return Status::ok();
  const std::string key = first_use_key(plan);
  auto refusal = [&](const FirstUseVerdict& v) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return check_failed("graph '" + graph_name + "': plan " + plan.identity() + " (from " + plan_source_name(source) +
                        ") failed first-use verification in this environment and is not served: " + v.summary +
                        " (`kiln tune` finds a configuration that passes)");
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = verdicts_.find(key);
    if (it != verdicts_.end()) return it->second.passed ? Status::ok() : refusal(it->second);
  }
  StatusOr<FirstUseVerdict> v = backend_->verify_first_use(plan);
  if (!v.is_ok())
    return v.status().with_context("graph '" + graph_name + "': first-use verification of plan " + plan.identity() +
                                   " (PlannerOptions::first_use)");
  if (v->ran) checks_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  verdicts_.emplace(key, *v);
  if (v->passed) return Status::ok();
  last_failure_ = plan.identity() + " for graph '" + graph_name + "': " + v->summary;
  return refusal(*v);
}

StatusOr<CheckReport> check_plan_on_device(const ExecutablePlan& plan, const CheckOptions& check, uint64_t seed) {
  const Graph& g = plan.graph();
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  // Buffers allocated here and poisoned on `stream` itself: allocate_graph_buffers poisons on the legacy default
  // stream, which `stream` is not ordered after (the poison landed after the plan on the H200: every output NaN),
  // and waiting for the whole device would stall a service's other streams.
  KILN_ASSIGN_OR_RETURN(GraphBuffers buffers,
                        allocate_graph_buffers(g, std::max<int64_t>(plan.workspace_bytes(), 16), stream.get()));
  KILN_RETURN_IF_ERROR(generate_inputs_on_device(g, seed, buffers.pointers(), stream.get()));
  auto run = [&] { return plan.run_unchecked(stream.get(), buffers.pointers(), buffers.workspace.data()); };
  KILN_ASSIGN_OR_RETURN(DeviceChecker checker, DeviceChecker::create(g, check));
  // A dropout graph: the reference from the mask the plan draws (kiln/validate/dropout_probe.h).
  if (has_dropout(g)) return check_dropout_plan(g, buffers.pointers(), run, checker, stream.get());
  KILN_RETURN_IF_ERROR(run());
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  KILN_ASSIGN_OR_RETURN(DeviceReference ref, device_reference_on_device(g, buffers.pointers()));
  return checker.check(output_pointers(g, buffers), ref, stream.get());
}

std::string first_use_key(const ExecutablePlan& plan) {
  return plan.signature().structure + "|" + plan.signature().shape_key + "|" + plan.identity();
}

std::string FirstUseGate::last_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_failure_;
}

}  // namespace kiln::runtime_detail
