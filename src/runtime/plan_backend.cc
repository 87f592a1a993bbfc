// PlanBackend's defaults (kiln/runtime/plan_backend.h): what a backend that cannot do something answers.
#include "kiln/runtime/plan_backend.h"

#include "kiln/runtime/shadow_lane.h"
#include "kiln/store/plan_record.h"

namespace kiln {

// ---- Padded plans ---------------------------------------------------------------------------------

Status PlanBackend::warm_up(const ExecutablePlan&) { return Status::ok(); }
Status PlanBackend::warm_concurrency() { return Status::ok(); }
StatusOr<SegmentDecision> PlanBackend::segments(const Graph&) { return SegmentDecision{}; }
void PlanBackend::queue_retune(const Graph&, const GraphSignature&, const std::string&, std::string*) {}
Status PlanBackend::save_kernel_cache(const GraphSignature&, const std::string&) { return Status::ok(); }
KernelCacheCounts PlanBackend::kernel_cache_counts() const { return {}; }
StatusOr<std::vector<StoredPlanKey>> PlanBackend::changed_plans() { return std::vector<StoredPlanKey>(); }
StatusOr<std::optional<FusionRecord>> PlanBackend::fusion_record(const GraphSignature&) {
  return std::optional<FusionRecord>();
}

StatusOr<std::shared_ptr<const ExecutablePlan>> PlanBackend::tune(const Graph& graph, const GraphSignature&,
                                                                  const PromotionTuning&, const std::atomic<bool>*,
                                                                  std::string*) {
  return not_supported("graph '" + graph.name + "': this plan backend cannot tune");
}

StatusOr<EnvFingerprint> PlanBackend::environment() const {
  return failed_precondition("this plan backend has no environment");
}
Status PlanBackend::with_writable_store(const std::function<Status(PlanStore&)>&) {
  return failed_precondition("this plan backend has no writable store");
}
Status PlanBackend::compile(const Graph&, const GraphSignature&, const std::optional<EngineConfig>&, CompiledPart*,
                            PlanRecord*) {
  return not_supported("this plan backend does not compile plans");
}
StatusOr<FirstUseVerdict> PlanBackend::verify_first_use(const ExecutablePlan&) {
  return not_supported("this plan backend cannot verify plans (set PlannerOptions::first_use to kOff to serve them "
                       "unverified)");
}

StatusOr<std::optional<PlanRecord>> PlanBackend::shadow_record(const GraphSignature&) {
  return std::optional<PlanRecord>();
}
StatusOr<std::unique_ptr<ShadowLane>> PlanBackend::shadow_lane(size_t device_bytes, size_t host_bytes) {
  return make_cuda_shadow_lane(device_bytes, host_bytes);
}

StatusOr<std::vector<EngineConfig>> PlanBackend::heuristic_configs(const Graph&) { return std::vector<EngineConfig>(); }

PlanBackend::DeviceCopy PlanBackend::device_copy() const {
  return [](void* dst, const void* src, size_t bytes, cudaStream_t stream) -> Status {
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess)
      return internal_error(std::string("padded plan: cudaMemcpyAsync of ") + std::to_string(bytes) +
                            " bytes: " + cudaGetErrorString(e));
    return Status::ok();
  };
}

}  // namespace kiln
