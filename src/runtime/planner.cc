// kiln::Planner (kiln/runtime/planner.h): the memory cache, single flight and the order of sources. Nothing here
// touches cuDNN: plans come from a PlanBackend (planner_cudnn.cc on the GPU, a fake in host tests).
#include "kiln/runtime/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <shared_mutex>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/padding.h"
#include "kiln/runtime/unfused_plan.h"
#include "kiln/validate/host_tensor.h"
#include "runtime/first_use.h"
#include "runtime/planner_jobs_internal.h"

namespace kiln {

const char* plan_source_name(PlanSource s) { return enum_name(kPlanSourceNames, s, "unknown"); }
StatusOr<PlanSource> parse_plan_source(const std::string& name) {
  return parse_enum(kPlanSourceNames, name, "plan source");
}

// ---- ExecutablePlan -------------------------------------------------------------------------------

namespace {

// An input or output of a graph that a caller binds (not by value, not virtual), with the bytes it spans.
struct BoundTensor {
  int tensor = -1;
  std::string name;
  size_t bytes = 0;
  bool output = false;  // written by a node
};

std::vector<BoundTensor> bound_tensors(const Graph& g) {
  const GraphRoles roles(g);
  std::vector<BoundTensor> out;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    if (d.by_value || roles.is_virtual(t)) continue;
    // Validated graphs have checked footprints: this cannot fail for them.
    auto bytes = HostTensor::checked_byte_size(roles.dtype_of(t), d.shape(), d.strides);
    out.push_back({t, d.name, bytes.is_ok() ? static_cast<size_t>(*bytes) : 0, roles.producer(t) >= 0});
  }
  return out;
}

}  // namespace

ExecutablePlan::ExecutablePlan(Graph graph, GraphSignature signature, EngineConfig config, int64_t workspace_bytes,
                               PlanSource built_from, std::unique_ptr<PlanExecutor> executor)
    : graph_(std::move(graph)),
      signature_(std::move(signature)),
      config_(std::move(config)),
      workspace_bytes_(workspace_bytes),
      built_from_(built_from),
      executor_(std::move(executor)) {
  for (const BoundTensor& b : bound_tensors(graph_)) {
    bound_[b.name] = b.tensor;
    spans_[b.name] = b.bytes;
  }
}

StatusOr<size_t> ExecutablePlan::tensor_bytes(const std::string& name) const {
  auto it = spans_.find(name);
  if (it == spans_.end()) return not_found("graph '" + graph_.name + "' binds no tensor '" + name + "'");
  return it->second;
}

Status ExecutablePlan::check_bindings(const TensorBindings& tensors) const {
  const std::string where = "graph '" + graph_.name + "'";
  for (const auto& [name, b] : tensors) {
    if (!bound_.count(name)) {
      std::string known;
      for (const auto& [n, t] : bound_) known += (known.empty() ? "" : ", ") + n;
      return invalid_argument(where + ": no input or output tensor '" + name + "' to bind (its tensors: " + known +
                              ")");
    }
  }
  for (const auto& [name, t] : bound_) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return invalid_argument(where + ": tensor '" + name + "' is not bound");
    const TensorBinding& b = it->second;
    if (b.ptr == nullptr) return invalid_argument(where + ": tensor '" + name + "' is bound to a null pointer");
    if (reinterpret_cast<uintptr_t>(b.ptr) % kBindingAlignment != 0)
      return invalid_argument(where + ": tensor '" + name + "': pointer " +
                              std::to_string(reinterpret_cast<uintptr_t>(b.ptr)) + " is not " +
                              std::to_string(kBindingAlignment) + "-byte aligned");
    const size_t need = spans_.at(name);
    if (b.bytes != 0 && b.bytes < need)
      return invalid_argument(where + ": tensor '" + name + "': buffer of " + std::to_string(b.bytes) +
                              " bytes, the shape " + shape_key_text(graph_.dynamic_dims) + " needs " +
                              std::to_string(need));
  }
  return Status::ok();
}

Status ExecutablePlan::check_call(const TensorBindings& tensors, void* workspace) const {
  KILN_RETURN_IF_ERROR(check_bindings(tensors));
  if (workspace_bytes_ > 0 && workspace == nullptr)
    return invalid_argument("graph '" + graph_.name + "': the plan needs a workspace of " +
                            std::to_string(workspace_bytes_) + " bytes");
  if (workspace && reinterpret_cast<uintptr_t>(workspace) % kBindingAlignment != 0)
    return invalid_argument("graph '" + graph_.name + "': the workspace is not " + std::to_string(kBindingAlignment) +
                            "-byte aligned");
  return Status::ok();
}

Status ExecutablePlan::execute(cudaStream_t stream, const TensorBindings& tensors, void* workspace) const {
  KILN_RETURN_IF_ERROR(check_call(tensors, workspace));
  std::map<int, void*> ptrs;
  for (const auto& [name, t] : bound_) ptrs[t] = tensors.at(name).ptr;
  if (!executor_) return failed_precondition("graph '" + graph_.name + "': the plan has no executor");
  return executor_->run(stream, ptrs, workspace);
}

Status ExecutablePlan::run_unchecked(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const {
  if (!executor_) return failed_precondition("graph '" + graph_.name + "': the plan has no executor");
  return executor_->run(stream, pointers, workspace);
}

std::string ExecutablePlan::identity() const {
  if (parts_.empty()) return config_.identity();
  std::string out = built_from_ == PlanSource::kSegments ? "segments["
                    : built_from_ == PlanSource::kSplit  ? "split["
                                                         : "unfused[";
  for (size_t i = 0; i < parts_.size(); ++i) out += (i ? " + " : "") + parts_[i]->identity();
  return out + "]";
}

// ---- Padded plans ---------------------------------------------------------------------------------

Status PlanBackend::warm_up(const ExecutablePlan&) { return Status::ok(); }
Status PlanBackend::warm_concurrency() { return Status::ok(); }
StatusOr<SegmentDecision> PlanBackend::segments(const Graph&) { return SegmentDecision{}; }
void PlanBackend::queue_retune(const Graph&, const GraphSignature&, const std::string&, std::string*) {}
Status PlanBackend::save_kernel_cache(const GraphSignature&, const std::string&) { return Status::ok(); }
KernelCacheCounts PlanBackend::kernel_cache_counts() const { return {}; }
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

namespace {

// Runs the plan of a larger shape (kiln/runtime/padding.h): the varying inputs copied into scratch at the front
// of the workspace, the larger plan on that scratch (its own workspace after it), the outputs' first
// rows copied back. Everything is enqueued on the caller's stream, so it captures into a CUDA graph.
class PaddedExecutor : public PlanExecutor {
 public:
  PaddedExecutor(std::shared_ptr<const ExecutablePlan> larger, PaddingLayout layout, PlanBackend::DeviceCopy copy)
      : larger_(std::move(larger)), layout_(std::move(layout)), copy_(copy) {}

  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    char* ws = static_cast<char*>(workspace);
    if (!ws) return internal_error("padded plan: no workspace for its scratch");
    // The caller's pointers (checked against this shape by ExecutablePlan::execute) by tensor index, which the
    // larger graph shares, the padded ones replaced by their scratch: the larger plan runs without a second
    // binding by name (its checks would only see what this layout made).
    std::map<int, void*> ptrs = pointers;
    for (const PaddedTensor& p : layout_.tensors) {
      void*& bound = ptrs[p.tensor];
      if (!bound) return internal_error("padded plan: no pointer for tensor '" + p.name + "'");
      if (!p.output) KILN_RETURN_IF_ERROR(copy_(ws + p.scratch_offset, bound, p.real_bytes, stream));
      bound = ws + p.scratch_offset;
    }
    KILN_RETURN_IF_ERROR(
        larger_->run_unchecked(stream, ptrs, larger_->workspace_bytes() > 0 ? ws + layout_.scratch_bytes : nullptr));
    for (const PaddedTensor& p : layout_.tensors)
      if (p.output) KILN_RETURN_IF_ERROR(copy_(pointers.at(p.tensor), ws + p.scratch_offset, p.real_bytes, stream));
    return Status::ok();
  }

 private:
  std::shared_ptr<const ExecutablePlan> larger_;
  PaddingLayout layout_;
  PlanBackend::DeviceCopy copy_;
};

// Runs plans of smaller shapes one after another, each on its own rows of the caller's buffers (kiln/runtime/padding.h
// "Split stopgaps"): a part's pointers are the caller's, those of the tensors that carry the dim moved past the rows
// before it. In stream order on the caller's stream, sharing one workspace.
// A cover (padding.h cover_extents) runs its last part over rows the part before it computed: it refuses a call
// where an output shares memory with an input, whose rows the earlier part would have overwritten.
class SplitExecutor : public PlanExecutor {
 public:
  struct Part {
    std::shared_ptr<const ExecutablePlan> plan;
    std::vector<std::pair<int, size_t>> offsets;  // tensor index, bytes from the caller's pointer
  };
  // The inputs and outputs of the whole shape, for a cover's check.
  using Span = BoundTensor;
  SplitExecutor(std::vector<Part> parts, std::string graph, std::vector<Span> cover_spans)
      : parts_(std::move(parts)), graph_(std::move(graph)), cover_spans_(std::move(cover_spans)) {}

  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    KILN_RETURN_IF_ERROR(check_no_alias(pointers));
    std::map<int, void*> ptrs = pointers;
    const Part* previous = nullptr;
    for (const Part& part : parts_) {
      if (previous)  // the previous part's moved pointers back to the caller's
        for (const auto& [t, off] : previous->offsets) ptrs[t] = pointers.at(t);
      previous = &part;
      for (const auto& [t, off] : part.offsets) {
        auto it = pointers.find(t);
        if (it == pointers.end() || !it->second)
          return internal_error("split plan: no pointer for tensor " + std::to_string(t));
        ptrs[t] = static_cast<char*>(it->second) + off;
      }
      KILN_RETURN_IF_ERROR(
          part.plan->run_unchecked(stream, ptrs, part.plan->workspace_bytes() > 0 ? workspace : nullptr));
    }
    return Status::ok();
  }

 private:
  Status check_no_alias(const std::map<int, void*>& pointers) const {
    for (const Span& out : cover_spans_) {
      if (!out.output) continue;
      auto o = pointers.find(out.tensor);
      if (o == pointers.end() || !o->second) continue;  // the parts' own checks name it
      const uintptr_t o0 = reinterpret_cast<uintptr_t>(o->second);
      for (const Span& in : cover_spans_) {
        if (in.output) continue;
        auto i = pointers.find(in.tensor);
        if (i == pointers.end() || !i->second) continue;
        const uintptr_t i0 = reinterpret_cast<uintptr_t>(i->second);
        if (o0 < i0 + in.bytes && i0 < o0 + out.bytes)
          return invalid_argument("graph '" + graph_ + "': output '" + out.name + "' shares memory with input '" +
                                  in.name +
                                  "', and this split stopgap runs its last part over rows the part before it "
                                  "wrote: give the output a buffer of its own (or PlannerOptions::split_overlap = "
                                  "false)");
      }
    }
    return Status::ok();
  }

  std::vector<Part> parts_;
  std::string graph_;
  std::vector<Span> cover_spans_;  // empty unless the parts overlap
};

}  // namespace

// ---- reshape_graph --------------------------------------------------------------------------------

StatusOr<Graph> reshape_graph(const Graph& validated, const std::map<std::string, int64_t>& shape) {
  for (const auto& [sym, v] : shape) {
    if (!validated.dynamic_dims.count(sym))
      return invalid_argument("graph '" + validated.name + "' has no dynamic dim '" + sym + "'");
    if (v < 1)
      return invalid_argument("graph '" + validated.name + "': dynamic dim '" + sym + "' = " + std::to_string(v) +
                              ": must be >= 1");
  }
  for (const auto& [sym, v] : validated.dynamic_dims)
    if (!shape.count(sym))
      return invalid_argument("graph '" + validated.name + "': no value for dynamic dim '" + sym + "'");
  Graph g = validated;
  g.dynamic_dims = shape;
  const GraphRoles roles(validated);
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    TensorDesc& d = g.tensors[i];
    bool dynamic = false;
    for (Dim& dim : d.dims)
      if (dim.is_dynamic()) {
        dim.value = shape.at(dim.symbol);
        dynamic = true;
      }
    const int producer = roles.producer(static_cast<int>(i));
    if (producer >= 0) {
      // Written by a node: inferred again from its inputs (its declared layout stays). A convolution's
      // dx or dw keeps its dims: their spatial extents are the declaration's (a dx of stride > 1 has
      // several valid extents, a dw's filter is not derived), and inference checks them at the new shape.
      const OpKind op = validated.nodes[static_cast<size_t>(producer)].op;
      if (d.layout == Layout::kExplicit) {
        if (dynamic)
          return invalid_argument("graph '" + validated.name + "': tensor '" + d.name +
                                  "' has explicit strides and dynamic dims: give it a layout to reshape it");
      } else if (op == OpKind::kConvDgrad || op == OpKind::kConvWgrad) {
        d.strides.clear();
      } else {
        d.dims.clear();
        d.strides.clear();
      }
    } else if (dynamic) {
      if (d.layout == Layout::kExplicit)
        return invalid_argument("graph '" + validated.name + "': tensor '" + d.name +
                                "' has explicit strides and dynamic dims: give it a layout to reshape it");
      d.strides.clear();  // from its layout again
    }
  }
  KILN_RETURN_IF_ERROR(validate_graph(g));
  return g;
}

// ---- PlannerStats ---------------------------------------------------------------------------------

std::string PlannerStats::text() const {
  std::string s;
  for (int i = 0; i < kPlanSourceCount; ++i)
    s += std::string(i ? ", " : "") + plan_source_name(static_cast<PlanSource>(i)) + " " + std::to_string(served[i]);
  s += "; " + std::to_string(builds) + " built, " + std::to_string(failures) + " failed, " + std::to_string(cached) +
       " held; " + std::to_string(stopgaps) + " stopgaps, " + std::to_string(promotions) + " promoted";
  if (promotions_tuned) s += ", " + std::to_string(promotions_tuned) + " by tuning";
  if (!last_tune_fallback.empty()) s += " (a tune fell back to a build: " + last_tune_fallback + ")";
  if (!last_tune_note.empty()) s += " (the last tuned winner: " + last_tune_note + ")";
  if (promotion_failures)
    s += ", " + std::to_string(promotion_failures) + " promotions failed (last: " + last_promotion_failure + ")";
  if (first_use_checks) s += "; " + std::to_string(first_use_checks) + " checked before first use";
  if (first_use_refused)
    s += ", " + std::to_string(first_use_refused) + " refused (last failure: " + last_first_use_failure + ")";
  if (heuristic_fall_throughs)
    s += "; " + std::to_string(heuristic_fall_throughs) + " served by a later heuristic configuration";
  if (kernel_caches_loaded + kernel_caches_saved > 0 || !last_kernel_cache_note.empty())
    s += "; kernel caches: " + std::to_string(kernel_caches_loaded) + " loaded, " +
         std::to_string(kernel_caches_saved) + " kept" +
         (last_kernel_cache_note.empty() ? "" : " (last problem: " + last_kernel_cache_note + ")");
  if (graph_captures + graph_replays + graph_stream_runs + graph_updates + graph_reinstantiations == 0) return s;
  auto n = [](int64_t v, const char* one, const char* many) { return std::to_string(v) + " " + (v == 1 ? one : many); };
  return s + "; graphs: " + n(graph_captures, "capture", "captures") + ", " +
         n(graph_instantiations, "instantiation", "instantiations") + ", " + n(graph_replays, "replay", "replays") +
         ", " + n(graph_stream_runs, "stream run", "stream runs") + ", " + n(graph_updates, "update", "updates") +
         ", " + std::to_string(graph_update_refusals) + " refused, " +
         n(graph_reinstantiations, "re-instantiation", "re-instantiations");
}

// ---- Planner --------------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// What one build produced, shared with every caller that waited for it.
struct Built {
  std::shared_ptr<const ExecutablePlan> plan;
  PlanSource source = PlanSource::kHeuristics;
  std::string why;
};

// A stopgap's static plan, built in the background and swapped in.
struct Promotion {
  std::string key;
  PreparedGraph graph;
  std::map<std::string, int64_t> shape;
  std::shared_ptr<const ExecutablePlan> stopgap;  // what it replaces: only that, if still held
  uint64_t generation = 0;                        // Impl::generation when queued
};

// The prepared graph at `shape` and its own signature (a structure whose derived extents are not symbolic
// changes with the shape: it is then looked up under its own structure).
Status graph_at(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, Graph* g, GraphSignature* sig) {
  if (shape == pg.shape) {
    *g = *pg.graph;
    *sig = pg.signature;
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(*g, reshape_graph(*pg.graph, shape));
  KILN_ASSIGN_OR_RETURN(*sig, reshaped_signature(*pg.graph, pg.signature, *g));
  return Status::ok();
}

// Distance between two shapes of one bucket: the sum of |log(a/b)| over their dims (the nearest tuned
// shape shares the most of its tiling choices with this one).
double shape_distance(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b) {
  double d = 0;
  for (const auto& [sym, va] : a) {
    auto it = b.find(sym);
    if (it != b.end()) d += std::fabs(std::log(static_cast<double>(va) / static_cast<double>(it->second)));
  }
  return d;
}

}  // namespace

struct Planner::Impl {
  std::unique_ptr<PlanBackend> backend;
  PlannerOptions options;
  std::unique_ptr<runtime_detail::FirstUseGate> first_use;  // made with the backend (create_with_backend)
  ShapeRecorder recorder;

  static constexpr int kShards = 16;
  struct Shard {
    mutable std::shared_mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const ExecutablePlan>> plans;
  };
  Shard shards[kShards];

  std::mutex flight_mu;
  std::unordered_map<std::string, std::shared_future<StatusOr<Built>>> in_flight;
  // Single flight for `key`: the plan held under it (`*held` set), or else the first caller runs `make`, which
  // holds what it made, and every caller that comes meanwhile waits for that result (`*leader` false).
  template <typename Make>
  StatusOr<Built> single_flight(const std::string& key, Shard& shard, Make&& make, bool* leader,
                                std::shared_ptr<const ExecutablePlan>* held);

  std::atomic<int64_t> served[kPlanSourceCount] = {};
  std::atomic<int64_t> builds{0}, failures{0}, cached{0};
  std::atomic<int64_t> heuristic_fall_throughs{0};  // heuristic plans served in place of one that failed the gate
  std::shared_ptr<GraphCounters> graphs = std::make_shared<GraphCounters>();
  std::atomic<int64_t> stopgaps{0}, promotions{0}, promotions_tuned{0}, promotion_failures{0};

  // Promotions: one background thread, started on the first stopgap.
  std::mutex promo_mu;
  std::condition_variable promo_cv;    // work queued, or stopping
  std::condition_variable promo_idle;  // the queue drained
  std::deque<Promotion> promo_queue;
  bool promo_busy = false, stopping = false;
  std::string last_promotion_failure;  // under promo_mu
  std::string last_tune_fallback;      // under promo_mu
  std::string last_tune_note;          // under promo_mu
  // Structures a dynamic stopgap was built for (their kernel caches hold kernels): structure -> its
  // signature and a graph name, for save_kernel_caches().
  std::mutex dynamic_mu;
  std::map<std::string, std::pair<GraphSignature, std::string>> dynamic_structures;
  std::atomic<bool> cancel_tunes{false};  // set by ~Impl: a background tune in progress stops
  Planner* self = nullptr;                // the owner: a graph run as segments obtains each one through it
  // Structures cuDNN fuses whole (PlanBackend::segments said so once): not asked again.
  std::mutex fusable_mu;
  std::set<std::string> fusable;
  std::thread promo_thread;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(promo_mu);
      stopping = true;  // queued promotions are dropped: their stopgaps die with the cache
    }
    cancel_tunes = true;  // and a tune in progress stops after its current candidate
    promo_cv.notify_all();
    if (promo_thread.joinable()) promo_thread.join();
  }

  // What static builds of a structure cost, to serve each new shape by the cheaper path: a stopgap pays
  // off where a static build is dear (a runtime-compiled engine: 30-50 ms on the H200); where static builds
  // already cost a few milliseconds (a precompiled engine), building at once gives the tuned plan as fast.
  // Dynamic builds are no guide: any of them may compile a new kernel into the cache (30-470 ms).
  static constexpr double kCheapStaticBuildMs = 5.0;
  struct BuildCosts {
    int static_builds = 0;
    double static_ema_ms = 0;
  };
  std::mutex costs_mu;
  std::unordered_map<std::string, BuildCosts> costs;
  void note_static_cost(const std::string& structure, double ms) {
    std::lock_guard<std::mutex> lock(costs_mu);
    BuildCosts& c = costs[structure];
    c.static_ema_ms = c.static_builds++ == 0 ? ms : 0.5 * c.static_ema_ms + 0.5 * ms;
  }
  bool static_is_cheap(const std::string& structure) {
    std::lock_guard<std::mutex> lock(costs_mu);
    auto it = costs.find(structure);
    return it != costs.end() && it->second.static_ema_ms < kCheapStaticBuildMs;  // an entry has one build at least
  }

  Shard& shard_for(const std::string& key) { return shards[std::hash<std::string>{}(key) % kShards]; }
  // An obtain() answered by `src` with `plan`: counted, and recorded (PlannerOptions::record_shapes).
  void note_served(PlanSource src, const ExecutablePlan& plan, const std::string& graph_name) {
    served[static_cast<int>(src)].fetch_add(1, std::memory_order_relaxed);
    if (options.record_shapes)
      recorder.record(plan.signature().structure, plan.signature().shape_key, graph_name, plan_source_name(src));
  }

  // The cache key: the prepared structure, its names and the values (sorted by symbol: a std::map).
  static std::string cache_key(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape) {
    std::string key = pg.signature.structure;
    key += '|';
    key += pg.names_key;
    key += '|';
    for (const auto& [sym, v] : shape) {
      key += sym;
      key += '=';
      key += std::to_string(v);
      key += ',';
    }
    return key;
  }
  std::shared_ptr<const ExecutablePlan> cached_plan(const std::string& key) {
    Shard& shard = shard_for(key);
    std::shared_lock<std::shared_mutex> lock(shard.mu);
    auto it = shard.plans.find(key);
    return it == shard.plans.end() ? nullptr : it->second;
  }

  // The stored plan for exactly this key, as the backend loads it, or, where the store holds a fusion
  // decision for the key (kiln/store/fusion_record.h), the unfused chain of the parts' stored plans
  // (kiln/runtime/unfused_plan.h). Null with `why` on a miss, as PlanBackend::from_store. When the decision could
  // not be served (a part missing or stale, a signature that changed), the fused plan serves and `note`
  // says why (also logged): an upgrade never silently changes what runs.
  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why, std::string* note = nullptr) {
    // The fused record first: a decision is asked for only where the store answered (a hit, or a miss
    // that may be a chain's key whose fused graph had no correct plan), not after an error.
    auto fused = backend->from_store(g, sig, why);
    if (!fused.is_ok()) return fused;
    auto decision = backend->fusion_record(sig);
    std::string refused;
    if (!decision.is_ok()) refused = "its fusion decision could not be read: " + decision.status().message();
    else if (!*decision) return fused;
    else {
      auto chain = unfused_from_store(g, sig, **decision, &refused);
      if (chain) return chain;
    }
    const std::string line = "the store's unfused decision for graph '" + g.name + "' at " +
                             (sig.shape_key.empty() ? std::string("its shape") : sig.shape_key) + " was not served (" +
                             refused + ")";
    if (!*fused) {  // no fused plan either: a miss, with both reasons
      *why += (why->empty() ? "" : "; ") + line;
      return fused;
    }
    KILN_LOG(kWarn, line << ": the fused plan serves");
    if (note) *note = line + ": the fused plan serves";
    return fused;
  }
  std::shared_ptr<const ExecutablePlan> unfused_from_store(const Graph& g, const GraphSignature& sig,
                                                           const FusionRecord& d, std::string* refused) {
    auto dtype = parse_dtype(d.materialized);
    if (!dtype.is_ok()) {
      *refused = "its intermediates' dtype '" + d.materialized + "' is unknown";
      return nullptr;
    }
    auto parts = decompose_graph(g, *dtype);
    if (!parts.is_ok()) {
      *refused = parts.status().message();
      return nullptr;
    }
    if (parts->size() != d.parts.size()) {
      *refused = "the graph has " + std::to_string(parts->size()) + " parts, the decision lists " +
                 std::to_string(d.parts.size());
      return nullptr;
    }
    std::vector<std::shared_ptr<const ExecutablePlan>> plans;
    for (size_t i = 0; i < parts->size(); ++i) {
      const Graph& pg = (*parts)[i].graph;
      auto psig = compute_signature(pg);
      if (!psig.is_ok() || psig->structure != d.parts[i].structure_sig || psig->shape_key != d.parts[i].shape_key) {
        *refused = "part '" + pg.name + "' has another signature than the decision's (the graph or Kiln changed)";
        return nullptr;
      }
      std::string miss;
      auto plan = backend->from_store(pg, *psig, &miss);
      if (!plan.is_ok() || !*plan) {
        *refused = "part '" + pg.name +
                   "': " + (plan.is_ok() ? (miss.empty() ? std::string("no record") : miss) : plan.status().message());
        return nullptr;
      }
      // Each part passes the gate (first use) before the chain made of them may serve.
      if (Status admitted = first_use->admit(**plan, PlanSource::kStore, pg.name); !admitted.is_ok()) {
        *refused = "part '" + pg.name + "': " + admitted.message();
        return nullptr;
      }
      plans.push_back(std::move(*plan));
    }
    auto chain = make_unfused_plan(g, sig, *parts, std::move(plans), PlanSource::kStore);
    if (!chain.is_ok()) {
      *refused = chain.status().message();
      return nullptr;
    }
    return std::move(chain).value();
  }

  // The stored plan for exactly `g`'s shape, loaded and held under `key`: the plan held (a concurrent
  // obtain of that shape may have been first; `inserted` says whether this call's went in), or null with
  // the store's reason in `why`. Shared by the padded source (a representative) and preload().
  std::shared_ptr<const ExecutablePlan> hold_stored(const std::string& key, const Graph& g, std::string* why,
                                                    bool* inserted = nullptr) {
    auto sig = compute_signature(g);
    if (!sig.is_ok()) {
      *why = sig.status().message();
      return nullptr;
    }
    std::string miss;
    auto stored = from_store(g, *sig, &miss);
    if (!stored.is_ok() || !*stored) {
      *why = stored.is_ok() ? (miss.empty() ? std::string("no record") : miss) : stored.status().message();
      return nullptr;
    }
    builds.fetch_add(1, std::memory_order_relaxed);
    if (Status admitted = first_use->admit(**stored, PlanSource::kStore, g.name); !admitted.is_ok()) {
      *why = admitted.message();
      return nullptr;
    }
    Shard& shard = shard_for(key);
    std::unique_lock<std::shared_mutex> wl(shard.mu);
    auto [it, in] = shard.plans.emplace(key, std::move(*stored));
    if (in) cached.fetch_add(1, std::memory_order_relaxed);
    if (inserted) *inserted = in;
    return it->second;
  }

  // The tuned shapes of a structure, read from the store once (preload() reads them again): the padded
  // and bucket sources ask on every miss, and a store query per miss is most of a padded stopgap's cost.
  // A shape tuned by another process meanwhile is still found by its exact key (the store source).
  std::mutex tuned_mu;
  std::unordered_map<std::string, std::vector<TunedShape>> tuned_by_structure;
  StatusOr<std::vector<TunedShape>> tuned_shapes_of(const GraphSignature& sig, bool refresh = false) {
    if (!refresh) {
      std::lock_guard<std::mutex> lock(tuned_mu);
      auto it = tuned_by_structure.find(sig.structure);
      if (it != tuned_by_structure.end()) return it->second;
    }
    const uint64_t gen = generation.load();
    KILN_ASSIGN_OR_RETURN(std::vector<TunedShape> t, backend->tuned_shapes(sig));  // a failure is not kept
    std::lock_guard<std::mutex> lock(tuned_mu);
    if (generation.load() == gen) tuned_by_structure[sig.structure] = t;  // else read before a job's store
    return t;
  }

  // A padded stopgap for `g` (kiln/runtime/padding.h) from the smallest tuned shape of its bucket that is at least
  // as large, its plan from memory or the store (kept in memory for the next ones); null with the reason
  // in `why` when there is none or padding would not be exact.
  // preload's warm-up of the padded path: a padded plan for a shape one below a tuned shape of the bucket
  // (the one nearest the graph's own shape that has such a shape untuned) runs once on scratch buffers of
  // its own, and is not kept. False with the reason in `why` where it could not run; false and `why`
  // empty where no tuned shape has such a neighbour.
  bool warm_padded(const PreparedGraph& pg, const std::vector<TunedShape>& tuned, std::string* why);
  // A split stopgap for `g` (kiln/runtime/padding.h "Split stopgaps"): plans of smaller tuned shapes, equal to
  // `shape` but in one dim, whose extents there sum to its own, from memory or the store (kept in memory);
  // null with the reason in `why` where there is none.
  std::shared_ptr<const ExecutablePlan> split_plan(const PreparedGraph& pg, const Graph& g, const GraphSignature& sig,
                                                   const std::map<std::string, int64_t>& shape,
                                                   const std::vector<TunedShape>& tuned, std::string* why);
  // What becomes of a stopgap served now, for its `why`: "its own plan is being built" (or tuned), or "kept:
  // promotion is off".
  const char* stopgap_fate() const {
    if (!options.promote) return "kept: promotion is off";
    return options.promote_by == PromoteBy::kTune ? "its own plan is being tuned" : "its own plan is being built";
  }
  // The stopgap that needs no build: split where options.split and it is exact, else padded where
  // options.padded; null with both reasons in `why`.
  std::shared_ptr<const ExecutablePlan> unbuilt_stopgap(const PreparedGraph& pg, const Graph& g,
                                                        const GraphSignature& sig,
                                                        const std::map<std::string, int64_t>& shape,
                                                        const std::vector<TunedShape>& tuned, std::string* why) {
    std::string split_miss;
    if (options.split) {
      auto split = split_plan(pg, g, sig, shape, tuned, &split_miss);
      if (split) {
        *why = split_miss;
        return split;
      }
    }
    if (!options.padded) {
      *why = split_miss;
      return nullptr;
    }
    std::string padded_miss;
    auto padded = padded_plan(pg, g, sig, shape, tuned, &padded_miss);
    *why = split_miss.empty() ? padded_miss : split_miss + "; " + padded_miss;
    return padded;
  }
  std::shared_ptr<const ExecutablePlan> padded_plan(const PreparedGraph& pg, const Graph& g, const GraphSignature& sig,
                                                    const std::map<std::string, int64_t>& shape,
                                                    const std::vector<TunedShape>& tuned, std::string* why);

  // The first-use gate for a plan just built (first_use->admit). A heuristic plan that fails it gives way to the
  // next configurations cuDNN's heuristics offer for its graph (at most kHeuristicFallThrough of them, each built
  // pinned and put through the gate): `built` becomes the first that passes, its why saying what was passed
  // over. The refusal stands, saying how many were tried, when none passes.
  static constexpr int kHeuristicFallThrough = 8;
  Status admit_or_next_heuristic(Built* built, const std::string& graph_name) {
    Status admitted = first_use->admit(*built->plan, built->source, graph_name);
    if (admitted.is_ok() || admitted.code() != StatusCode::kCheckFailed || built->source != PlanSource::kHeuristics)
      return admitted;
    const ExecutablePlan& failed = *built->plan;
    StatusOr<std::vector<EngineConfig>> configs = backend->heuristic_configs(failed.graph());
    if (!configs.is_ok() || configs->empty()) return admitted;
    int tried = 0;
    std::vector<std::string> passed_over = {failed.identity()};
    for (const EngineConfig& c : *configs) {
      if (tried == kHeuristicFallThrough) break;
      if (std::find(passed_over.begin(), passed_over.end(), c.identity()) != passed_over.end()) continue;
      ++tried;
      passed_over.push_back(c.identity());
      auto next = backend->build(failed.graph(), failed.signature(), c, PlanSource::kHeuristics);
      if (!next.is_ok() || !*next) continue;  // not buildable on this device: the next one
      Status ok = first_use->admit(**next, PlanSource::kHeuristics, graph_name);
      if (ok.is_ok()) {
        heuristic_fall_throughs.fetch_add(1, std::memory_order_relaxed);
        built->why += std::string(built->why.empty() ? "" : "; ") + "heuristics' choice " + failed.identity() +
                      " failed first-use verification, " + c.identity() + " (their choice " +
                      std::to_string(passed_over.size()) + ") passed";
        built->plan = std::move(*next);
        return Status::ok();
      }
      if (ok.code() != StatusCode::kCheckFailed) return ok;  // an error, not a verdict
    }
    // fp32 GEMMs: on the H200 every configuration offered for some (GEMVs) computes in TF32 (about 1e-3 off).
    const bool fp32_gemm = wants_fp32_gemm_math(failed.graph());
    return Status(admitted.code(),
                  admitted.message() + "; so did the next " + std::to_string(tried) +
                      " configurations cuDNN's heuristics offer, or they did not build" +
                      (fp32_gemm ? " (an fp32 matmul or convolution: where TF32 precision is acceptable, "
                                   "PlannerOptions::first_use_check.allow_tf32 or `kiln run --allow-tf32` accepts it)"
                                 : ""));
  }

  // allow_stopgap: a dynamic-shape build may serve (NewShapes::kStopgap); false: only static plans.
  // store_asked: the caller asked the store for this key just before (the tune promotion's fallback), so
  // it is not asked again.
  StatusOr<Built> build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, bool allow_stopgap,
                        bool store_asked = false);
  // PromoteBy::kTune: the plan stored for exactly this key (another process may have tuned it), else this
  // shape tuned by the backend. A Built without a plan (the reason in `why`) where neither gave one.
  StatusOr<Built> tune_for(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, std::string* why);
  // A graph cuDNN cannot fuse whole (PlanBackend::segments): its segments, each obtained through the
  // Planner like a graph of its own, run as one chain (PlanSource::kSegments). Null plan: the graph fuses.
  StatusOr<Built> segmented(const Graph& g, const GraphSignature& sig);
  // After the store answered this exact key without a plan (`miss`: why), what PlannerOptions::policy.on_mismatch
  // says: kRetune tunes now (a Built with a plan when that gave one), kHeuristicsAndQueue queues a re-tune.
  // (kFail is the store's own refusal, an error build() returns before this.) Notes go to `why`.
  // `own_shape`: the graph at its own dims (the shape its spec declares, the one `kiln tune SPEC` tunes),
  // where a plain miss counts too.
  StatusOr<Built> after_store_miss(const Graph& g, const GraphSignature& sig, const std::string& miss, bool own_shape,
                                   std::vector<std::string>* why);
  void promote(Promotion p);
  void promotion_loop();
  // Drops the plans held for a structure and its tuned shapes, after a job stored a plan for it: the next
  // obtain() of any of its shapes reads the store again.
  // Bumped by forget() before it drops anything: a build that began before (an obtain's, a promotion's)
  // may have read the store as it was, so its plan is not cached (a concurrent job's stored plan wins).
  std::atomic<uint64_t> generation{0};
  void forget(const GraphSignature& sig) {
    generation.fetch_add(1);
    for (Shard& shard : shards) {
      std::unique_lock<std::shared_mutex> wl(shard.mu);
      for (auto it = shard.plans.begin(); it != shard.plans.end();) {
        if (it->first.compare(0, sig.structure.size() + 1, sig.structure + "|") == 0) {
          if (it->second && plan_source_is_stopgap(it->second->built_from()))
            stopgaps.fetch_sub(1, std::memory_order_relaxed);
          it = shard.plans.erase(it);
          cached.fetch_sub(1, std::memory_order_relaxed);
        } else {
          ++it;
        }
      }
    }
    std::lock_guard<std::mutex> lock(tuned_mu);
    tuned_by_structure.erase(sig.structure);
  }
  planner_jobs::Forget forgetter() {
    return [this](const GraphSignature& sig) { forget(sig); };
  }
  Status serves_plans() const {
    if (options.target)
      return failed_precondition("this Planner is deviceless (PlannerOptions::target: " + options.target->gpu_name +
                                 "): it compiles plans, it does not serve them");
    return Status::ok();
  }

  // The promotion thread, started before it is needed (preload): its creation is then not on the first
  // stopgap's path. Call under promo_mu.
  void start_promotions_locked() {
    if (!promo_thread.joinable() && !stopping) promo_thread = std::thread([this] { promotion_loop(); });
  }
};

template <typename Make>
StatusOr<Built> Planner::Impl::single_flight(const std::string& key, Shard& shard, Make&& make, bool* leader,
                                             std::shared_ptr<const ExecutablePlan>* held) {
  std::shared_future<StatusOr<Built>> fut;
  std::promise<StatusOr<Built>> promise;
  *leader = false;
  {
    std::lock_guard<std::mutex> lock(flight_mu);
    {  // a build may have finished between the caller's lookup and here
      std::shared_lock<std::shared_mutex> rl(shard.mu);
      auto it = shard.plans.find(key);
      if (it != shard.plans.end()) {
        *held = it->second;
        return Built{};
      }
    }
    auto it = in_flight.find(key);
    if (it != in_flight.end()) {
      fut = it->second;
    } else {
      fut = promise.get_future().share();
      in_flight.emplace(key, fut);
      *leader = true;
    }
  }
  if (*leader) {
    StatusOr<Built> built = make();
    {
      std::lock_guard<std::mutex> lock(flight_mu);
      in_flight.erase(key);
    }
    promise.set_value(std::move(built));
  }
  return fut.get();
}

StatusOr<Built> Planner::Impl::tune_for(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                                        std::string* why) {
  Graph g;
  GraphSignature sig;
  KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
  Built out;
  std::string miss;
  auto stored = from_store(g, sig, &miss);  // an error is a miss, as in build()
  if (stored.is_ok() && *stored) {
    out.plan = std::move(*stored);
    out.source = PlanSource::kStore;
    return out;
  }
  KILN_ASSIGN_OR_RETURN(out.plan, backend->tune(g, sig, options.tuning, &cancel_tunes, why));
  out.source = PlanSource::kTuned;
  if (!out.plan && why->empty()) *why = "the tune gave no plan";
  return out;
}

std::shared_ptr<const ExecutablePlan> Planner::Impl::padded_plan(const PreparedGraph& pg, const Graph& g,
                                                                 const GraphSignature& sig,
                                                                 const std::map<std::string, int64_t>& shape,
                                                                 const std::vector<TunedShape>& tuned,
                                                                 std::string* why) {
  // Every tuned shape at least as large, of the bucket or at most twice as large in every dim (a shape below
  // its bucket's smallest tuned one, batch 2 against a tuned 4), nearest first: the first that pads exactly.
  std::vector<std::pair<double, const TunedShape*>> covering;
  for (const TunedShape& t : tuned) {
    if (t.shape_key == sig.shape_key || t.shape.size() != shape.size()) continue;
    bool covers = true, within_twice = true;
    for (const auto& [sym, v] : shape) {
      auto it = t.shape.find(sym);
      covers = covers && it != t.shape.end() && it->second >= v;
      within_twice = within_twice && covers && it->second - v <= v;
    }
    if (covers && (within_twice || options.buckets.same_bucket(t.shape, shape)))
      covering.emplace_back(shape_distance(t.shape, shape), &t);
  }
  std::sort(covering.begin(), covering.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->shape_key < b.second->shape_key;
  });
  if (covering.empty()) {
    *why = "padded: no tuned shape at least as large in bucket " + options.buckets.bucket_key(shape) +
           ", nor one at most twice as large outside it";
    return nullptr;
  }
  const TunedShape* best = nullptr;
  std::shared_ptr<const ExecutablePlan> larger;  // the best one's plan, when held already
  std::optional<Graph> larger_g;                 // the best one's graph, reshaped, when its plan is not held
  std::optional<PaddingLayout> layout;
  std::string first_refusal;
  for (const auto& [d, t] : covering) {
    // A held plan carries its graph at that shape: read in place, no reshape and no copy for it.
    std::shared_ptr<const ExecutablePlan> held = cached_plan(cache_key(pg, t->shape));
    std::optional<StatusOr<Graph>> reshaped;
    if (!held) reshaped.emplace(reshape_graph(*pg.graph, t->shape));
    StatusOr<PaddingLayout> pl = held                ? plan_padding(g, held->graph())
                                 : reshaped->is_ok() ? plan_padding(g, **reshaped)
                                                     : StatusOr<PaddingLayout>(reshaped->status());
    if (pl.is_ok()) {
      best = t;
      larger = std::move(held);
      if (reshaped) larger_g = std::move(**reshaped);
      layout = std::move(*pl);
      break;
    }
    if (first_refusal.empty()) first_refusal = t->shape_key + ": " + pl.status().message();
  }
  if (!best) {
    *why = "padded: " + first_refusal;
    return nullptr;
  }
  // The larger shape's plan: held already, or loaded from the store and held from now on.
  if (!larger) {
    std::string miss;
    larger = hold_stored(cache_key(pg, best->shape), *larger_g, &miss);
    if (!larger) {
      *why = "padded: the plan tuned for " + best->shape_key + " did not load: " + miss;
      return nullptr;
    }
  }
  const int64_t workspace = static_cast<int64_t>(layout->scratch_bytes) + larger->workspace_bytes();
  *why =
      "padded: runs the plan tuned for " + best->shape_key + " on scratch (" + layout->text() + "), " + stopgap_fate();
  EngineConfig config = larger->config();
  return std::make_shared<ExecutablePlan>(
      g, sig, std::move(config), workspace, PlanSource::kPadded,
      std::make_unique<PaddedExecutor>(larger, std::move(*layout), backend->device_copy()));
}

std::shared_ptr<const ExecutablePlan> Planner::Impl::split_plan(const PreparedGraph& pg, const Graph& g,
                                                                const GraphSignature& sig,
                                                                const std::map<std::string, int64_t>& shape,
                                                                const std::vector<TunedShape>& tuned,
                                                                std::string* why) {
  std::string first_miss;
  auto miss = [&](const std::string& m) {
    if (first_miss.empty()) first_miss = "split: " + m;
  };
  // Exact sums in every dim first, then covers (pass 1): a cover computes rows twice and refuses in-place calls.
  std::vector<std::tuple<int, std::string, int64_t>> order;
  for (int pass = 0; pass < (options.split_overlap ? 2 : 1); ++pass)
    for (const auto& [s, v] : shape) order.emplace_back(pass, s, v);
  for (const auto& [pass, sym, n] : order) {
    // The tuned shapes equal to this one in every other dim and smaller in `sym`, by their extent there.
    std::map<int64_t, const TunedShape*> by_extent;
    for (const TunedShape& t : tuned) {
      if (t.shape.size() != shape.size()) continue;
      bool same = true;
      int64_t e = 0;
      for (const auto& [s2, v] : shape) {
        auto it = t.shape.find(s2);
        if (it == t.shape.end()) {
          same = false;
        } else if (s2 == sym) {
          e = it->second;
        } else if (it->second != v) {
          same = false;
        }
      }
      if (same && e >= 1 && e < n) by_extent.emplace(e, &t);
    }
    if (by_extent.empty()) continue;
    std::vector<int64_t> available;
    for (const auto& [e, t] : by_extent) available.push_back(e);
    std::vector<int64_t> extents = split_extents(n, available, options.split_max_parts);
    bool cover = false;
    if (pass == 1) {
      if (!extents.empty()) continue;  // an exact sum: tried in the first pass
      extents = cover_extents(n, available, options.split_max_parts);
      cover = !extents.empty();
    } else if (extents.empty() && options.split_overlap) {
      continue;  // no sum in this dim: its cover waits for the other dims' sums
    }
    if (extents.empty()) {
      miss(sym + " " + std::to_string(n) + " is no sum of at most " + std::to_string(options.split_max_parts) +
           " tuned extents" + (options.split_overlap ? ", nor covered by as many" : " (overlapping parts are off)"));
      continue;
    }
    // Each distinct part's plan (held, or loaded from the store and held) and the rows it moves.
    std::map<int64_t, std::pair<std::shared_ptr<const ExecutablePlan>, std::vector<SplitTensor>>> plans;
    bool ok = true;
    for (int64_t e : extents) {
      if (plans.count(e)) continue;
      const TunedShape* t = by_extent.at(e);
      const std::string key = cache_key(pg, t->shape);
      std::shared_ptr<const ExecutablePlan> held = cached_plan(key);
      // A held plan carries its graph at that shape (read in place, not copied); else the graph reshaped.
      std::optional<StatusOr<Graph>> reshaped;
      if (!held) reshaped.emplace(reshape_graph(*pg.graph, t->shape));
      auto rows = held                ? split_rows(g, held->graph())
                  : reshaped->is_ok() ? split_rows(g, **reshaped)
                                      : StatusOr<std::vector<SplitTensor>>(reshaped->status());
      if (!rows.is_ok()) {  // rows that depend on each other along `sym`, or it is not outermost
        miss(t->shape_key + ": " + rows.status().message());
        ok = false;
        break;
      }
      if (!held) {
        std::string m;
        held = hold_stored(key, **reshaped, &m);
        if (!held) {
          miss("the plan tuned for " + t->shape_key + " did not load: " + m);
          ok = false;
          break;
        }
      }
      plans.emplace(e, std::make_pair(std::move(held), std::move(*rows)));
    }
    if (!ok) continue;
    std::vector<SplitExecutor::Part> parts;
    int64_t row = 0, workspace = 0;
    std::string sum;
    for (size_t k = 0; k < extents.size(); ++k) {
      const int64_t e = extents[k];
      if (cover && k + 1 == extents.size()) row = n - e;  // the last part ends at the last row
      const auto& [plan, rows] = plans.at(e);
      SplitExecutor::Part part;
      part.plan = plan;
      for (const SplitTensor& st : rows) {
        const size_t off = static_cast<size_t>(row) * st.row_bytes;
        if (off % kBindingAlignment != 0) {
          miss("tensor '" + st.name + "' row " + std::to_string(row) + " starts " + std::to_string(off) +
               " bytes in, not " + std::to_string(kBindingAlignment) + "-byte aligned");
          ok = false;
        }
        part.offsets.emplace_back(st.tensor, off);
      }
      workspace = std::max(workspace, plan->workspace_bytes());
      sum += (sum.empty() ? "" : " + ") + std::to_string(e);
      row += e;
      parts.push_back(std::move(part));
    }
    if (!ok) continue;
    std::vector<SplitExecutor::Span> cover_spans;
    if (cover) {
      const int64_t last = extents.back();
      const int64_t before_last = std::accumulate(extents.begin(), extents.end() - 1, int64_t{0});
      *why = "split: " + sym + " " + std::to_string(n) + " covered by " + sum + " (the last part on rows " +
             std::to_string(n - last) + ".." + std::to_string(n - 1) + ", " + std::to_string(before_last - (n - last)) +
             " of them computed twice), the tuned plans on their rows of the caller's buffers, " + stopgap_fate();
      cover_spans = bound_tensors(g);
    } else {
      *why = "split: " + sym + " " + std::to_string(n) + " = " + sum +
             ", the tuned plans on their rows of the caller's buffers, " + stopgap_fate();
    }
    EngineConfig config = parts.front().plan->config();
    std::vector<std::shared_ptr<const ExecutablePlan>> part_plans;
    for (const SplitExecutor::Part& part : parts) part_plans.push_back(part.plan);
    auto split = std::make_shared<ExecutablePlan>(
        g, sig, std::move(config), workspace, PlanSource::kSplit,
        std::make_unique<SplitExecutor>(std::move(parts), g.name, std::move(cover_spans)));
    split->set_parts(std::move(part_plans));  // identity(): "split[eng41 + eng41]", in run order
    return split;
  }
  *why = first_miss.empty() ? "split: no smaller tuned shape equal in the other dims" : first_miss;
  return nullptr;
}

bool Planner::Impl::warm_padded(const PreparedGraph& pg, const std::vector<TunedShape>& tuned, std::string* why) {
  std::vector<std::pair<double, const TunedShape*>> near;
  for (const TunedShape& t : tuned)
    if (t.shape.size() == pg.shape.size()) near.emplace_back(shape_distance(t.shape, pg.shape), &t);
  std::sort(near.begin(), near.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->shape_key < b.second->shape_key;
  });
  for (const auto& [d, t] : near) {
    std::map<std::string, int64_t> below = t->shape;
    bool smaller = false;
    for (auto& [sym, v] : below)
      if (v > 1) {
        --v;
        smaller = true;
      }
    if (!smaller) continue;  // one below is at most twice as large: padded_plan serves it from any bucket
    const std::string below_key = shape_key_text(below);
    if (std::any_of(tuned.begin(), tuned.end(), [&](const TunedShape& o) { return o.shape_key == below_key; }))
      continue;
    Graph g;
    GraphSignature sig;
    Status at = graph_at(pg, below, &g, &sig);
    if (!at.is_ok()) continue;  // e.g. a declared extent that does not fit that shape
    std::string miss;
    std::shared_ptr<const ExecutablePlan> padded = padded_plan(pg, g, sig, below, tuned, &miss);
    if (!padded) continue;
    Status w = backend->warm_up(*padded);
    if (!w.is_ok()) {
      *why = below_key + ": " + w.message();
      return false;
    }
    return true;
  }
  return false;
}

StatusOr<Built> Planner::Impl::segmented(const Graph& g, const GraphSignature& sig) {
  Built out;
  {
    std::lock_guard<std::mutex> lock(fusable_mu);
    if (fusable.count(sig.structure)) return out;
  }
  KILN_ASSIGN_OR_RETURN(SegmentDecision seg, backend->segments(g));
  if (seg.segments.empty()) {
    std::lock_guard<std::mutex> lock(fusable_mu);
    fusable.insert(sig.structure);
    return out;
  }
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  std::string list;
  for (const GraphPart& part : seg.segments) {
    const std::string where = "graph '" + g.name + "', segment '" + part.graph.name + "'";
    StatusOr<PreparedGraph> ppg = self->prepare(part.graph);
    if (!ppg.is_ok()) return ppg.status().with_context(where);
    // Static plans only (store, bucket, heuristics): the chain is held whole and never promoted, so a stopgap
    // in it would stay; and no mismatch policy, which is the whole graph's.
    StatusOr<Built> got = build(*ppg, ppg->shape, /*allow_stopgap=*/false);
    if (!got.is_ok()) return got.status().with_context(where);
    // Each segment passes the gate (first use) before the chain made of them may serve.
    KILN_RETURN_IF_ERROR(first_use->admit(*got->plan, got->source, part.graph.name).with_context(where));
    list += (list.empty() ? "" : "; ") + part.graph.name + ": " + got->plan->identity() + " from " +
            plan_source_name(got->plan->built_from());
    plans.push_back(std::move(got->plan));
  }
  const size_t n = seg.segments.size();
  KILN_ASSIGN_OR_RETURN(out.plan, make_unfused_plan(g, sig, seg.segments, std::move(plans), PlanSource::kSegments));
  out.source = PlanSource::kSegments;
  out.why =
      "whole graph not fusable (" + seg.why + "): runs as " + std::to_string(n) + " fused segments (" + list + ")";
  return out;
}

StatusOr<Built> Planner::Impl::after_store_miss(const Graph& g, const GraphSignature& sig, const std::string& miss,
                                                bool own_shape, std::vector<std::string>* why) {
  Built none;
  const MismatchPolicy policy = options.policy.on_mismatch;
  // A shape other than the graph's own is the other sources' work (and the recorder's), not a mismatch.
  const bool plain_miss = miss.rfind(lookup_outcome_name(LookupOutcome::kMiss), 0) == 0 || miss == "no record";
  if (!own_shape && plain_miss) return none;
  if (policy == MismatchPolicy::kHeuristicsAndQueue) {
    std::string note;
    backend->queue_retune(g, sig, miss, &note);
    if (!note.empty()) why->push_back(note);
    return none;
  }
  if (policy != MismatchPolicy::kRetune) return none;
  PromotionTuning now = options.tuning;
  now.store = options.store_writable;
  std::string tw;
  StatusOr<std::shared_ptr<const ExecutablePlan>> tuned = backend->tune(g, sig, now, &cancel_tunes, &tw);
  if (!tuned.is_ok() || !*tuned) {
    why->push_back("re-tune failed, the next sources serve: " + (tuned.is_ok() ? tw : tuned.status().message()));
    return none;
  }
  why->push_back("re-tuned now: " + (*tuned)->identity());
  if (!now.store) why->push_back("tuned plan not stored: the Planner's store is read-only (store_writable)");
  else if (!tw.empty()) why->push_back(tw);
  else why->push_back("stored in " + options.store_path);
  Built out;
  out.plan = std::move(*tuned);
  out.source = PlanSource::kTuned;
  return out;
}

void Planner::Impl::promote(Promotion p) {
  std::lock_guard<std::mutex> lock(promo_mu);
  if (stopping) return;
  promo_queue.push_back(std::move(p));
  start_promotions_locked();
  promo_cv.notify_one();
}

void Planner::Impl::promotion_loop() {
  std::unique_lock<std::mutex> lock(promo_mu);
  for (;;) {
    promo_cv.wait(lock, [&] { return stopping || !promo_queue.empty(); });
    if (stopping) break;
    Promotion p = std::move(promo_queue.front());
    promo_queue.pop_front();
    promo_busy = true;
    lock.unlock();
    std::string fallback, note;  // why a tune gave no plan; the note of one that did
    StatusOr<Built> built = catch_exceptions("promoting a plan for graph '" + p.graph.graph->name + "'", [&] {
      bool store_asked = false;
      if (options.promote_by == PromoteBy::kTune) {
        store_asked = true;  // tune_for asks it first
        std::string why;
        StatusOr<Built> tuned = tune_for(p.graph, p.shape, &why);
        if (!tuned.is_ok()) {
          fallback = tuned.status().message();
        } else if (tuned->plan) {
          note = why;
          return tuned;
        } else {
          fallback = why;
        }
      }
      return build(p.graph, p.shape, /*allow_stopgap=*/false, store_asked);
    });
    if (built.is_ok()) {  // a promoted plan that fails the gate leaves its (verified) stopgap serving
      Status admitted = first_use->admit(*built->plan, built->source, p.graph.graph->name);
      if (!admitted.is_ok()) built = admitted;
    }
    if (built.is_ok()) {
      builds.fetch_add(1, std::memory_order_relaxed);
      if (built->source == PlanSource::kTuned) promotions_tuned.fetch_add(1, std::memory_order_relaxed);
      Shard& shard = shard_for(p.key);
      std::unique_lock<std::shared_mutex> wl(shard.mu);
      // It replaces its stopgap only: a job that stored a plan for the structure meanwhile dropped it
      // (forget), and what is held now, or the next obtain's read of the store, is newer than this build.
      auto held = shard.plans.find(p.key);
      const bool replaces = generation.load() == p.generation && held != shard.plans.end() && held->second == p.stopgap;
      if (replaces) held->second = built->plan;  // callers holding the stopgap keep it alive until they drop it
      wl.unlock();
      if (replaces) {
        stopgaps.fetch_sub(1, std::memory_order_relaxed);
        promotions.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      promotion_failures.fetch_add(1, std::memory_order_relaxed);
    }
    // The stopgap's kernels, compiled for the structure, kept for the next process (off the request path).
    if (options.save_kernel_caches && p.stopgap && p.stopgap->built_from() == PlanSource::kDynamic)
      (void)backend->save_kernel_cache(p.stopgap->signature(), p.graph.graph->name);  // counted, noted by it
    lock.lock();
    if (!built.is_ok()) last_promotion_failure = built.status().message();
    const std::string which = p.graph.graph->name + " " + shape_key_text(p.shape) + ": ";
    if (!fallback.empty()) last_tune_fallback = which + fallback;
    if (!note.empty()) last_tune_note = which + note;
    promo_busy = false;
    if (promo_queue.empty()) promo_idle.notify_all();
  }
  promo_busy = false;
  promo_idle.notify_all();
}

StatusOr<Built> Planner::Impl::build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                                     bool allow_stopgap, bool store_asked) {
  Graph g;
  GraphSignature sig;
  KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
  Built out;
  std::vector<std::string> why;
  auto joined = [&] {
    std::string all;
    for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
    return all;
  };
  // The tuned shapes of this structure (for the padded stopgap and the bucket), asked once.
  std::optional<StatusOr<std::vector<TunedShape>>> tuned_once;
  auto tuned_shapes = [&]() -> const StatusOr<std::vector<TunedShape>>& {
    if (!tuned_once) tuned_once.emplace(tuned_shapes_of(sig));
    return *tuned_once;
  };
  // 0. A graph cuDNN cannot fuse whole: its segments.
  {
    KILN_ASSIGN_OR_RETURN(Built seg, segmented(g, sig));
    if (seg.plan) return seg;
  }
  // 1. The store: this exact key. True when it served (the store's plan, or under kRetune a plan tuned now);
  //    an error only where the mismatch policy refuses (kFail).
  auto from_store = [&]() -> StatusOr<bool> {
    if (store_asked) {
      why.push_back("store: asked just before (no plan)");
      return false;
    }
    std::string miss, note;
    auto stored = this->from_store(g, sig, &miss, &note);
    if (stored.is_ok() && *stored) {
      out.plan = std::move(*stored);
      out.source = PlanSource::kStore;
      if (!note.empty()) why.push_back("store: " + note);
      out.why = joined();
      return true;
    }
    if (stored.is_ok() && miss.empty()) miss = "no record";
    why.push_back("store: " + (stored.is_ok() ? miss : stored.status().message()));
    // kFail: the store refuses a stale record itself (PlanStore::get: FailedPrecondition naming the fields). It
    // holds for a promotion too: a padded stopgap's shape whose record is stale keeps its stopgap (the
    // promotion fails, saying why) rather than being replaced by a build.
    if (!stored.is_ok() && options.policy.on_mismatch == MismatchPolicy::kFail &&
        stored.status().code() == StatusCode::kFailedPrecondition)
      return stored.status().with_context("graph '" + g.name + "' (mismatch policy: fail)");
    // A store that could not be read is a miss; a promotion's miss was obtain()'s to act on.
    if (!stored.is_ok() || !allow_stopgap || options.store_path.empty()) return false;
    KILN_ASSIGN_OR_RETURN(Built tuned, after_store_miss(g, sig, miss, shape == pg.shape, &why));
    if (!tuned.plan) return false;
    out.plan = std::move(tuned.plan);
    out.source = tuned.source;
    out.why = joined();
    return true;
  };
  const bool stopgap = allow_stopgap && options.new_shapes == NewShapes::kStopgap && !shape.empty();
  // Where a padded stopgap may serve and the structure's tuned shapes (read once) do not hold this one, the
  // store is asked after the padded source, not before: its miss (a SQLite read, 0.04-0.2 ms) was most of
  // a padded obtain. A plan stored for exactly this key that is not tuned (kiln compile), or was stored
  // since the tuned shapes were read, is still found: the promotion asks the store first and swaps it in.
  bool store_first = true;
  const bool unbuilt = stopgap && (options.padded || options.split);
  if (unbuilt && options.promote) {  // without promotions nothing would ask it later
    const auto& tuned = tuned_shapes();
    store_first = !tuned.is_ok() || std::any_of(tuned->begin(), tuned->end(),
                                                [&](const TunedShape& t) { return t.shape_key == sig.shape_key; });
  }
  if (store_first) {
    KILN_ASSIGN_OR_RETURN(bool served, from_store());
    if (served) return out;
  }
  // 2. A stopgap with no build: tuned plans on the caller's rows (split), else a larger tuned shape's plan on
  //    scratch copies (padded).
  if (unbuilt) {
    const auto& tuned = tuned_shapes();
    std::string miss;
    std::shared_ptr<const ExecutablePlan> plan =
        tuned.is_ok() ? unbuilt_stopgap(pg, g, sig, shape, *tuned, &miss) : nullptr;
    if (plan) {
      if (!store_first) why.push_back("store: asked by the promotion (no tuned record for this shape)");
      out.source = plan->built_from();
      out.plan = std::move(plan);
      why.push_back(miss);
      out.why = joined();
      return out;
    }
    why.push_back(tuned.is_ok() ? miss : "tuned shapes: " + tuned.status().message());
  }
  if (!store_first) {
    KILN_ASSIGN_OR_RETURN(bool served, from_store());
    if (served) return out;
  }
  // 3. A dynamic stopgap: a dynamic-shape build that shares the structure's kernel cache; its static plan
  //    is built in the background (promotion).
  if (stopgap) {
    if (static_is_cheap(sig.structure)) {
      why.push_back("dynamic: skipped, static builds of this structure take under 5 ms");
    } else {
      auto dyn = backend->build(g, sig, std::nullopt, PlanSource::kDynamic);
      if (dyn.is_ok() && *dyn) {
        out.plan = std::move(*dyn);
        out.source = PlanSource::kDynamic;
        {
          std::lock_guard<std::mutex> lock(dynamic_mu);
          dynamic_structures.emplace(sig.structure, std::make_pair(sig, g.name));
        }
        why.push_back("dynamic: a stopgap, its static plan is being built");
        out.why = joined();
        return out;
      }
      why.push_back("dynamic: " + (dyn.is_ok() ? std::string("no plan") : dyn.status().message()));
    }
  }
  // 4. The bucket: the nearest tuned shape of this structure in the same bucket, its configuration built
  //    for this shape directly.
  if (!shape.empty()) {
    const auto& tuned = tuned_shapes();
    if (!tuned.is_ok()) {
      why.push_back("bucket: " + tuned.status().message());
    } else {
      const TunedShape* best = nullptr;
      double best_d = 0;
      for (const TunedShape& t : *tuned) {
        if (t.shape_key == sig.shape_key || !options.buckets.same_bucket(t.shape, shape)) continue;
        const double d = shape_distance(t.shape, shape);
        if (!best || d < best_d || (d == best_d && t.shape_key < best->shape_key)) {
          best = &t;
          best_d = d;
        }
      }
      if (!best) {
        why.push_back("bucket " + options.buckets.bucket_key(shape) + ": no tuned shape");
      } else {
        const auto t0 = Clock::now();
        auto built = backend->build(g, sig, best->config, PlanSource::kBucket);
        if (built.is_ok() && *built) {
          note_static_cost(sig.structure, ms_since(t0));
          out.plan = std::move(*built);
          out.source = PlanSource::kBucket;
          why.push_back("bucket " + options.buckets.bucket_key(shape) + ": " + best->config.identity() + " tuned for " +
                        best->shape_key);
          out.why = joined();
          return out;
        }
        why.push_back("bucket: " + best->config.identity() + " (tuned for " + best->shape_key +
                      ") does not build here: " + (built.is_ok() ? std::string("no plan") : built.status().message()));
      }
    }
  }
  // 5. cuDNN's heuristics.
  const auto t0 = Clock::now();
  auto built = backend->build(g, sig, std::nullopt, PlanSource::kHeuristics);
  if (built.is_ok() && *built) note_static_cost(sig.structure, ms_since(t0));
  const std::string all = joined();
  if (!built.is_ok()) return built.status().with_context("graph '" + g.name + "' (" + all + "; heuristics)");
  if (!*built) return internal_error("graph '" + g.name + "': the backend returned no plan from heuristics");
  out.plan = std::move(*built);
  out.source = PlanSource::kHeuristics;
  out.why = all;
  return out;
}

Planner::Planner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }
Planner::~Planner() = default;

std::unique_ptr<Planner> Planner::create_with_backend(std::unique_ptr<PlanBackend> backend,
                                                      const PlannerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->backend = std::move(backend);
  impl->options = options;
  impl->first_use = std::make_unique<runtime_detail::FirstUseGate>(options.first_use, impl->backend.get());
  return std::unique_ptr<Planner>(new Planner(std::move(impl)));
}

StatusOr<std::unique_ptr<Planner>> Planner::create(const PlannerOptions& options) {
  const PromotionTuning& t = options.tuning;
  if (t.top_k < 0) return invalid_argument("PromotionTuning::top_k must be >= 0, got " + std::to_string(t.top_k));
  if (!std::isfinite(t.time_budget_s) || t.time_budget_s < 0)
    return invalid_argument("PromotionTuning::time_budget_s must be finite and >= 0 (0: none)");
  if (!(t.gpu_share > 0 && t.gpu_share <= 1))
    return invalid_argument("PromotionTuning::gpu_share must be in (0, 1], got " + std::to_string(t.gpu_share));
  if (!std::isfinite(t.candidate_budget_ms) || t.candidate_budget_ms < 0)
    return invalid_argument("PromotionTuning::candidate_budget_ms must be finite and >= 0 (0: the tuner's own)");
  if (t.build_threads < 1)
    return invalid_argument("PromotionTuning::build_threads must be >= 1, got " + std::to_string(t.build_threads));
  if (options.split_max_parts < 2 || options.split_max_parts > 64)
    return invalid_argument("PlannerOptions::split_max_parts must be 2..64 (one part is the shape itself), got " +
                            std::to_string(options.split_max_parts));
  if (options.promote_by == PromoteBy::kTune && t.store && options.store_path.empty())
    return invalid_argument("PromotionTuning::store needs a store: set PlannerOptions::store_path");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PlanBackend> backend, make_cudnn_plan_backend(options));
  return create_with_backend(std::move(backend), options);
}

StatusOr<PreparedGraph> Planner::prepare(const Graph& graph) const {
  auto g = std::make_shared<Graph>(graph);
  KILN_RETURN_IF_ERROR(validate_graph(*g));
  PreparedGraph pg;
  KILN_ASSIGN_OR_RETURN(pg.signature, compute_signature(*g));
  pg.shape = g->dynamic_dims;
  std::vector<std::pair<int, std::string>> by_id;  // by canonical id: declaration order does not matter
  for (size_t i = 0; i < g->tensors.size(); ++i) by_id.emplace_back(pg.signature.tensor_ids[i], g->tensors[i].name);
  std::sort(by_id.begin(), by_id.end());
  std::string names;
  for (const auto& [id, name] : by_id) names += std::to_string(id) + ":" + name + "\n";
  pg.names_key = std::to_string(stable_hash64(names));
  pg.graph = std::move(g);
  return pg;
}

StatusOr<Obtained> Planner::obtain(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph pg, prepare(graph));
  return obtain(pg);
}

StatusOr<Obtained> Planner::obtain(const PreparedGraph& pg, const std::map<std::string, int64_t>& requested) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  const auto t0 = Clock::now();
  Impl& s = *impl_;
  if (!pg.graph) return invalid_argument("obtain: the PreparedGraph is empty (use Planner::prepare)");
  const std::map<std::string, int64_t>& shape = requested.empty() ? pg.shape : requested;
  if (!requested.empty()) {
    bool same_symbols = requested.size() == pg.shape.size();
    for (auto a = requested.begin(), b = pg.shape.begin(); same_symbols && a != requested.end(); ++a, ++b)
      same_symbols = a->first == b->first;
    if (!same_symbols) {
      s.failures.fetch_add(1, std::memory_order_relaxed);
      std::string known;
      for (const auto& [sym, v] : pg.shape) known += (known.empty() ? "" : ", ") + sym;
      return invalid_argument("graph '" + pg.graph->name + "': shape " + shape_key_text(requested) +
                              " does not name exactly its dynamic dims (" + (known.empty() ? "none" : known) + ")");
    }
  }
  const std::string key = Impl::cache_key(pg, shape);
  auto record = [&](PlanSource src, const ExecutablePlan& p) { s.note_served(src, p, pg.graph->name); };
  Impl::Shard& shard = s.shard_for(key);
  {
    std::shared_lock<std::shared_mutex> lock(shard.mu);
    auto it = shard.plans.find(key);
    if (it != shard.plans.end()) {
      Obtained o;
      o.plan = it->second;
      lock.unlock();
      o.source = PlanSource::kMemory;
      record(o.source, *o.plan);
      o.obtain_ms = ms_since(t0);
      return o;
    }
  }
  bool leader = false;
  std::shared_ptr<const ExecutablePlan> held;
  const uint64_t generation = s.generation.load();
  StatusOr<Built> r = s.single_flight(
      key, shard,
      [&]() -> StatusOr<Built> {
        StatusOr<Built> built = catch_exceptions("obtaining a plan for graph '" + pg.graph->name + "'",
                                                 [&] { return s.build(pg, shape, /*allow_stopgap=*/true); });
        if (!built.is_ok()) return built;  // a failure is handed to the waiters and not cached
        s.builds.fetch_add(1, std::memory_order_relaxed);
        // Not served, and not held, before it has passed the numerics gate in this environment; a heuristic
        // choice that fails gives way to the next configuration the heuristics offer that passes.
        KILN_RETURN_IF_ERROR(s.admit_or_next_heuristic(&*built, pg.graph->name));
        std::unique_lock<std::shared_mutex> wl(shard.mu);
        // Not cached when a job stored a plan for a structure meanwhile (forget): this one may predate it.
        const bool inserted = s.generation.load() == generation && shard.plans.emplace(key, built->plan).second;
        wl.unlock();
        if (inserted) {
          s.cached.fetch_add(1, std::memory_order_relaxed);
          if (plan_source_is_stopgap(built->source)) {
            s.stopgaps.fetch_add(1, std::memory_order_relaxed);
            if (s.options.promote) s.promote(Promotion{key, pg, shape, built->plan, generation});
          }
        }
        return built;
      },
      &leader, &held);
  if (held) {
    Obtained o;
    o.plan = std::move(held);
    o.source = PlanSource::kMemory;
    record(o.source, *o.plan);
    o.obtain_ms = ms_since(t0);
    return o;
  }
  if (!r.is_ok()) {
    s.failures.fetch_add(1, std::memory_order_relaxed);
    return r.status();
  }
  Obtained o;
  o.plan = r->plan;
  o.source = leader ? r->source : PlanSource::kMemory;
  o.why = leader ? r->why : "waited for a concurrent build from " + std::string(plan_source_name(r->source));
  record(o.source, *o.plan);
  o.obtain_ms = ms_since(t0);
  return o;
}

StatusOr<Obtained> Planner::obtain_pinned(const PreparedGraph& pg, const EngineConfig& config,
                                          const std::map<std::string, int64_t>& requested) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  const auto t0 = Clock::now();
  Impl& s = *impl_;
  if (!pg.graph) return invalid_argument("obtain_pinned: the PreparedGraph is empty (use Planner::prepare)");
  const std::map<std::string, int64_t>& shape = requested.empty() ? pg.shape : requested;
  // Its own key: the graph's plan from the other sources is another entry.
  const std::string key = Impl::cache_key(pg, shape) + "|pin=" + config.identity();
  Obtained o;
  if ((o.plan = s.cached_plan(key))) {
    o.source = PlanSource::kMemory;
  } else {
    // Single flight, as obtain(): concurrent first calls for one pinned key build once.
    Impl::Shard& shard = s.shard_for(key);
    bool leader = false;
    std::shared_ptr<const ExecutablePlan> held;
    StatusOr<Built> r = s.single_flight(
        key, shard,
        [&]() -> StatusOr<Built> {
          Graph g;
          GraphSignature sig;
          KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
          Built out;
          KILN_ASSIGN_OR_RETURN(
              out.plan, catch_exceptions("building a pinned plan for graph '" + pg.graph->name + "'",
                                         [&] { return s.backend->build(g, sig, config, PlanSource::kPinned); }));
          if (!out.plan)
            return internal_error("graph '" + pg.graph->name + "': the backend returned no plan for " +
                                  config.identity());
          out.source = PlanSource::kPinned;
          out.why = "pinned: " + config.identity() + " as asked (no store, no heuristics)";
          s.builds.fetch_add(1, std::memory_order_relaxed);
          KILN_RETURN_IF_ERROR(s.first_use->admit(*out.plan, PlanSource::kPinned, pg.graph->name));
          std::unique_lock<std::shared_mutex> wl(shard.mu);
          if (shard.plans.emplace(key, out.plan).second) s.cached.fetch_add(1, std::memory_order_relaxed);
          return out;
        },
        &leader, &held);
    if (held) {
      o.plan = std::move(held);
      o.source = PlanSource::kMemory;
    } else if (!r.is_ok()) {
      s.failures.fetch_add(1, std::memory_order_relaxed);
      return r.status();
    } else {
      o.plan = r->plan;
      o.source = leader ? PlanSource::kPinned : PlanSource::kMemory;
      o.why = leader ? r->why : "waited for a concurrent build of the pinned configuration";
    }
  }
  s.note_served(o.source, *o.plan, pg.graph->name);
  o.obtain_ms = ms_since(t0);
  return o;
}

StatusOr<PreloadReport> Planner::preload(const PreparedGraph& pg, bool warm) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  Impl& s = *impl_;
  if (!pg.graph) return invalid_argument("preload: the PreparedGraph is empty (use Planner::prepare)");
  const auto t0 = Clock::now();
  PreloadReport rep;
  if (s.options.promote && s.options.new_shapes == NewShapes::kStopgap) {
    std::lock_guard<std::mutex> lock(s.promo_mu);
    s.start_promotions_locked();
  }
  KILN_ASSIGN_OR_RETURN(std::vector<TunedShape> tuned, s.tuned_shapes_of(pg.signature, /*refresh=*/true));
  for (const TunedShape& t : tuned) {
    if (t.shape.size() != pg.shape.size()) continue;
    const std::string key = Impl::cache_key(pg, t.shape);
    if (s.cached_plan(key)) continue;
    auto note = [&](const std::string& reason) {
      ++rep.failed;
      rep.last_failure = t.shape_key + ": " + reason;
    };
    auto g = t.shape == pg.shape ? StatusOr<Graph>(*pg.graph) : reshape_graph(*pg.graph, t.shape);
    if (!g.is_ok()) {
      note(g.status().message());
      continue;
    }
    std::string miss;
    bool inserted = false;
    std::shared_ptr<const ExecutablePlan> plan = s.hold_stored(key, *g, &miss, &inserted);
    if (!plan) {
      note(miss);
      continue;
    }
    if (!inserted) continue;  // a concurrent obtain of that shape held one first
    ++rep.loaded;
    if (warm) {
      Status w = s.backend->warm_up(*plan);
      if (!w.is_ok()) note("warm-up: " + w.message());  // loaded all the same: it runs, just not warm
      else ++rep.warmed;
    }
  }
  if (warm) {
    Status h = s.backend->warm_concurrency();
    if (!h.is_ok()) {
      ++rep.failed;
      rep.last_failure = "warm-up of the handles: " + h.message();
    }
    std::string why;
    if ((s.options.padded || s.options.split) && s.options.new_shapes == NewShapes::kStopgap && !pg.shape.empty())
      rep.padded_warmed = s.warm_padded(pg, tuned, &why);
    if (!why.empty()) {
      ++rep.failed;
      rep.last_failure = "padded warm-up: " + why;
    }
  }
  rep.ms = ms_since(t0);
  return rep;
}

PlannerStats Planner::stats() const {
  PlannerStats st;
  for (int i = 0; i < kPlanSourceCount; ++i) st.served[i] = impl_->served[i].load(std::memory_order_relaxed);
  st.builds = impl_->builds.load(std::memory_order_relaxed);
  st.failures = impl_->failures.load(std::memory_order_relaxed);
  st.cached = impl_->cached.load(std::memory_order_relaxed);
  const GraphCounters& g = *impl_->graphs;
  st.graph_captures = g.captures.load(std::memory_order_relaxed);
  st.graph_instantiations = g.instantiations.load(std::memory_order_relaxed);
  st.graph_replays = g.replays.load(std::memory_order_relaxed);
  st.graph_stream_runs = g.stream_runs.load(std::memory_order_relaxed);
  st.graph_updates = g.updates.load(std::memory_order_relaxed);
  st.graph_update_refusals = g.update_refusals.load(std::memory_order_relaxed);
  st.graph_reinstantiations = g.reinstantiations.load(std::memory_order_relaxed);
  st.stopgaps = impl_->stopgaps.load(std::memory_order_relaxed);
  st.promotions = impl_->promotions.load(std::memory_order_relaxed);
  st.promotions_tuned = impl_->promotions_tuned.load(std::memory_order_relaxed);
  st.promotion_failures = impl_->promotion_failures.load(std::memory_order_relaxed);
  st.first_use_checks = impl_->first_use->checks();
  st.first_use_refused = impl_->first_use->refused();
  st.heuristic_fall_throughs = impl_->heuristic_fall_throughs.load();
  st.last_first_use_failure = impl_->first_use->last_failure();
  std::lock_guard<std::mutex> lock(impl_->promo_mu);
  st.last_promotion_failure = impl_->last_promotion_failure;
  st.last_tune_fallback = impl_->last_tune_fallback;
  st.last_tune_note = impl_->last_tune_note;
  const KernelCacheCounts k = impl_->backend->kernel_cache_counts();
  st.kernel_caches_loaded = k.loaded;
  st.kernel_caches_saved = k.saved;
  st.last_kernel_cache_note = k.last_note;
  return st;
}

Status Planner::save_kernel_caches() {
  if (!impl_->options.save_kernel_caches)
    return failed_precondition("the Planner keeps no kernel caches (PlannerOptions::save_kernel_caches is off)");
  std::map<std::string, std::pair<GraphSignature, std::string>> structures;
  {
    std::lock_guard<std::mutex> lock(impl_->dynamic_mu);
    structures = impl_->dynamic_structures;
  }
  Status first;
  for (const auto& [structure, sig_name] : structures) {
    Status st = impl_->backend->save_kernel_cache(sig_name.first, sig_name.second);
    if (!st.is_ok() && first.is_ok()) first = st.with_context("graph '" + sig_name.second + "'");
  }
  return first;
}

StatusOr<TunedGraph> Planner::tune_and_store(const Graph& graph, const TuneJob& job) {
  return planner_jobs::tune_and_store(*impl_->backend, impl_->options, graph, job, impl_->forgetter());
}

StatusOr<CompiledGraph> Planner::compile(const Graph& graph, const std::optional<EngineConfig>& pin) {
  return planner_jobs::compile(*impl_->backend, impl_->options, graph, pin, impl_->forgetter());
}

StatusOr<RetuneReport> Planner::retune_queued(const RetuneOptions& options) {
  return planner_jobs::retune_queued(*impl_->backend, impl_->options, options, impl_->forgetter());
}

void Planner::wait_for_promotions() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.promo_mu);
  s.promo_idle.wait(lock, [&] { return s.stopping || (s.promo_queue.empty() && !s.promo_busy); });
}

const ShapeRecorder& Planner::recorder() const { return impl_->recorder; }
const BucketPolicy& Planner::buckets() const { return impl_->options.buckets; }
const PlannerOptions& Planner::options() const { return impl_->options; }
std::shared_ptr<GraphCounters> Planner::graph_counters() const { return impl_->graphs; }

}  // namespace kiln
