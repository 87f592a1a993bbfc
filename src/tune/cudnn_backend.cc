// The cuDNN backend of the tuner (kiln/tune/tune_backend.h): candidates from cuDNN's heuristics, plans built
// on worker threads (each with its own handle), inputs and reference made once on the device, each
// candidate run on poisoned outputs and compared on the device, then timed by the shared timer.
#include <mutex>

#include "kiln/cuda/cuda_graph.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/op_cost.h"
#include "kiln/validate/device_io.h"
#include "kiln/lower/plan_words.h"
#include "kiln/tune/tune_backend.h"
#include "kiln/tune/tuner.h"
#include "kiln/validate/device_check.h"
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

  StatusOr<std::vector<CandidateInfo>> candidates(const std::vector<HeuristicMode>& modes) override {
    LowerTarget target;
    target.handle = handle_.get();
    // cuDNN's own failure text ("No valid engine configs for ___") is said in Kiln's words (kiln/lower/plan_words.h).
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, with_plan_words(LoweredGraph::create(graph_, target), graph_.name));
    return with_plan_words(lg.list_candidates(modes), graph_.name);
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
    LowerTarget target;
    target.handle = h;
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(graph_, target));
    KILN_RETURN_IF_ERROR(lg.build_config(config));
    const int64_t ws = lg.workspace_size();
    std::lock_guard<std::mutex> lock(mu_);
    plans_.insert_or_assign(index, std::move(lg));
    configs_.insert_or_assign(index, config);
    return ws;
  }

  StatusOr<ReferenceKind> prepare(bool verify) override {
    KILN_ASSIGN_OR_RETURN(
        eval_, prepare_evaluation(graph_, options_.seed, verify, options_.host_reference, options_.inputs_dir));
    if (eval_->reference) {
      KILN_ASSIGN_OR_RETURN(DeviceChecker c, DeviceChecker::create(graph_, options_.check));
      checker_.emplace(std::move(c));
    }
    KILN_ASSIGN_OR_RETURN(Timer t, Timer::create());
    timer_.emplace(std::move(t));
    return eval_->reference_kind;
  }

  StatusOr<CheckReport> run_and_check(size_t index) override {
    KILN_RETURN_IF_ERROR(run_once(index));
    if (!checker_ || !eval_->reference) return failed_precondition("no reference to check against");
    const std::map<int, void*> outs = output_pointers(graph_, eval_->buffers);
    if (options_.output_hook) {
      KILN_RETURN_IF_ERROR(options_.output_hook(config(index), outs, stream_.get()));
      KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    }
    return checker_->check(outs, *eval_->reference, stream_.get());
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
    KILN_ASSIGN_OR_RETURN(const LoweredGraph* lg, plan(index));
    return lg->serialize();
  }

  void release(size_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    plans_.erase(index);
  }

  std::shared_ptr<const GraphEvaluation> evaluation() const override { return eval_; }
  std::string inputs_description() const override { return eval_ ? eval_->inputs : ""; }
  double work_flops() const override { return graph_cost(graph_).flops; }
  double work_bytes() const override { return graph_cost(graph_).bytes; }

 private:
  CudnnTuneBackend(const Graph& graph, const TuneOptions& options) : graph_(graph), options_(options) {}

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
  std::mutex mu_;
  std::vector<UniqueCudnnHandle> worker_handles_;
  std::map<size_t, LoweredGraph> plans_;
  std::map<size_t, EngineConfig> configs_;
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
