// The Planner's cuDNN backend (kiln/runtime/planner.h): plans from the plan store and from cuDNN, each executed
// with a handle taken from a pool for the duration of the call. The environment is collected once.
#include <cudnn.h>

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/cuda/capture_gate.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/cudnn_primer.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"
#include "kiln/lower/plan_words.h"
#include "kiln/tune/tuner.h"
#include "runtime/first_use.h"
#include "runtime/planner_jobs_internal.h"
#include "runtime/warmed_loads.h"

namespace kiln {
namespace {

// cuDNN handles, one per concurrent call (a handle is not for two threads at once). One is made at start;
// more are made when calls overlap, up to the pool's size (a cold start pays for one handle, not N).
class HandlePool {
 public:
  static StatusOr<std::shared_ptr<HandlePool>> create(int n) {
    auto p = std::make_shared<HandlePool>();
    p->max_ = std::max(1, n);
    KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle h, new_handle());
    p->free_.push_back(h.get());
    p->owned_.push_back(std::move(h));
    return p;
  }
  // A handle for the caller's scope. `may_create` false: wait for a free one rather than make one (under
  // stream capture, where cudnnCreate's allocations would break the capture).
  class Lease {
   public:
    Lease(HandlePool* pool, cudnnHandle_t h) : pool_(pool), h_(h) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), h_(o.h_) { o.pool_ = nullptr; }
    Lease(const Lease&) = delete;
    ~Lease() {
      if (pool_) pool_->release(h_);
    }
    cudnnHandle_t get() const { return h_; }

   private:
    HandlePool* pool_;
    cudnnHandle_t h_;
  };
  // cudnnDestroy synchronizes the device: not while another thread captures a graph (the pool goes with the last
  // plan that holds it, on whatever thread drops it).
  ~HandlePool() {
    SynchronizingWork sync;
    owned_.clear();
  }
  // cudnnCreate allocates on the device: not while another thread captures a graph.
  static StatusOr<UniqueCudnnHandle> new_handle() {
    SynchronizingWork sync;
    if (sync.refused()) return refused_under_capture("making a cuDNN handle");
    return make_cudnn_handle();
  }
  // Makes handles until the pool holds as many as it may (idempotent).
  Status fill() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (made_ >= max_) return Status::ok();
        ++made_;
      }
      StatusOr<UniqueCudnnHandle> h = new_handle();
      std::lock_guard<std::mutex> lock(mu_);
      if (!h.is_ok()) {
        --made_;
        return h.status();
      }
      free_.push_back(h->get());
      owned_.push_back(std::move(h).value());
      cv_.notify_one();
    }
  }
  StatusOr<Lease> acquire(bool may_create = true) {
    std::unique_lock<std::mutex> lock(mu_);
    if (may_create && free_.empty() && made_ < max_) {
      ++made_;  // this caller makes one (outside the lock: cudnnCreate takes a while)
      lock.unlock();
      StatusOr<UniqueCudnnHandle> h = new_handle();
      lock.lock();
      if (!h.is_ok()) {
        --made_;
        return h.status();
      }
      cudnnHandle_t raw = h->get();
      owned_.push_back(std::move(h).value());
      return Lease(this, raw);
    }
    cv_.wait(lock, [&] { return !free_.empty(); });
    cudnnHandle_t h = free_.back();
    free_.pop_back();
    return Lease(this, h);
  }

 private:
  void release(cudnnHandle_t h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(h);
    }
    cv_.notify_one();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int max_ = 1, made_ = 1;

 public:
  int size() const { return max_; }  // the most handles it makes (PlannerOptions::handles)

 private:
  std::vector<cudnnHandle_t> free_;
  std::vector<UniqueCudnnHandle> owned_;
};

class CudnnExecutor : public PlanExecutor {
 public:
  CudnnExecutor(LoweredGraph plan, std::shared_ptr<HandlePool> pool) : plan_(std::move(plan)), pool_(std::move(pool)) {}
  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    // Under capture (kiln/capture/capture.h) a handle is never made: the pool holds at least one.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (stream && cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
      (void)cudaGetLastError();
      capturing = cudaStreamCaptureStatusNone;
    }
    KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire(capturing == cudaStreamCaptureStatusNone));
    const cudnnStatus_t st = cudnnSetStream(h.get(), stream);
    if (st != CUDNN_STATUS_SUCCESS) return unavailable(std::string("cudnnSetStream: ") + cudnnGetErrorString(st));
    Status run = plan_.execute(h.get(), pointers, workspace);
    // The handle goes back to the pool on the default stream: the caller may destroy `stream` once its
    // work is done, and a later build with this handle must not touch it (it crashed kiln replay --warm,
    // whose warm-up streams are gone before the first request's build).
    (void)cudnnSetStream(h.get(), nullptr);
    return run;
  }

 private:
  LoweredGraph plan_;
  std::shared_ptr<HandlePool> pool_;
};

class CudnnPlanBackend : public PlanBackend {
 public:
  static StatusOr<std::unique_ptr<PlanBackend>> create(const PlannerOptions& o) {
    std::unique_ptr<CudnnPlanBackend> b(new CudnnPlanBackend());
    b->policy_ = o.policy;
    b->first_use_check_ = o.first_use_check;
    b->store_path_ = o.store_path;
    b->save_kernel_caches_ = o.save_kernel_caches;
    if (o.target) {  // deviceless: no GPU, no handles; the environment is the profile's
      b->target_ = *o.target;
      b->env_ = fingerprint_for_profile(*o.target);
      if (!o.store_path.empty()) {
        KILN_ASSIGN_OR_RETURN(b->writer_, PlanStore::open(o.store_path));
      }
      return std::unique_ptr<PlanBackend>(std::move(b));
    }
    // A store to be created (store_writable, nothing or an empty file at the path) is made after the device
    // check: a Planner that could not start leaves none behind.
    struct stat st {};
    const bool to_create = o.store_writable && !o.store_path.empty() &&
                           (::stat(o.store_path.c_str(), &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0));
    // With store_writable the one connection is writable and serves the jobs' writes too (shared_store_): a
    // read-only connection closed last would leave the store's -wal and -shm files behind, and the plans
    // just written in the -wal alone.
    b->shared_store_ = o.store_writable;
    // An existing store opens on a thread of its own while the GPU is checked and the first cuDNN handle is made
    // (3-4 ms each on the H200's host); its error, a wrong store path being the caller's on any machine, is
    // reported before the GPU's.
    CudnnPlanBackend* backend = b.get();
    // Read-only unless store_writable (else a tuned promotion writes through writer_, PromotionTuning::store).
    StoreOpenOptions store_options;
    store_options.read_only = !o.store_writable;
    if (is_server_location(o.store_path))
      store_options.mirror_path = o.store_mirror == "auto" ? default_mirror_path(o.store_path) : o.store_mirror;
    auto open_store = [backend, &o, store_options]() -> Status {
      StoreOpenOptions so = store_options;
      StatusOr<std::unique_ptr<PlanStore>> opened = PlanStore::open(o.store_path, so);
      // A store this user cannot write (a baked store in a read-only place) still serves its plans: read-only,
      // so nothing is queued or stored ("not queued for re-tune: ... opened read-only").
      if (!opened.is_ok() && !so.read_only && PlanStore::is_unwritable_store(opened.status())) {
        KILN_LOG(kWarn, "plan store " << o.store_path
                                      << " cannot be written by this user: opened read-only (its plans serve; "
                                         "nothing is queued or stored in it)");
        so.read_only = true;
        backend->shared_store_ = false;
        opened = PlanStore::open(o.store_path, so);
      }
      KILN_ASSIGN_OR_RETURN(backend->store_, std::move(opened));
      return Status::ok();
    };
    Status store_status;
    std::thread store_thread;
    struct Joiner {
      std::thread& t;
      ~Joiner() {
        if (t.joinable()) t.join();
      }
    } join_store{store_thread};
    if (!o.store_path.empty() && !to_create) {
      // What a path alone says (missing, a folder, a pipe) before any GPU work, as before the open moved here.
      KILN_RETURN_IF_ERROR(PlanStore::check_path(o.store_path, store_options));
      try {
        // An exception must not leave the thread (std::terminate): it is the Status create() gave before.
        store_thread = std::thread([&] { store_status = catch_exceptions("kiln::Planner", open_store); });
      } catch (const std::system_error&) {  // no thread: open it here
        store_status = open_store();
      }
    }
    // cuDNN's sub-libraries load while the CUDA context is made (collect_environment makes it), not on the
    // first plan; its first-use work is paid on a thread of its own that create() does not wait for
    // (kiln/runtime/cudnn_primer.h; the destructor joins it). docs/runtime.md "Cold start".
    // (The primer first: if starting the second thread throws, the first is a member, joined by ~.)
    if (o.prime_cudnn)
      b->primer_ = std::thread([] {
        PrimeReport r = prime_cudnn();
        if (r.first && !r.status.is_ok())
          KILN_LOG(kInfo, "cuDNN was not primed (the first plan pays its first-use work): " << r.how << ": "
                                                                                            << r.status.message());
      });
    std::thread preload([] { preload_cudnn_libraries(); });
    EnvReport env = collect_environment();
    preload.join();
    StatusOr<std::shared_ptr<HandlePool>> pool = env.device_status.is_ok()
                                                     ? HandlePool::create(o.handles)
                                                     : StatusOr<std::shared_ptr<HandlePool>>(env.device_status);
    if (store_thread.joinable()) store_thread.join();
    KILN_RETURN_IF_ERROR(store_status);
    if (!env.device_status.is_ok()) return env.device_status.with_context("kiln::Planner needs a GPU");
    b->env_ = env.fingerprint;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&b->device_));
    KILN_ASSIGN_OR_RETURN(b->pool_, std::move(pool));
    if (to_create) {
      KILN_ASSIGN_OR_RETURN(b->store_, PlanStore::open(o.store_path));
    }
    return std::unique_ptr<PlanBackend>(std::move(b));
  }

  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& graph, const GraphSignature& sig,
                                                             std::string* why) override {
    if (!store_) {
      *why = "no store";
      return std::shared_ptr<const ExecutablePlan>();
    }
    // No validator under the store's lock: the record is deserialized after get(), and a failure to load it
    // here (a transient device error, say) is a miss for this call, not a reason to quarantine it.
    StatusOr<LookupResult> got = [&] {
      std::lock_guard<std::mutex> lock(store_mu_);
      return store_->get(sig.structure, sig.shape_key, env_, policy_);
    }();
    KILN_ASSIGN_OR_RETURN(LookupResult look, std::move(got));
    if (!look.runnable() || !look.record) {
      *why = retune_reason(look).substr(std::strlen("store "));  // "stale: cudnn_version: recorded ..."
      return std::shared_ptr<const ExecutablePlan>();
    }
    const PlanRecord& rec = *look.record;
    std::vector<uint8_t> bytes(rec.plan_bytes.begin(), rec.plan_bytes.end());
    StatusOr<LoweredGraph> lg = load(graph, bytes);
    if (!lg.is_ok()) {
      *why = "record did not load: " + lg.status().message();
      return std::shared_ptr<const ExecutablePlan>();
    }
    auto plan = plan_of(graph, sig, EngineConfig{rec.engine_id, rec.knobs}, std::move(lg).value(), PlanSource::kStore);
    // Known to pass only when the tune checked it: a record of `kiln tune --no-verify` is tuned but unverified.
    if (rec.tuned && rec.numerics.verdict == Disposition::kPassed) {
      std::lock_guard<std::mutex> lock(tuned_mu_);
      tuned_store_plans_.insert(runtime_detail::first_use_key(*plan));
    }
    return plan;
  }

  // The key's plan in shadow, exactly this environment's (a verdict is recorded under the same key).
  StatusOr<std::optional<PlanRecord>> shadow_record(const GraphSignature& sig) override {
    if (!store_) return std::optional<PlanRecord>();
    ListFilter filter;
    filter.structure_prefix = sig.structure;
    filter.shape_key = sig.shape_key;
    filter.fingerprint_key = fingerprint_key(env_);
    StatusOr<std::vector<RolloutEntry>> entries = [&] {
      std::lock_guard<std::mutex> lock(store_mu_);
      return store_->rollout_entries(filter);
    }();
    KILN_RETURN_IF_ERROR(entries.status());
    for (const RolloutEntry& e : *entries)  // newest first
      if (e.state == PlanState::kShadow && e.problem.empty() && e.record.structure_sig == sig.structure)
        return std::optional<PlanRecord>(e.record);
    return std::optional<PlanRecord>();
  }

  StatusOr<SegmentDecision> segments(const Graph& graph) override {
    if (!pool_) return SegmentDecision{};  // deviceless: compile() cuts by cuDNN's limits itself
    KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire());
    return segments_if_unfusable(graph, h.get());
  }

  // Through the Planner's own connection: a read-only one (store_writable unset) refuses, and says so.
  void queue_retune(const Graph& graph, const GraphSignature&, const std::string& why_missed,
                    std::string* note) override {
    if (!store_) return;
    StatusOr<RetuneQueueEntry> q = [&] {
      std::lock_guard<std::mutex> lock(store_mu_);
      return kiln::queue_retune(*store_, graph, env_, "store " + why_missed);  // as retune_reason words it
    }();
    if (q.is_ok())
      *note = "queued for re-tune (requested " + std::to_string(q->request_count) +
              (q->request_count == 1 ? " time)" : " times)");
    else *note = "not queued for re-tune: " + q.status().message();
    KILN_LOG(kInfo, "graph '" << graph.name << "': " << *note);
  }

  StatusOr<std::optional<FusionRecord>> fusion_record(const GraphSignature& sig) override {
    if (!store_) return std::optional<FusionRecord>();
    std::lock_guard<std::mutex> lock(store_mu_);
    return store_->get_fusion_record(sig.structure, sig.shape_key, env_, policy_);
  }

  // First-use verification: a record tuned in this environment (from_store saw it) passed the gate when it
  // was tuned; any other plan is run and checked now (runtime/first_use.h).
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    if (!pool_) return FirstUseVerdict{true, false, "deviceless: nothing runs here"};
    if (plan.built_from() == PlanSource::kStore) {
      std::lock_guard<std::mutex> lock(tuned_mu_);
      if (tuned_store_plans_.count(runtime_detail::first_use_key(plan)))
        return FirstUseVerdict{true, false, "its store record was tuned in this environment"};
    }
    // A verdict the store keeps for this configuration in this environment (another Planner, perhaps on
    // another host, checked it): a failed one is never served, a passing one is not checked again.
    // Per environment and per Kiln build: a new Kiln may lower the same configuration differently (a canonical
    // rule), so a verdict made by another build does not carry over.
    const std::string fp = fingerprint_key(env_) + "/kiln " + env_.kiln_version + " " + env_.kiln_git_revision;
    if (store_) {
      StatusOr<std::optional<FirstUseRecord>> kept = [&] {
        std::lock_guard<std::mutex> lock(store_mu_);
        return store_->get_first_use_verdict(plan.signature().structure, plan.signature().shape_key, plan.identity(),
                                             fp);
      }();
      if (kept.is_ok() && kept->has_value())
        return FirstUseVerdict{(*kept)->passed, false, "verdict kept in the store: " + (*kept)->summary};
      if (!kept.is_ok()) KILN_LOG(kWarn, "first-use verdict not read from the store: " << kept.status().message());
    }
    StatusOr<CheckReport> checked = [&]() -> StatusOr<CheckReport> {
      SynchronizingWork sync;  // synchronizes the device: not while another thread captures a graph
      if (sync.refused()) return refused_under_capture("a first-use check of " + plan.identity());
      return runtime_detail::check_plan_on_device(plan, first_use_check_, /*seed=*/1);
    }();
    KILN_ASSIGN_OR_RETURN(CheckReport r, std::move(checked));
    FirstUseVerdict v{r.verdict == Disposition::kPassed, true, r.summary()};
    // Kept for every Planner sharing the store, when this one may write it (store_writable).
    if (store_ && shared_store_) {
      FirstUseRecord rec;
      rec.structure_sig = plan.signature().structure;
      rec.shape_key = plan.signature().shape_key;
      rec.config = plan.identity();
      rec.fingerprint_key = fp;
      rec.passed = v.passed;
      rec.summary = v.summary;
      StatusOr<FirstUseRecord> put = [&] {
        std::lock_guard<std::mutex> lock(store_mu_);
        return store_->put_first_use_verdict(rec);
      }();
      if (!put.is_ok()) KILN_LOG(kWarn, "first-use verdict not kept in the store: " << put.status().message());
      else if (put->passed != v.passed)  // another Planner's failed verdict came first: it stands
        return FirstUseVerdict{false, true, "verdict kept in the store: " + put->summary};
    }
    return v;
  }

  StatusOr<std::vector<EngineConfig>> heuristic_configs(const Graph& graph) override {
    std::vector<EngineConfig> out;
    if (!pool_) return out;
    KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire());
    LowerTarget target;
    target.handle = h.get();
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(graph, target));
    KILN_ASSIGN_OR_RETURN(std::vector<CandidateInfo> c,
                          lg.list_candidates({HeuristicMode::kA, HeuristicMode::kFallback}));
    for (CandidateInfo& ci : c) out.push_back(std::move(ci.config));
    return out;
  }

  // One execution on zeroed buffers of the plan's own (its kernels load now, not on a caller's first
  // request); the buffers are freed once it has run.
  Status warm_concurrency() override { return pool_->fill(); }

  Status warm_up(const ExecutablePlan& plan) override {
    SynchronizingWork sync;  // allocates and frees device memory: not while another thread captures a graph
    if (sync.refused()) return refused_under_capture("warming up " + plan.identity());
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    std::vector<DeviceBuffer> owned;
    TensorBindings b;
    const Graph& g = plan.graph();
    for (const TensorDesc& d : g.tensors) {
      auto bytes = plan.tensor_bytes(d.name);
      if (!bytes.is_ok()) continue;  // virtual or by value: not bound
      KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(std::max<size_t>(*bytes, 16)));
      KILN_RETURN_IF_ERROR(buf.fill_bytes(0));
      b[d.name] = TensorBinding{buf.data(), *bytes};
      owned.push_back(std::move(buf));
    }
    DeviceBuffer ws;
    if (plan.workspace_bytes() > 0) {
      KILN_ASSIGN_OR_RETURN(ws, DeviceBuffer::allocate(static_cast<size_t>(plan.workspace_bytes())));
    }
    KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
    KILN_RETURN_IF_ERROR(plan.execute(stream.get(), b, plan.workspace_bytes() > 0 ? ws.data() : nullptr));
    // And the copies a padded stopgap makes: the process's first device-to-device copy cost about 1 ms on
    // the H200 (the first padded request of a replay, 2026-12-02), which no request should pay.
    if (!copies_warm_.exchange(true)) {  // once per backend
      KILN_ASSIGN_OR_RETURN(DeviceBuffer copy, DeviceBuffer::allocate(512));
      KILN_RETURN_IF_ERROR(copy.fill_bytes(0, stream.get()));
      KILN_RETURN_IF_ERROR(device_copy()(copy.data(), static_cast<char*>(copy.data()) + 256, 256, stream.get()));
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    return Status::ok();
  }

  // The shape tuned as `kiln tune` would (every candidate checked against a reference made once, the
  // correct ones timed, the winner rule), bounded by `t`; the winner loaded as this Planner's plan and, with
  // t.store, stored through a connection opened for writing on first use.
  StatusOr<std::shared_ptr<const ExecutablePlan>> tune(const Graph& graph, const GraphSignature& sig,
                                                       const PromotionTuning& t, const std::atomic<bool>* cancel,
                                                       std::string* why) override {
    TuneOptions to;  // the bounds were checked by Planner::create
    to.top_k = t.top_k;
    to.budget.exhaustive = t.exhaustive;
    if (!t.exhaustive) to.budget.prior = rank_prior_winners(planner_jobs::tuned_winners(*this, sig), sig.shape_key);
    to.time_budget_s = t.time_budget_s;
    to.build_threads = t.build_threads;
    to.max_workspace_bytes = t.max_workspace_bytes;
    to.gpu_share = t.gpu_share;
    if (t.candidate_budget_ms > 0) to.measure.stopping.time_budget_ms = t.candidate_budget_ms;
    to.seed = t.seed;
    to.cancel = cancel;
    KILN_ASSIGN_OR_RETURN(TuneResult tr, tune_graph(graph, to));
    if (tr.cancelled) {
      *why = "cancelled: the Planner is being destroyed";
      return std::shared_ptr<const ExecutablePlan>();
    }
    if (!tr.winner || tr.winner_plan.empty()) {
      *why = "no correct candidate of " + std::to_string(tr.candidates.size()) +
             (tr.budget_exhausted ? " within the tune's time budget" : "");
      return std::shared_ptr<const ExecutablePlan>();
    }
    StatusOr<LoweredGraph> lg = load(graph, tr.winner_plan);
    if (!lg.is_ok()) {
      *why = "the tuned winner " + tr.winner_config.identity() + " did not load: " + lg.status().message();
      return std::shared_ptr<const ExecutablePlan>();
    }
    if (t.store) {
      Status st = store_tuned(graph, sig, tr);
      if (!st.is_ok()) *why = "tuned " + tr.winner_config.identity() + ", not stored: " + st.message();
    }
    return plan_of(graph, sig, tr.winner_config, std::move(lg).value(), PlanSource::kTuned);
  }

  StatusOr<EnvFingerprint> environment() const override { return env_; }

  Status with_writable_store(const std::function<Status(PlanStore&)>& fn) override {
    if (store_path_.empty()) return failed_precondition("the Planner has no store (PlannerOptions::store_path)");
    if (shared_store_) {  // one writable connection (store_writable): reads and writes take turns on it
      std::lock_guard<std::mutex> lock(store_mu_);
      return fn(*store_);
    }
    std::lock_guard<std::mutex> lock(writer_mu_);
    if (!writer_) {
      KILN_ASSIGN_OR_RETURN(writer_, PlanStore::open(store_path_));
      if (store_) store_->treat_writes_as_own(*writer_);  // its writes are no news to the store's watcher
    }
    return fn(*writer_);
  }

  // Deviceless (PlannerOptions::target): built for the recorded profile. Without a CUDA driver some graphs
  // cannot be compiled at all: a result (kNeedsGpu), not a failure. The toolkit's driver stub does not
  // help: cuDNN then offers the runtime-compiled engines, NVRTC compiles them, and loading the module
  // (cuLibraryLoadData) fails with CUDA_ERROR_STUB_LIBRARY.
  Status compile(const Graph& graph, const GraphSignature& sig, const std::optional<EngineConfig>& pin,
                 CompiledPart* part, PlanRecord* record) override {
    if (!target_) return failed_precondition("compile() needs a deviceless Planner (PlannerOptions::target)");
    LowerTarget target;
    target.profile = &*target_;
    auto lg = LoweredGraph::create(graph, target);
    Status st = lg.status();
    if (st.is_ok())
      st = pin ? lg->build_config(*pin).with_context("the spec's \"pin\" " + pin->identity() + " for graph '" +
                                                     graph.name + "' cannot be built")
               : lg->build_heuristic();
    if (!st.is_ok()) {
      const std::string& msg = st.message();
      const char* gpu_reason = nullptr;
      if (msg.find("RUNTIME_PREREQUISITE_MISSING") != std::string::npos)
        gpu_reason = "the engines cuDNN could build it with are runtime-compiled, and runtime compilation needs the "
                     "CUDA driver (libcuda.so.1), absent here";
      else if (msg.find("driver version is insufficient") != std::string::npos ||
               msg.find("driver is a stub library") != std::string::npos)
        gpu_reason = "cuDNN Frontend queries the CUDA device while building this graph, even for a recorded profile";
      KILN_LOG(kInfo, msg);  // cuDNN's own text, with -v
      if (gpu_reason && !pin) {
        part->outcome = CompileOutcome::kNeedsGpu;
        part->why = gpu_reason;
      } else {
        part->outcome = CompileOutcome::kFailed;
        const std::string words = plan_failure_in_words(st, graph.name).message();
        part->why = words.substr(0, words.find('\n'));
      }
      return Status::ok();
    }
    part->workarounds = lg->workarounds();
    part->config = lg->config();
    KILN_ASSIGN_OR_RETURN(*record, record_from_plan(sig, env_, *lg));
    part->plan_bytes = record->plan_bytes.size();
    part->workspace_bytes = record->workspace_bytes;
    part->outcome = CompileOutcome::kCompiled;
    return Status::ok();
  }

  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature& sig) override {
    std::vector<TunedShape> out;
    if (!store_) return out;
    ListFilter f;
    f.structure_prefix = sig.structure;
    f.tuned_only = true;
    StatusOr<std::vector<PlanSummary>> listed = [&] {
      std::lock_guard<std::mutex> lock(store_mu_);
      return store_->list(f);
    }();
    KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> list, std::move(listed));
    for (const PlanSummary& s : list) {
      const PlanRecord& r = s.record;
      if (r.structure_sig != sig.structure || !check_fingerprint(r.fingerprint, env_, policy_).pass) continue;
      auto shape = parse_shape_key(r.shape_key);
      // A configuration lower cannot build (a cuDNN knob not named kN) is no bucket's to lend; cuBLASLt's and Kiln's
      // own name their knobs (lower checks them against the bucket's shape when it builds one).
      const bool buildable = r.engine_id >= kCublasLtEngineBase ||
                             std::all_of(r.knobs.begin(), r.knobs.end(),
                                         [](const auto& knob) { return knob_type_of(knob.first).is_ok(); });
      if (!shape.is_ok() || !buildable) continue;
      out.push_back(TunedShape{r.shape_key, *shape, EngineConfig{r.engine_id, r.knobs}});
    }
    return out;
  }

  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& graph, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    if (!pool_) return failed_precondition("a deviceless Planner (PlannerOptions::target) does not build plans");
    // cuDNN's build may allocate, load modules and synchronize: not while another thread captures a graph.
    SynchronizingWork sync;
    if (sync.refused()) return refused_under_capture("building a plan for graph '" + graph.name + "'");
    // The Planner's device, as load() and warm_up() set it: cuBLASLt's plans (a pinned blt configuration) take the
    // calling thread's device, not the handle's.
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire());
    LowerTarget target;
    target.handle = h.get();
    // A stopgap: cuDNN's heuristics in dynamic-shape mode, with the structure's kernel cache. (Building the
    // engine an earlier stopgap chose, by configuration, skipped the heuristic query but cost more on the
    // H200: 28 ms against 10 ms per matmul stopgap, docs/h200-results.md.)
    if (source == PlanSource::kDynamic) target.kernel_cache = kernel_cache_for(sig.structure, graph.name);
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, with_plan_words(LoweredGraph::create(graph, target), graph.name));
    if (config) {
      KILN_RETURN_IF_ERROR(plan_failure_in_words(lg.build_config(*config), graph.name));
    } else {
      KILN_RETURN_IF_ERROR(plan_failure_in_words(lg.build_heuristic(), graph.name));
    }
    EngineConfig built = lg.config();
    std::vector<std::string> notes;
    for (const std::string& w : lg.workarounds()) notes.push_back("known cuDNN defect worked around: " + w);
    return plan_of(graph, sig, built, std::move(lg), source, std::move(notes));
  }

 public:
  ~CudnnPlanBackend() override {
    if (primer_.joinable()) primer_.join();
    // A read-only connection closed after the writable one would leave -wal and -shm behind: it goes first.
    if (store_ && store_->read_only()) store_.reset();
    writer_.reset();
    store_.reset();
  }

 private:
  CudnnPlanBackend() = default;
  CheckOptions first_use_check_;  // PlannerOptions::first_use_check
  std::mutex tuned_mu_;
  std::set<std::string> tuned_store_plans_;  // first_use_key of store plans whose record is tuned and Passed
  // Serialized plan bytes loaded with a handle from the pool.
  StatusOr<LoweredGraph> load(const Graph& graph, const std::vector<uint8_t>& bytes) {
    if (!pool_) return failed_precondition("a deviceless Planner (PlannerOptions::target) does not load plans");
    if (runtime_detail::LoadsWarmedByCaller::active() && LoweredGraph::can_skip_frontend_warmup()) {
      // Beside other threads' loads: cuDNN's deserialize of a runtime-compiled norm is 13-23 ms of host work
      // (zlib, bench/results/h100/deserialize-profile); four of a matmul plan's at once took the time of one (e2).
      // Without the Frontend's warmup (a capture, with a cudaMalloc and a cudaFree that could break, or be broken
      // by, another load's device work), since the caller runs the plan before anyone gets it. At most one load
      // fewer than the pool's handles at once, so that a serving call always finds a handle within one load.
      SideBySideSlot slot(this);
      LoadingWork loading;  // cuDNN loads the plan's kernels: not while another thread captures a graph
      if (loading.refused()) return refused_under_capture("loading a stored plan for graph '" + graph.name + "'");
      KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
      KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire());
      return LoweredGraph::deserialize(graph, h.get(), bytes, {}, /*frontend_warmup=*/false);
    }
    SynchronizingWork sync;  // cuDNN loads the plan's kernels: not while another thread captures a graph
    if (sync.refused()) return refused_under_capture("loading a stored plan for graph '" + graph.name + "'");
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    KILN_ASSIGN_OR_RETURN(HandlePool::Lease h, pool_->acquire());
    return LoweredGraph::deserialize(graph, h.get(), bytes);
  }
  // A lowered, built plan as this Planner's plan: run with the pool's handles.
  std::shared_ptr<const ExecutablePlan> plan_of(const Graph& graph, const GraphSignature& sig, EngineConfig config,
                                                LoweredGraph lg, PlanSource source,
                                                std::vector<std::string> notes = {}) {
    const int64_t ws = lg.workspace_size();
    auto plan = std::make_shared<ExecutablePlan>(graph, sig, std::move(config), ws, source,
                                                 std::make_unique<CudnnExecutor>(std::move(lg), pool_));
    plan->set_notes(std::move(notes));
    return plan;
  }
  Status store_tuned(const Graph& graph, const GraphSignature& sig, const TuneResult& tr) {
    KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_tuning(sig, env_, tr));
    // A tune the budget cut short is stored untuned (kiln/runtime/plan_keeping.h tuning_is_complete).
    rec.tuned = tuning_is_complete(tr);
    return with_writable_store([&](PlanStore& store) -> Status {
      KILN_ASSIGN_OR_RETURN(KeptPlan kept, keep_plan(store, graph, rec));
      for (const std::string& w : kept.warnings) KILN_LOG(kWarn, w);
      return Status::ok();
    });
  }

  // The kernel cache of a structure (made on first use; never dropped: one per structure served). With
  // save_kernel_caches, made from the one the store keeps for this structure in this environment where there
  // is one; a kept cache that cuDNN refuses is logged, and a new one is compiled. (Only then: on cuDNN 9.19
  // a kept cache did not shorten a new process's first dynamic build, docs/runtime.md "Kernel caches kept in
  // the store", so a Planner that did not ask does not pay for reading one.)
  std::shared_ptr<DynamicKernelCache> kernel_cache_for(const std::string& structure, const std::string& graph_name) {
    std::lock_guard<std::mutex> lock(caches_mu_);
    std::shared_ptr<DynamicKernelCache>& c = caches_[structure];
    if (c) return c;
    if (store_ && save_kernel_caches_) {
      StatusOr<std::optional<KernelCacheRecord>> kept = [&] {
        std::lock_guard<std::mutex> slock(store_mu_);
        return store_->get_kernel_cache(structure, env_);
      }();
      if (!kept.is_ok()) {
        note_kernel_cache("graph '" + graph_name + "': the kept kernel cache was not read: " + kept.status().message());
      } else if (kept->has_value()) {
        auto loaded = DynamicKernelCache::from_json((*kept)->cache_json);
        if (loaded.is_ok()) {
          c = std::move(loaded).value();
          saved_hash_[structure] = stable_hash128_hex((*kept)->cache_json);
          kernel_caches_loaded_.fetch_add(1, std::memory_order_relaxed);
          return c;
        }
        note_kernel_cache("graph '" + graph_name +
                          "': the kept kernel cache did not load: " + loaded.status().message());
      }
    }
    c = std::make_shared<DynamicKernelCache>();
    return c;
  }

  void note_kernel_cache(const std::string& what) {
    KILN_LOG(kWarn, what);
    std::lock_guard<std::mutex> lock(note_mu_);
    last_kernel_cache_note_ = what;
  }

 public:
  // Keeps the structure's kernel cache in the store when it holds kernels the store does not have yet
  // (PlannerOptions::save_kernel_caches).
  Status save_kernel_cache(const GraphSignature& sig, const std::string& graph_name) override {
    if (!save_kernel_caches_ || store_path_.empty()) return Status::ok();
    std::shared_ptr<DynamicKernelCache> c;
    {
      std::lock_guard<std::mutex> lock(caches_mu_);
      auto it = caches_.find(sig.structure);
      if (it == caches_.end()) return Status::ok();
      c = it->second;
    }
    if (!c->finalized()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(std::string json, c->to_json());
    const std::string hash = stable_hash128_hex(json);
    {
      std::lock_guard<std::mutex> lock(caches_mu_);
      if (saved_hash_[sig.structure] == hash) return Status::ok();  // nothing new since it was loaded or kept
    }
    KernelCacheRecord rec;
    rec.structure_sig = sig.structure;
    rec.fingerprint = env_;
    rec.graph_name = graph_name;
    rec.cache_json = std::move(json);
    Status st = with_writable_store([&](PlanStore& store) { return store.put_kernel_cache(rec).status(); });
    if (!st.is_ok()) {
      note_kernel_cache("graph '" + graph_name + "': the kernel cache was not kept: " + st.message());
      return st;
    }
    kernel_caches_saved_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(caches_mu_);
    saved_hash_[sig.structure] = hash;
    return Status::ok();
  }

  StatusOr<std::vector<StoredPlanKey>> changed_plans() override {
    std::vector<StoredPlanKey> out;
    if (!store_) return out;
    KILN_ASSIGN_OR_RETURN(std::vector<StoredPlanKey> keys, store_->changed_plans());
    const std::string here = fingerprint_key(env_);
    for (StoredPlanKey& k : keys)
      if (k.structure_sig == "*" || k.fingerprint_key == here) out.push_back(std::move(k));
    return out;
  }

  KernelCacheCounts kernel_cache_counts() const override {
    KernelCacheCounts k;
    k.loaded = kernel_caches_loaded_.load(std::memory_order_relaxed);
    k.saved = kernel_caches_saved_.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(note_mu_);
    k.last_note = last_kernel_cache_note_;
    if (store_) {
      const StoreCounters c = store_->counters();
      k.store_mirror_hits = c.mirror_hits;
      k.store_unreachable = c.unreachable_error;
    }
    return k;
  }

 private:
  EnvPolicy policy_;
  EnvFingerprint env_;
  // The device the Planner was made on. A thread of the Planner's own (create()'s loads) has no CUDA context until it
  // binds one, and cuDNN's deserialize calls the driver directly: without a context it fails with CUDA error 201
  // (seen on the H200). load() and warm_up() bind it; cudaSetDevice is a no-op where it is current already.
  int device_ = 0;
  std::mutex caches_mu_;
  std::map<std::string, std::shared_ptr<DynamicKernelCache>> caches_;
  std::map<std::string, std::string> saved_hash_;  // structure -> hash of the cache text the store has
  bool save_kernel_caches_ = false;
  std::atomic<int64_t> kernel_caches_loaded_{0}, kernel_caches_saved_{0};
  mutable std::mutex note_mu_;
  std::string last_kernel_cache_note_;
  std::shared_ptr<HandlePool> pool_;
  // Side-by-side loads in progress (load()): at most max(1, handles - 1) at once.
  std::mutex side_by_side_mu_;
  std::condition_variable side_by_side_cv_;
  int side_by_side_ = 0;
  class SideBySideSlot {
   public:
    explicit SideBySideSlot(CudnnPlanBackend* b) : b_(b) {
      std::unique_lock<std::mutex> lock(b_->side_by_side_mu_);
      const int most = std::max(1, b_->pool_->size() - 1);
      b_->side_by_side_cv_.wait(lock, [&] { return b_->side_by_side_ < most; });
      ++b_->side_by_side_;
    }
    ~SideBySideSlot() {
      {
        std::lock_guard<std::mutex> lock(b_->side_by_side_mu_);
        --b_->side_by_side_;
      }
      b_->side_by_side_cv_.notify_one();
    }
    SideBySideSlot(const SideBySideSlot&) = delete;
    SideBySideSlot& operator=(const SideBySideSlot&) = delete;

   private:
    CudnnPlanBackend* b_;
  };
  std::mutex store_mu_;        // one connection: one call at a time (plans load outside it)
  bool shared_store_ = false;  // store_writable: store_ is writable and with_writable_store uses it
  std::unique_ptr<PlanStore> store_;
  std::string store_path_;
  std::mutex writer_mu_;
  // Opened for writing: at create() with store_writable or a target, else on the first tuned plan stored
  // (PromotionTuning::store).
  std::unique_ptr<PlanStore> writer_;
  std::thread primer_;                   // prime_cudnn(), not waited for by create()
  std::optional<DeviceProfile> target_;  // deviceless: compile() builds for it
  std::atomic<bool> copies_warm_{false};
};

}  // namespace

StatusOr<std::unique_ptr<PlanBackend>> make_cudnn_plan_backend(const PlannerOptions& options) {
  return catch_exceptions("kiln::Planner", [&] { return CudnnPlanBackend::create(options); });
}

}  // namespace kiln
