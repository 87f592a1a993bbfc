// PlanBackend: where the Planner's plans come from (cuDNN and the plan store: make_cudnn_plan_backend, or a
// fake in host tests). The Planner's sources (src/runtime/sources/) ask it; nothing above the runtime does.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/runtime/plan_types.h"
#include "kiln/runtime/segments.h"
#include "kiln/store/fusion_record.h"
#include "kiln/store/plan_lookup.h"

namespace kiln {

class PlanStore;
struct PlanRecord;
class ShadowLane;
struct CompiledPart;
struct PlannerOptions;

// How a promotion tunes (PromoteBy::kTune), and obtain() under MismatchPolicy::kRetune: bounded, since it shares the
// GPU with the service.
struct PromotionTuning {
  // cuDNN heuristic mode A's first k configurations; 0: every configuration of modes A, B and FALLBACK, as
  // kiln tune (with the first 8 only, a conv size's promoted plan ran 5% slower than its full tune's on
  // the H200, 2026-12-02).
  int top_k = 0;
  // Every runtime-compiled candidate, not the candidate budget's (kiln/tune/tune_policy.h), which ranks first what
  // the store saw win at the structure's other shapes.
  bool exhaustive = false;
  double time_budget_s = 10.0;                     // per shape, builds and timing included (0: none); finite, >= 0
  int build_threads = 2;                           // host threads for its candidates' builds
  int64_t max_workspace_bytes = int64_t{1} << 30;  // candidates needing more are skipped (< 0: no limit)
  // The share of the GPU's time the tune may take, in (0, 1] (TuneOptions::gpu_share): after each
  // candidate's device work it rests that work's time x (1/gpu_share - 1). 0.25: the tune keeps the device
  // busy at most a quarter of the time, so requests on other streams meet it less often.
  double gpu_share = 1.0;
  // Sampling budget of each candidate's timing in ms (> 0), or 0: the tuner's own (kiln/tune/tuner.h).
  double candidate_budget_ms = 0;
  uint64_t seed = 1;  // the numerics gate's seeded random inputs
  // Also store the winner (a second connection to the Planner's store, opened for writing): as tuned, or
  // untuned where the time budget cut the tune short (its winner is then the best of those it reached).
  bool store = false;
};
// The background tune shares the GPU with the service: its inputs, reference and candidates allocate
// device memory, and it synchronizes the whole device between steps (cudaDeviceSynchronize, cudaFree), so
// requests on other streams wait at those points, and a CUDA graph being captured on another stream
// meanwhile may be invalidated. Bound it (top_k, time_budget_s, max_workspace_bytes, gpu_share) or promote by build
// where that matters.

// Where the Planner's plans come from: cuDNN and the plan store (make_cudnn_plan_backend), or a fake in
// host tests. Called outside the Planner's locks, from many threads.
struct KernelCacheCounts {
  int64_t loaded = 0;     // structures whose kernel cache came from the store
  int64_t saved = 0;      // kernel caches written to the store
  std::string last_note;  // the last kept cache that did not load or could not be written, and why
  // The store's mirror (a server store): lookups it answered while the server was unreachable, and that
  // server's last error ("" while it answers).
  int64_t store_mirror_hits = 0;
  std::string store_unreachable;
};

// What first-use verification found for one plan (PlanBackend::verify_first_use; PlannerOptions::first_use).
struct FirstUseVerdict {
  bool passed = false;
  bool ran = false;     // false: known without running it (a record tuned in this environment)
  std::string summary;  // the numerics gate's summary, or how it was known
};

class PlanBackend {
 public:
  virtual ~PlanBackend() = default;
  // The stored plan for exactly this key, runnable in this environment; null (with `why` set) when the
  // store has none or its record may not run here.
  virtual StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& graph, const GraphSignature& sig,
                                                                     std::string* why) = 0;
  // Tuned configurations stored for this structure (every shape key), current in this environment.
  virtual StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature& sig) = 0;
  // A plan built for this graph: with `config` exactly, or from cuDNN's heuristics when unset.
  virtual StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& graph, const GraphSignature& sig,
                                                                const std::optional<EngineConfig>& config,
                                                                PlanSource source) = 0;
  // Runs `plan` once on scratch buffers of its own (zeroed), so that its first execution for a caller
  // does not pay the kernels' first load (about 1 ms a plan on the H200, 15 ms for a module's first
  // kernel), nor the padded stopgaps' copies theirs (device_copy: about 1 ms for the process's first).
  // Planner::preload calls it when asked to warm. The default has nothing to warm.
  virtual Status warm_up(const ExecutablePlan& plan);
  // Makes now what calls that overlap later would make on their way (the cuDNN handles of the pool, up to
  // PlannerOptions::handles): a promotion building beside a request's first execution, or two requests at
  // once, then find them made. Planner::preload calls it when asked to warm. The default has nothing to make.
  virtual Status warm_concurrency();
  // How a padded plan copies between the caller's buffers and its scratch, in stream order: a plain
  // function, since plans may outlive their backend. The default is cudaMemcpyAsync, device to device.
  using DeviceCopy = Status (*)(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  virtual DeviceCopy device_copy() const;
  // This exact shape tuned within `tuning`'s bounds (PromoteBy::kTune): its winner as a plan (built_from
  // kTuned), stored when tuning.store; null with the reason in `why` where the tune found no winner or was
  // cancelled (`cancel` set: the Planner is being destroyed). A winner that could not be stored is still
  // returned, the reason in `why`. The default: NotSupported (a backend that cannot tune).
  virtual StatusOr<std::shared_ptr<const ExecutablePlan>> tune(const Graph& graph, const GraphSignature& sig,
                                                               const PromotionTuning& tuning,
                                                               const std::atomic<bool>* cancel, std::string* why);

  // The store's fusion decision for exactly this key (kiln/store/fusion_record.h), usable in this environment:
  // nullopt when there is none (the fused plan serves). The default: none.
  virtual StatusOr<std::optional<FusionRecord>> fusion_record(const GraphSignature& sig);

  // Whether `graph` must run as its fused segments (kiln/runtime/segments.h segments_if_unfusable): none (the
  // whole graph is planned) or the segments and why. The default: none (a backend without cuDNN).
  virtual StatusOr<SegmentDecision> segments(const Graph& graph);
  // After the store could not serve `graph` (`look`: what it found) under MismatchPolicy::kHeuristicsAndQueue:
  // queues a re-tune of the key in the store (kiln/runtime/retune.h queue_retune) and says so in `note`
  // ("queued for re-tune (requested 2 times)", or "not queued for re-tune: <why>"). The default: nothing.
  virtual void queue_retune(const Graph& graph, const GraphSignature& sig, const std::string& why_missed,
                            std::string* note);

  // For the Planner's jobs (kiln/runtime/planner_jobs.h). The environment plans are made for: collected once, or
  // the recorded profile's (PlannerOptions::target). The default: FailedPrecondition.
  virtual StatusOr<EnvFingerprint> environment() const;
  // Runs `fn` on the store opened for writing (opened, and created, on first use), one caller at a time.
  // The default: FailedPrecondition (a backend without a writable store).
  virtual Status with_writable_store(const std::function<Status(PlanStore&)>& fn);
  // Keeps the structure's dynamic-shape kernel cache in the store (kiln/store/kernel_cache_record.h) when it
  // holds kernels the store lacks and PlannerOptions::save_kernel_caches is set; the Planner calls it after
  // promoting a dynamic stopgap, and from save_kernel_caches(). The default: nothing to keep.
  virtual Status save_kernel_cache(const GraphSignature& sig, const std::string& graph_name);
  // Kernel caches loaded from the store and kept in it, and the last thing that went wrong with one.
  virtual KernelCacheCounts kernel_cache_counts() const;
  // Plans of this environment that other processes stored since the last call (a server store's notices:
  // PlanStore::changed_plans; structure_sig "*": any may have changed). Default: none.
  virtual StatusOr<std::vector<StoredPlanKey>> changed_plans();
  // First-use verification: `plan` run once on seeded random inputs of its own, its outputs checked against
  // the device reference through the numerics gate (what `kiln run --verify` does), or known to pass without a
  // run (a store record tuned in this environment: its configuration passed the gate when it was tuned). An
  // error (out of memory, say) is not a verdict: the Planner does not serve the plan and asks again next time.
  // The default: NotSupported (a backend that cannot check refuses to serve under FirstUse::kVerify).
  virtual StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan);
  // The engine configurations cuDNN's heuristics offer for `graph` (modes A, then FALLBACK), in their order:
  // what the Planner tries in turn, pinned, when the heuristics' own choice fails first-use verification.
  // The default: none (the refusal stands).
  virtual StatusOr<std::vector<EngineConfig>> heuristic_configs(const Graph& graph);
  // `graph`'s plan built without a device for PlannerOptions::target, exactly as `pin` says when given,
  // else from cuDNN's heuristics: as a store record (untuned) in `part`, with its outcome. The default:
  // NotSupported.
  virtual Status compile(const Graph& graph, const GraphSignature& sig, const std::optional<EngineConfig>& pin,
                         CompiledPart* part, PlanRecord* record);
  // Shadow sampling (docs/rollout.md "Shadow sampling"). The key's plan in shadow (kiln/store/plan_rollout.h) that
  // the store holds for exactly this structure, shape and environment, without its plan bytes; nullopt when none.
  // The default: none.
  virtual StatusOr<std::optional<PlanRecord>> shadow_record(const GraphSignature& sig);
  // A lane to run a shadow plan in (kiln/runtime/shadow_lane.h): `device_bytes` of device scratch, `host_bytes` of
  // host memory the outputs are read back into. The default: a CUDA lane on the current device.
  virtual StatusOr<std::unique_ptr<ShadowLane>> shadow_lane(size_t device_bytes, size_t host_bytes);
};

// The cuDNN backend (needs a GPU, unless options.target): the store at options.store_path (none when empty), the
// environment collected once, options.handles cuDNN handles.
StatusOr<std::unique_ptr<PlanBackend>> make_cudnn_plan_backend(const PlannerOptions& options);

}  // namespace kiln
