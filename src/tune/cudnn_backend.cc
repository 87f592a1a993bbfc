// The cuDNN backend of the tuner (kiln/tune/tune_backend.h): candidates from cuDNN's heuristics, plans built
// on worker threads (each with its own handle; runtime-compiled ones in build helper processes when the
// options name them, kiln/tune/build_helpers.h), inputs and reference made once on the device, each
// candidate run on poisoned outputs and compared on the device, then timed by the shared timer.
#include <cudnn.h>

#include <chrono>
#include <mutex>
#include <set>

#include "kiln/core/log.h"
#include "kiln/cuda/capture_gate.h"
#include "kiln/cuda/cuda_graph.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/op_cost.h"
#include "kiln/validate/device_io.h"
#include "kiln/lower/plan_words.h"
#include "kiln/tune/build_helpers.h"
#include "kiln/tune/tune_backend.h"
#include "kiln/tune/tuner.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/dropout_probe.h"
#include "tune/evaluation.h"

namespace kiln {
namespace {

class CudnnTuneBackend : public TuneBackend {
 public:
  static StatusOr<std::unique_ptr<TuneBackend>> create(const Graph& graph, const TuneOptions& options) {
    std::unique_ptr<CudnnTuneBackend> b(new CudnnTuneBackend(graph, options));
    KILN_ASSIGN_OR_RETURN(b->stream_, make_stream());
    KILN_ASSIGN_OR_RETURN(b->handle_, make_cudnn_handle(b->stream_.get()));
    return std::unique_ptr<TuneBackend>(std::move(b));
  }

  ~CudnnTuneBackend() override { end_builds(); }

  StatusOr<std::vector<CandidateInfo>> candidates(const std::vector<HeuristicMode>& modes) override {
    LowerTarget target;
    target.handle = handle_.get();
    // cuDNN's own failure text ("No valid engine configs for ___") is said in Kiln's words (kiln/lower/plan_words.h).
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, with_plan_words(LoweredGraph::create(graph_, target), graph_.name));
    return with_plan_words(lg.list_candidates(modes), graph_.name);
  }

  // Starts the build helpers once the candidates to build are known, when the options name them and two or more
  // compile at run time (a lone one gains nothing from a helper's start).
  void will_build(const std::vector<EngineConfig>& runtime_compiled) override {
    const BuildHelperOptions& o = options_.build_helpers;
    if (helpers_ || o.processes <= 0 || o.executable.empty() || !o.write_spec || runtime_compiled.size() < 2) return;
    for (const EngineConfig& c : runtime_compiled) runtime_compiled_.insert(c.identity());
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return;
    StatusOr<GraphSignature> sig = compute_signature(graph_);
    StatusOr<std::string> spec = o.write_spec(graph_);
    if (!sig.is_ok() || !spec.is_ok()) return;
    const int n = std::min<int>(o.processes, static_cast<int>(runtime_compiled_.size()));
    auto pool =
        std::make_shared<BuildHelperPool>(std::move(spec).value(), sig->structure, device,
                                          static_cast<int64_t>(cudnnGetVersion()), n, process_build_helper_launcher(o));
    std::lock_guard<std::mutex> lock(mu_);
    helpers_ = std::move(pool);
  }

  StatusOr<int64_t> build(size_t worker, size_t index, const EngineConfig& config) override {
    cudnnHandle_t h = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (worker_handles_.size() <= worker) worker_handles_.resize(worker + 1);
      if (!worker_handles_[worker]) {
        KILN_ASSIGN_OR_RETURN(worker_handles_[worker], make_cudnn_handle());
      }
      h = worker_handles_[worker].get();
    }
    std::optional<std::vector<uint8_t>> bytes;                      // the plan as a build helper made it
    std::unique_lock<std::mutex> lane(own_lane_, std::defer_lock);  // held across an in-process build chosen below
    StatusOr<LoweredGraph> lg = built_by_helper(worker, config, h, &bytes, &lane);
    if (!lg.is_ok() && lg.status().code() == StatusCode::kUnavailable && !bytes) {  // no helper: build here
      LowerTarget target;
      target.handle = h;
      if (config.engine_id >= kCublasLtEngineBase) {  // cuBLASLt's or Kiln's own: no cuDNN operation graph
        lg = LoweredGraph::create_alt(graph_, target, config);
      } else {
        lg = LoweredGraph::create(graph_, target);
        if (lg.is_ok()) KILN_RETURN_IF_ERROR(lg->build_config(config));
      }
    }
    KILN_RETURN_IF_ERROR(lg.status());
    const int64_t ws = lg->workspace_size();
    std::lock_guard<std::mutex> lock(mu_);
    plans_.insert_or_assign(index, std::move(lg).value());
    configs_.insert_or_assign(index, config);
    if (bytes) helper_plans_.insert_or_assign(index, std::move(*bytes));
    return ws;
  }

  StatusOr<ReferenceKind> prepare(bool verify) override {
    KILN_ASSIGN_OR_RETURN(
        eval_, prepare_evaluation(graph_, options_.seed, verify, options_.host_reference, options_.inputs_dir));
    if (eval_->reference || eval_->per_plan_reference) {
      KILN_ASSIGN_OR_RETURN(DeviceChecker c, DeviceChecker::create(graph_, options_.check));
      checker_.emplace(std::move(c));
    }
    KILN_ASSIGN_OR_RETURN(Timer t, Timer::create());
    timer_.emplace(std::move(t));
    return eval_->reference_kind;
  }

  StatusOr<CheckReport> run_and_check(size_t index) override {
    if (eval_->per_plan_reference) return run_and_check_dropout(index);
    KILN_RETURN_IF_ERROR(run_once(index));
    if (!checker_ || !eval_->reference) return failed_precondition("no reference to check against");
    const std::map<int, void*> outs = output_pointers(graph_, eval_->buffers);
    if (options_.output_hook) {
      KILN_RETURN_IF_ERROR(options_.output_hook(config(index), outs, stream_.get()));
      KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    }
    return checker_->check(outs, *eval_->reference, stream_.get());
  }

  // A dropout graph (kiln/validate/dropout_probe.h): the mask this plan draws is probed, then the plan runs on the
  // evaluation's inputs and is checked against the reference made with that mask, and the share it dropped.
  StatusOr<CheckReport> run_and_check_dropout(size_t index) {
    if (!checker_) return failed_precondition("no checker for the dropout graph");
    const auto hook = [&]() -> Status {
      if (!options_.output_hook) return Status::ok();
      KILN_RETURN_IF_ERROR(options_.output_hook(config(index), output_pointers(graph_, eval_->buffers), stream_.get()));
      return cuda_status(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
    };
    return check_dropout_plan(
        graph_, eval_->buffers.pointers(), [&] { return run_once(index); }, *checker_, stream_.get(), hook);
  }

  Status run_once(size_t index) override {
    KILN_ASSIGN_OR_RETURN(const LoweredGraph* lg, plan(index));
    KILN_RETURN_IF_ERROR(ensure_workspace(lg->workspace_size()));
    KILN_RETURN_IF_ERROR(poison_outputs(graph_, eval_->buffers, stream_.get()));
    Status st = lg->execute(handle_.get(), eval_->buffers.pointers(), workspace_.data());
    if (st.is_ok()) st = cuda_status(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
    if (!st.is_ok()) cudaGetLastError();  // clear a launch error so that the next candidate starts clean
    return st;
  }

  StatusOr<Measurement> time(size_t index, const MeasureOptions& options) override {
    std::lock_guard<std::mutex> timing(timing_mu_);  // no helper plan loads meanwhile (built_by_helper)
    KILN_ASSIGN_OR_RETURN(const LoweredGraph* lg, plan(index));
    KILN_RETURN_IF_ERROR(ensure_workspace(lg->workspace_size()));
    MeasureOptions mo = options;
    mo.stream = stream_.get();
    const std::map<int, void*> ptrs = eval_->buffers.pointers();
    void* ws = workspace_.data();
    if (options_.graph_replay) {
      // One execution recorded on the backend's stream (the handle is bound to it), then launched per sample.
      StatusOr<UniqueGraph> g =
          capture_graph(stream_.get(), /*relaxed=*/false, [&] { return lg->execute(handle_.get(), ptrs, ws); });
      if (!g.is_ok()) return g.status().with_context("capturing the candidate for --graph-replay");
      KILN_ASSIGN_OR_RETURN(UniqueGraphExec exec, instantiate_graph(g->get()));
      return timer_->measure(
          [&](cudaStream_t s) { return cuda_status(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch"); }, mo);
    }
    return timer_->measure([&](cudaStream_t) { return lg->execute(handle_.get(), ptrs, ws); }, mo);
  }

  StatusOr<std::vector<uint8_t>> serialize(size_t index) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = helper_plans_.find(index);
      if (it != helper_plans_.end()) return it->second;  // exactly the bytes that were deserialized and timed
    }
    KILN_ASSIGN_OR_RETURN(const LoweredGraph* lg, plan(index));
    return lg->serialize();
  }

  int build_lanes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    // Each helper, and this process (while they start, or are busy); 1 once the pool is off.
    return helpers_ && helpers_->off_reason().empty() ? helpers_->processes() + 1 : 1;
  }

  void end_builds() override {
    std::shared_ptr<BuildHelperPool> pool;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool = std::move(helpers_);
    }
    if (!pool) return;
    const std::string off = pool->off_reason();
    KILN_LOG(kInfo, "graph '" << graph_.name << "': " << pool->builds_done() << " of " << runtime_compiled_.size()
                              << " runtime-compiled candidates built by " << pool->processes()
                              << " build helper processes" << (off.empty() ? "" : " (then off: " + off + ")"));
  }  // the pool ends here: its helpers end while the tune times its last candidates

  void release(size_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    plans_.erase(index);
    helper_plans_.erase(index);
  }

  std::shared_ptr<const GraphEvaluation> evaluation() const override { return eval_; }
  std::string inputs_description() const override { return eval_ ? eval_->inputs : ""; }
  double work_flops() const override { return graph_cost(graph_).flops; }
  double work_bytes() const override { return graph_cost(graph_).bytes; }

 private:
  CudnnTuneBackend(const Graph& graph, const TuneOptions& options) : graph_(graph), options_(options) {}

  // A runtime-compiled candidate's plan from a build helper, deserialized on `h` (`*bytes`: what the helper
  // sent). Unavailable with no bytes: the caller builds it (not runtime-compiled, the pool is off, or `*lane`
  // taken while this worker's helper still starts).
  StatusOr<LoweredGraph> built_by_helper(size_t worker, const EngineConfig& config, cudnnHandle_t h,
                                         std::optional<std::vector<uint8_t>>* bytes,
                                         std::unique_lock<std::mutex>* lane) {
    std::shared_ptr<BuildHelperPool> pool;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool = helpers_;
    }
    if (!pool || !runtime_compiled_.count(config.identity())) return unavailable("not a helper's build");
    // While this worker's helper starts (or builds for another thread), the tuner's own process builds, one at a
    // time (cuDNN would queue more).
    if (!pool->ready(worker) && lane->try_lock()) return unavailable("built in the tuner's process");
    HelperBuild b = pool->build(worker, config);
    if (b.kind == HelperBuild::Kind::kNoHelpers) return unavailable(b.status.message());
    if (b.kind == HelperBuild::Kind::kFailed) {
      *bytes = std::vector<uint8_t>();  // settled by the helper: not built again here
      return b.status;
    }
    const auto td = std::chrono::steady_clock::now();
    StatusOr<LoweredGraph> lg = internal_error("not loaded");
    {
      // Loading the plan's kernels may synchronize the device: not inside a timing window (whose blocking
      // kernel would wait out its 1 s timeout behind it) nor during a --graph-replay capture.
      std::lock_guard<std::mutex> timing(timing_mu_);
      SynchronizingWork work;
      lg = LoweredGraph::deserialize(graph_, h, b.plan, config);
    }
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - td).count();
    const size_t slot = worker % static_cast<size_t>(pool->processes());
    KILN_LOG(kInfo, "graph '" << graph_.name << "': " << config.identity() << " from build helper " << slot
                              << ", deserialized in " << load_ms << " ms");
    *bytes = std::move(b.plan);
    if (!lg.is_ok()) return lg.status().with_context("loading the plan build helper made for " + config.identity());
    return lg;
  }

  StatusOr<const LoweredGraph*> plan(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(index);
    if (it == plans_.end()) return internal_error("candidate " + std::to_string(index) + " has no built plan");
    return &it->second;  // map nodes do not move
  }

  EngineConfig config(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = configs_.find(index);
    return it == configs_.end() ? EngineConfig{} : it->second;
  }

  // The workspace grows to the largest plan run so far (plans arrive one at a time from the pipeline).
  Status ensure_workspace(int64_t bytes) {
    if (!eval_) return failed_precondition("prepare() has not run");
    if (static_cast<int64_t>(workspace_.size()) >= bytes && workspace_.data()) return Status::ok();
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    workspace_ = DeviceBuffer();
    KILN_ASSIGN_OR_RETURN(workspace_, DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(bytes, 1))));
    return Status::ok();
  }

  Graph graph_;
  TuneOptions options_;
  UniqueStream stream_;
  UniqueCudnnHandle handle_;
  mutable std::mutex mu_;
  std::mutex timing_mu_;  // a timing window, or a helper's plan being loaded (taken before the capture gate)
  std::mutex own_lane_;   // one in-process build of a runtime-compiled candidate while a helper starts or is busy
  std::vector<UniqueCudnnHandle> worker_handles_;
  std::map<size_t, LoweredGraph> plans_;
  std::map<size_t, EngineConfig> configs_;
  std::map<size_t, std::vector<uint8_t>> helper_plans_;  // candidates a build helper made: its bytes
  std::set<std::string> runtime_compiled_;               // identities helpers build (set once, by will_build())
  std::shared_ptr<BuildHelperPool> helpers_;             // until end_builds(); a build in flight holds a copy
  std::shared_ptr<GraphEvaluation> eval_;
  std::optional<DeviceChecker> checker_;
  std::optional<Timer> timer_;
  DeviceBuffer workspace_;
};

}  // namespace

StatusOr<std::unique_ptr<TuneBackend>> make_cudnn_backend(const Graph& graph, const TuneOptions& options) {
  return CudnnTuneBackend::create(graph, options);
}

}  // namespace kiln
