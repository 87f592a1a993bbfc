// kiln::Planner: the runtime's one owner of plans (docs/runtime.md). A long-lived object that holds the
// environment fingerprint (collected once), the plan store, a pool of cuDNN handles and an in-memory cache
// keyed by structure signature and shape key, and answers "a plan for this graph at this shape" from the
// cheapest source that has one:
//   memory      a plan this Planner already holds (a lookup, no lock held across a build)
//   store       the stored plan for exactly this key, when the environment check passes
//   split       (a stopgap, NewShapes::kStopgap) plans of smaller tuned shapes whose rows sum to the shape's
//               (or cover it, a few rows computed twice), each on its own rows of the caller's buffers
//               (kiln/runtime/padding.h "Split stopgaps");
//   padded      (a stopgap) the plan of a larger tuned shape (of the same bucket, or at most twice as large), run on
//               scratch copies where that is exact (kiln/runtime/padding.h); dynamic: a dynamic-shape build. For a
//               shape the structure's tuned shapes do not list, padded goes before the store (whose miss
//               was most of its cost): the promotion asks the store first (docs/runtime.md "Sources").
//   bucket      the tuned engine configuration of the nearest tuned shape in the same bucket
//               (kiln/runtime/bucket_policy.h), built directly for this shape: no heuristics, no tuning
//   heuristics  cuDNN's heuristics
// Concurrent misses for one key build once (single flight); a failure is not cached. Every plan says
// which source served it. Plans execute on the caller's buffers, bound by tensor name and checked first.
//
//   PlannerOptions o; o.store_path = "plans.db";
//   KILN_ASSIGN_OR_RETURN(auto planner, Planner::create(o));
//   KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file("model/conv.json"));
//   KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner->prepare(g));      // validated, signature computed once
//   KILN_ASSIGN_OR_RETURN(Obtained p, planner->obtain(pg, {{"batch", 24}}));
//   KILN_RETURN_IF_ERROR(p.plan->execute(stream, {{"x", {x_ptr, x_bytes}}, {"w", {w_ptr}}, {"y", {y_ptr}}}));
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/segments.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/fusion_record.h"
#include "kiln/validate/numerics.h"

namespace kiln {

// Where a plan came from. kDynamic: built in cuDNN's dynamic-shape mode with the structure's shared kernel
// cache (milliseconds once the structure's kernels are compiled; slower kernels: a stopgap, promoted).
// kPadded: the plan tuned for a larger shape (of the same bucket, or at most twice as large), run on scratch copies of the inputs and
// outputs that carry the dynamic dim (kiln/runtime/padding.h; no build at all; a stopgap, promoted).
// kTuned: tuned for exactly this shape, by the Planner's background promotion (PromoteBy::kTune) or, under
// MismatchPolicy::kRetune, by obtain() itself on the calling thread. kPinned: built with the configuration
// the caller named (obtain_pinned). kSegments: a graph cuDNN cannot fuse whole, run as its fused segments,
// each obtained like a graph of its own (parts() says from where).
// kSplit: plans of smaller tuned shapes whose rows sum to this shape's, each run on its own rows of the
// caller's buffers (kiln/runtime/padding.h "Split stopgaps"; no build, no copies; a stopgap, promoted).
enum class PlanSource { kMemory, kStore, kDynamic, kBucket, kHeuristics, kPadded, kTuned, kPinned, kSegments, kSplit };
constexpr int kPlanSourceCount = 10;
inline constexpr EnumName<PlanSource> kPlanSourceNames[] = {
    {PlanSource::kMemory, "memory"}, {PlanSource::kStore, "store"},           {PlanSource::kDynamic, "dynamic"},
    {PlanSource::kBucket, "bucket"}, {PlanSource::kHeuristics, "heuristics"}, {PlanSource::kPadded, "padded"},
    {PlanSource::kTuned, "tuned"},   {PlanSource::kPinned, "pinned"},         {PlanSource::kSegments, "segments"},
    {PlanSource::kSplit, "split"}};
static_assert(sizeof(kPlanSourceNames) / sizeof(kPlanSourceNames[0]) == kPlanSourceCount);
// "memory", "store", "dynamic", "bucket", "heuristics", "padded", "tuned", "pinned", "segments", "split"
const char* plan_source_name(PlanSource s);
// Inverse of plan_source_name; InvalidArgument naming the text and the choices otherwise.
StatusOr<PlanSource> parse_plan_source(const std::string& name);
// kDynamic, kPadded and kSplit: served until the Planner's background build replaces them.
inline bool plan_source_is_stopgap(PlanSource s) {
  return s == PlanSource::kDynamic || s == PlanSource::kPadded || s == PlanSource::kSplit;
}

// A device buffer the caller binds to a tensor: its pointer and, when known, its size in bytes (0: the
// size is not checked).
struct TensorBinding {
  void* ptr = nullptr;
  size_t bytes = 0;
};
using TensorBindings = std::map<std::string, TensorBinding>;

// Alignment cuDNN expects of every tensor and the workspace.
constexpr size_t kBindingAlignment = 16;

// What runs a built plan (a cuDNN plan on the GPU; a recording fake in host tests). `pointers` is keyed by
// the graph's tensor index.
class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  virtual Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const = 0;
};

// A plan ready to execute: immutable, shared by every thread that obtained it.
class ExecutablePlan {
 public:
  ExecutablePlan(Graph graph, GraphSignature signature, EngineConfig config, int64_t workspace_bytes,
                 PlanSource built_from, std::unique_ptr<PlanExecutor> executor);

  const Graph& graph() const { return graph_; }
  const GraphSignature& signature() const { return signature_; }
  const EngineConfig& config() const { return config_; }
  // The workspace execute() needs, in bytes. Read it for every plan obtained: a padded stopgap's holds its
  // scratch too (kiln/runtime/padding.h), so it differs from, and needs more than, the plan that replaces it, and
  // it is never 0. execute() cannot check a workspace's size: a smaller one is written past.
  int64_t workspace_bytes() const { return workspace_bytes_; }
  PlanSource built_from() const { return built_from_; }  // store, bucket, heuristics, dynamic or padded
  // The bytes tensor `name` spans (its strides' footprint), or NotFound.
  StatusOr<size_t> tensor_bytes(const std::string& name) const;

  // Every graph input and output named exactly once, no other name; each pointer non-null and
  // kBindingAlignment-aligned; each given size at least the tensor's span. InvalidArgument naming the
  // tensor otherwise. Nothing is launched.
  Status check_bindings(const TensorBindings& tensors) const;
  // check_bindings, and the workspace: kBindingAlignment-aligned, and non-null when workspace_bytes() > 0.
  // What execute() checks before it launches (kiln/capture/capture.h checks it before a capture).
  Status check_call(const TensorBindings& tensors, void* workspace) const;
  // check_call, then the plan on `stream`. `workspace` (kBindingAlignment-aligned, at least
  // workspace_bytes()) may be null when workspace_bytes() is 0.
  Status execute(cudaStream_t stream, const TensorBindings& tensors, void* workspace = nullptr) const;
  // The plan on `stream` with pointers by tensor index, nothing checked: for plans made of plans (a padded
  // stopgap, an unfused chain), which check their own call first.
  Status run_unchecked(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const;

  // An unfused chain (kiln/runtime/unfused_plan.h): its parts' plans, in run order; empty for a single plan.
  const std::vector<std::shared_ptr<const ExecutablePlan>>& parts() const { return parts_; }
  void set_parts(std::vector<std::shared_ptr<const ExecutablePlan>> parts) { parts_ = std::move(parts); }
  // What its build noted for the reader: the known cuDNN defects worked around ("known cuDNN defect worked
  // around: ..."), in the order met.
  const std::vector<std::string>& notes() const { return notes_; }
  void set_notes(std::vector<std::string> notes) { notes_ = std::move(notes); }
  // What runs, in words: the configuration's identity ("eng12_k2=1"), or for an unfused chain
  // "unfused[eng1 + eng7_k3=0 + eng2]" ("segments[...]" for a graph run as its fused segments).
  std::string identity() const;

 private:
  Graph graph_;
  GraphSignature signature_;
  EngineConfig config_;
  int64_t workspace_bytes_ = 0;
  PlanSource built_from_ = PlanSource::kHeuristics;
  std::unique_ptr<PlanExecutor> executor_;
  std::map<std::string, int> bound_;     // name -> tensor index of every input and output
  std::map<std::string, size_t> spans_;  // name -> bytes
  std::vector<std::shared_ptr<const ExecutablePlan>> parts_;
  std::vector<std::string> notes_;
};

// A tuned configuration the store holds for a structure, at one shape.
struct TunedShape {
  std::string shape_key;
  std::map<std::string, int64_t> shape;
  EngineConfig config;
};

// How a promotion tunes (PromoteBy::kTune), and obtain() under MismatchPolicy::kRetune: bounded, since it shares the
// GPU with the service.
struct PromotionTuning {
  // cuDNN heuristic mode A's first k configurations; 0: every configuration of modes A, B and FALLBACK, as
  // kiln tune (with the first 8 only, a conv size's promoted plan ran 5% slower than its full tune's on
  // the H200, 2026-12-02).
  int top_k = 0;
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
};

// What replaces a stopgap in the background.
enum class PromoteBy {
  // The bucket's tuned configuration (else heuristics), built statically for the shape: milliseconds, but
  // the representative's configuration is not always the best one at this shape.
  kBuild,
  // The shape tuned like `kiln tune` does (candidates checked against a reference, timed, the winner rule),
  // within PromotionTuning's bounds; where the tune finds no winner, the kBuild plan replaces the stopgap.
  kTune,
};

// What obtain() does for a shape the store does not hold, in a graph with dynamic dims.
enum class NewShapes {
  // Serve a stopgap at once and build the static plan (the bucket's tuned configuration, else heuristics)
  // on a background thread; it replaces the stopgap in the cache when ready (stats: stopgaps, promotions).
  // The stopgap is, in this order:
  //   split    where plans of smaller tuned shapes (equal in the other dims) sum to the shape's rows, or
  //            else cover them with overlapping parts (split_overlap), in at most split_max_parts parts, and
  //            the rows are independent (kiln/runtime/padding.h "Split stopgaps"): those plans, each on its
  //            own rows of the caller's buffers; no copies, no build;
  //   padded   where the bucket has a tuned shape at least as large (or another bucket one at most twice
  //            as large in every dim) and the graph's rows along the dim are independent
  //            (kiln/runtime/padding.h): the nearest such shape's plan on scratch copies, no build at all;
  //   dynamic  a dynamic-shape build with the structure's kernel cache (milliseconds after the first
  //            shape), except where the structure's static builds have proved cheap (under 5 ms: a
  //            precompiled engine): its new shapes are then built statically at once.
  kStopgap,
  // Build the static plan on the calling thread (the bucket's tuned configuration, else heuristics).
  kBuildNow,
};

// PlannerOptions::first_use.
enum class FirstUse { kVerify, kOff };

struct PlannerOptions {
  std::string store_path;  // "" : no store (bucket and store sources then have nothing)
  // Which environment differences a stored record may have, and what obtain() does when the store cannot
  // serve this exact key (a stale, corrupt or unloadable record; at the graph's own dims, the shape its spec
  // declares and `kiln tune SPEC` tunes, also a plain miss: other shapes are the other sources' work, and the
  // recorder's):
  //   kHeuristicsAndQueue  the next sources serve, and the key is queued for re-tune in the store
  //                        (store_writable; a read-only store says "not queued for re-tune: ..." in why)
  //   kRetune              tuned now on the calling thread within `tuning`'s bounds (PlanSource::kTuned,
  //                        stored with store_writable); a tune without a winner falls through to the next
  //                        sources, with why
  //   kFail                a stale record fails obtain() (FailedPrecondition naming the fields); a miss
  //                        falls through
  EnvPolicy policy;
  BucketPolicy buckets;       // per dynamic dim (exact by default)
  bool record_shapes = true;  // count served shapes (recorder())
  int handles = 4;            // cuDNN handles in the pool (execute() takes one per call)
  NewShapes new_shapes = NewShapes::kStopgap;
  bool promote = true;  // false: stopgaps are kept (to measure them; stats count them as held)
  PromoteBy promote_by = PromoteBy::kBuild;
  PromotionTuning tuning;  // with PromoteBy::kTune
  bool padded = true;      // false: no padded stopgaps (a new shape that no split serves gets a dynamic-shape build)
  // false: no split stopgaps (a new shape gets a padded one, else a dynamic-shape build). A split runs one plan
  // per part, so a sum needing more than split_max_parts (2..64) is padded instead.
  bool split = true;
  int split_max_parts = 3;
  // Where no sum of tuned shapes makes the shape, a split may still cover it with overlapping parts (batch 6 as
  // the tuned 4 on rows 0..3 and again on rows 2..5; kiln/runtime/padding.h cover_extents): no copies, a few rows
  // computed twice. Such a plan refuses an execute whose output shares memory with an input (InvalidArgument).
  // On by default; false (callers that run in place should set it): a shape that is no sum gets the next stopgap
  // (padded, else dynamic). No effect with split = false.
  bool split_overlap = true;
  // Sequences of this Planner's plans (kiln/capture/capture.h) replay from CUDA graphs; false: they launch on the
  // stream, step by step (a CaptureOptions may override it per sequence).
  bool cuda_graphs = true;
  // create() starts paying cuDNN's once-per-process first-use work (kiln/runtime/cudnn_primer.h) on a thread of its
  // own, beside the CUDA context's creation, and returns without waiting for it; false: the first plan
  // pays it (to measure that).
  bool prime_cudnn = true;
  // Keep each structure's dynamic-shape kernel cache in the store and read it back (docs/runtime.md "Kernel
  // caches kept in the store"): written after a dynamic stopgap is promoted and at save_kernel_caches(),
  // through a writable connection (as a tuned promotion's store does); read when the structure's cache is
  // made. Off by default: on cuDNN 9.19 (H200, 2026-12-03) a kept cache did not shorten a new process's
  // first dynamic build.
  bool save_kernel_caches = false;
  // The store is also opened for writing (and created when absent), after the device check: a Planner
  // that could not start leaves no store behind. Needed by tune_and_store and retune_queued.
  bool store_writable = false;
  // First-use verification. kVerify (default): a plan whose configuration has not passed the numerics gate in
  // this environment at this shape is run once on generated inputs and checked against the device reference
  // before any caller gets it; one that fails is refused (CheckFailed, exit 1, naming the plan and the gate's
  // summary) and never served by this Planner again. Known to pass without a run: plans tuned now (kTuned),
  // store records tuned and verified (Passed) in this environment, the split and padded stopgaps (they run
  // admitted plans), and chains whose parts were each admitted. Cost: one execution, the device reference and one comparison per new (structure, shape,
  // configuration), about the cost of `kiln run --verify` (docs/runtime.md "First-use verification").
  // kOff: plans serve unverified, as before (benchmarks of build cost; a caller that verifies itself).
  FirstUse first_use = FirstUse::kVerify;
  // The gate's options for that check (allow_tf32: fp32 outputs may come from TF32 tensor cores, as
  // `kiln run --allow-tf32` says; without it an fp32 plan that uses them is refused).
  CheckOptions first_use_check;
  // Deviceless: plans are compiled for this recorded device (compile()), on a machine that may have no
  // GPU; the environment is the profile's (fingerprint_for_profile), the store is opened for writing, and
  // obtain(), preload(), tune_and_store() and retune_queued() are FailedPrecondition.
  std::optional<DeviceProfile> target;
};

// A validated graph with its signature, computed once (obtain() on a PreparedGraph does no hashing).
struct PreparedGraph {
  std::shared_ptr<const Graph> graph;
  GraphSignature signature;
  std::map<std::string, int64_t> shape;  // the graph's own dynamic values
  // The names plans are bound by enter the cache key too: two graphs of one structure whose tensors are
  // named differently get plans of their own (each bound by its own names).
  std::string names_key;
};

struct Obtained {
  std::shared_ptr<const ExecutablePlan> plan;
  PlanSource source = PlanSource::kHeuristics;  // where this call got it (kMemory on a hit)
  std::string why;                              // the misses before it ("store: no record; bucket: ...")
  double obtain_ms = 0.0;
};

// What the CUDA graph sequences made from one Planner (kiln/capture/capture.h) did, summed over all of them. Each
// sequence holds the counters (shared: a sequence may outlive its Planner) and adds to them as it goes.
struct GraphCounters {
  std::atomic<int64_t> captures{0}, instantiations{0}, replays{0}, stream_runs{0}, updates{0}, update_refusals{0},
      reinstantiations{0};
};

struct PreloadReport {
  int loaded = 0;  // plans loaded into memory
  int warmed = 0;  // of those, run once (warm)
  // With warm and padded stopgaps: a padded plan (a shape one below a representative) ran once, so that the
  // process's first new shape does not pay the padded path's first use (its copies at their sizes).
  bool padded_warmed = false;
  int failed = 0;            // records that did not load or warm (skipped)
  std::string last_failure;  // "tokens=512: ...", the last of them
  double ms = 0;
};

struct PlannerStats {
  int64_t served[kPlanSourceCount] = {};  // obtain() calls answered by each source
  int64_t builds = 0;                     // plans made (store loads and builds), not hits
  int64_t failures = 0;                   // obtain() calls that returned an error
  int64_t cached = 0;                     // plans held in memory
  int64_t stopgaps = 0;                   // of those, stopgaps (split, padded or dynamic) not yet promoted
  int64_t promotions = 0;                 // stopgaps replaced by their static plan
  int64_t promotions_tuned = 0;           // of those, by a tune of the shape (PromoteBy::kTune)
  int64_t promotion_failures = 0;         // static builds that failed (the stopgap stays)
  int64_t first_use_checks = 0;           // plans run and checked before their first use (FirstUse::kVerify)
  int64_t first_use_refused = 0;          // obtain() calls refused because the plan failed that check
  int64_t heuristic_fall_throughs = 0;    // heuristic plans that failed it, replaced by a later configuration
  std::string last_first_use_failure;     // the last plan that failed it, and the gate's summary
  std::string last_promotion_failure;     // why the last one failed
  std::string last_tune_fallback;         // PromoteBy::kTune: why the last tune gave no plan (a build replaced it)
  std::string last_tune_note;             // PromoteBy::kTune: the last tuned winner's note (not stored: why)
  int64_t kernel_caches_loaded = 0;       // structures whose dynamic-shape kernel cache came from the store
  int64_t kernel_caches_saved = 0;        // kernel caches written to the store (save_kernel_caches)
  std::string last_kernel_cache_note;     // the last kept cache that did not load or was not written, and why
  // Summed over this Planner's captured sequences (GraphCounters).
  int64_t graph_captures = 0, graph_instantiations = 0, graph_replays = 0, graph_stream_runs = 0, graph_updates = 0,
          graph_update_refusals = 0, graph_reinstantiations = 0;
  // "memory 120, store 3, dynamic 2, bucket 0, heuristics 1, padded 4; 10 built, 0 failed, 10 held; 0 stopgaps,
  // 6 promoted" (", 4 by tuning" where promotions tuned; the last tune that fell back, after it),
  // then, once a captured sequence did anything, "; graphs: 2 captures, 1 instantiation, 100 replays, 0 stream
  // runs, 1 update, 0 refused, 0 re-instantiations".
  std::string text() const;
};

class Planner {
 public:
  // Needs a GPU (unless options.target): collects the environment once, opens the store, creates the
  // handle pool. InvalidArgument
  // for options that cannot hold: PromotionTuning bounds out of range (a negative top_k, a budget that is
  // negative or not finite), PromotionTuning::store with PromoteBy::kTune and no store_path, or split_max_parts
  // outside 2..64.
  static StatusOr<std::unique_ptr<Planner>> create(const PlannerOptions& options);
  // With another backend (host tests, benchmarks).
  static std::unique_ptr<Planner> create_with_backend(std::unique_ptr<PlanBackend> backend,
                                                      const PlannerOptions& options);
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  // Validates a copy of `graph` and computes its signature.
  StatusOr<PreparedGraph> prepare(const Graph& graph) const;
  // A plan for `graph` at `shape` (dynamic symbol -> value; empty: the graph's own values). A shape
  // other than the graph's own re-derives every extent from the new values; InvalidArgument for an unknown
  // symbol, a missing one, or a value below 1.
  StatusOr<Obtained> obtain(const PreparedGraph& graph, const std::map<std::string, int64_t>& shape = {});
  // A plan built with exactly `config` (kiln run --pin, a spec's "pin"): no store, no stopgap, no heuristics;
  // held under its own key, beside the graph's other plans (PlanSource::kPinned). The build's error,
  // in Kiln's words, when cuDNN cannot build that configuration for this graph.
  StatusOr<Obtained> obtain_pinned(const PreparedGraph& graph, const EngineConfig& config,
                                   const std::map<std::string, int64_t>& shape = {});
  // prepare() then obtain() (hashes the graph on every call: prefer prepare once).
  StatusOr<Obtained> obtain(const Graph& graph);

  // Loads every plan the store holds for this structure (each tuned shape current in this environment)
  // into memory, so that those shapes are hits and new shapes get split or padded stopgaps
  // without loading anything: what a service does at start, for the graphs it will serve. A shape
  // already held is not loaded again; a record that does not load is skipped and counted. With `warm`,
  // each plan loaded also runs once on scratch buffers of its own (PlanBackend::warm_up), so that no
  // caller pays its kernels' first load; the backend makes its handles (PlanBackend::warm_concurrency); and
  // where padded stopgaps serve, one padded plan runs once (PreloadReport::padded_warmed). It also reads the structure's tuned shapes again (the Planner
  // reads them from the store once per structure, for the padded and bucket sources).
  StatusOr<PreloadReport> preload(const PreparedGraph& graph, bool warm = false);

  // Tunes `graph` (validated) like `kiln tune`: its stored tuned plan is the incumbent, the unfused
  // alternative is timed and decided on, the winner is stored (keep_plan; untuned where the tuning was cut
  // short). Needs a GPU and, to store, PlannerOptions::store_writable. A tuning without a correct candidate
  // is a result (no `kept`), not an error.
  StatusOr<TunedGraph> tune_and_store(const Graph& graph, const TuneJob& job);
  // Compiles `graph` (validated; its fused segments where it exceeds cuDNN's operations per graph) for
  // PlannerOptions::target and stores each plan, untuned. Per-graph outcomes are results; errors are the
  // store's, or FailedPrecondition for a Planner without a target.
  StatusOr<CompiledGraph> compile(const Graph& graph, const std::optional<EngineConfig>& pin = std::nullopt);
  // Drains the store's re-tune queue for this Planner's environment (kiln/runtime/retune.h retune_queued, its
  // `current` this Planner's fingerprint). Needs a GPU and PlannerOptions::store_writable.
  StatusOr<RetuneReport> retune_queued(const RetuneOptions& options);

  // Waits until every queued promotion has finished (benchmarks, tests, or before a latency-critical
  // phase); returns at once when none is queued.
  void wait_for_promotions();
  // Keeps every structure's kernel cache that holds kernels the store lacks (PlannerOptions::save_kernel_caches:
  // FailedPrecondition without it); the first error, after trying every structure.
  Status save_kernel_caches();

  PlannerStats stats() const;
  const PlannerOptions& options() const;
  // The counters this Planner's captured sequences add to (kiln/capture/capture.h); never null.
  std::shared_ptr<GraphCounters> graph_counters() const;
  const ShapeRecorder& recorder() const;
  const BucketPolicy& buckets() const;

 private:
  struct Impl;
  explicit Planner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The graph at another shape: every dim with a symbol takes its new value, every tensor a node writes is
// inferred again (so derived extents follow), layouts give strides again. InvalidArgument naming the
// symbol or tensor when that cannot be done (an unknown or missing symbol, explicit strides on a dynamic
// tensor).
StatusOr<Graph> reshape_graph(const Graph& validated_graph, const std::map<std::string, int64_t>& shape);

// The cuDNN backend (needs a GPU): the store at options.store_path (none when empty), the environment
// collected once, options.handles cuDNN handles.
StatusOr<std::unique_ptr<PlanBackend>> make_cudnn_plan_backend(const PlannerOptions& options);

}  // namespace kiln
