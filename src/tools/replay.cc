// kiln replay's run (kiln/tools/replay.h): requests spread over threads, phase by phase, each obtained from
// the Planner and executed on buffers the replay owns.
#include "kiln/tools/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "kiln/core/atomic_file.h"
#include "kiln/core/enum_names.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/store/store_path.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Buffers a replay thread owns for one plan: every bound tensor and the workspace, zeroed.
struct PlanBuffers {
  std::vector<DeviceBuffer> owned;
  TensorBindings bindings;
  DeviceBuffer workspace;
};

// Zeroed on `stream` and synchronized: the request's timed execute then waits for none of it.
StatusOr<PlanBuffers> buffers_for(const ExecutablePlan& plan, cudaStream_t stream) {
  PlanBuffers b;
  for (const TensorDesc& d : plan.graph().tensors) {
    auto bytes = plan.tensor_bytes(d.name);
    if (!bytes.is_ok()) continue;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(*bytes));
    KILN_RETURN_IF_ERROR(buf.fill_bytes(0, stream));
    b.bindings[d.name] = TensorBinding{buf.data(), *bytes};
    b.owned.push_back(std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b.workspace,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes(), 16))));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return b;
}

// One thread's share of a phase: requests [next, end), each obtained, then executed and timed.
class PhaseWorker {
 public:
  PhaseWorker(Planner& planner, const std::vector<PreparedGraph>& prepared, const Trace& trace)
      : planner_(planner), prepared_(prepared), trace_(trace) {}

  // Runs requests taken from `next` below `end`; the samples in `out`, the first error returned.
  Status run(std::atomic<size_t>& next, size_t end, std::vector<ReplaySample>* out) {
    KILN_ASSIGN_OR_RETURN(stream_, make_stream());
    KILN_ASSIGN_OR_RETURN(ev0_, make_event());
    KILN_ASSIGN_OR_RETURN(ev1_, make_event());
    for (size_t i = next++; i < end; i = next++) {
      KILN_ASSIGN_OR_RETURN(ReplaySample s, one(i));
      out->push_back(std::move(s));
    }
    return Status::ok();
  }

 private:
  StatusOr<ReplaySample> one(size_t i) {
    const TraceRequest& q = trace_.requests[i];
    const auto t0 = Clock::now();
    KILN_ASSIGN_OR_RETURN(Obtained got, planner_.obtain(prepared_[q.graph], q.shape));
    const auto t1 = Clock::now();
    auto it = mine_.find(got.plan);
    if (it == mine_.end()) {
      KILN_ASSIGN_OR_RETURN(PlanBuffers bufs, buffers_for(*got.plan, stream_.get()));
      it = mine_.emplace(got.plan, std::move(bufs)).first;
    }
    // The buffers of a plan this thread has not run before are not timed: an application owns its
    // buffers, and their cudaMalloc is no part of the Planner's time to first execution.
    const auto t_exec = Clock::now();
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev0_.get(), stream_.get()));
    KILN_RETURN_IF_ERROR(got.plan->execute(stream_.get(), it->second.bindings, it->second.workspace.data()));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev1_.get(), stream_.get()));
    if (cudaStreamSynchronize(stream_.get()) != cudaSuccess)
      return unavailable("replay: the stream failed after executing graph '" + prepared_[q.graph].graph->name + "'");
    const auto t2 = Clock::now();
    float gpu_ms = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&gpu_ms, ev0_.get(), ev1_.get()));
    return ReplaySample{got.source,           got.plan->built_from(), i,
                        ms_between(t0, t1),   ms_between(t_exec, t2), static_cast<double>(gpu_ms),
                        got.plan->identity(), std::move(got.why)};
  }

  Planner& planner_;
  const std::vector<PreparedGraph>& prepared_;
  const Trace& trace_;
  UniqueStream stream_;
  UniqueEvent ev0_, ev1_;
  // Keyed by the plan itself, held: a promoted stopgap freed here could hand its address to the next
  // plan, whose shape these buffers do not fit.
  std::map<std::shared_ptr<const ExecutablePlan>, PlanBuffers> mine_;
};

// The record_shapes destination, refused now rather than after the run: never one of the command's own
// inputs, an existing file only with overwrite, in a folder that exists.
Status check_record_destination(const ReplayJob& job, const Trace& trace) {
  FileWriteOptions fo;
  fo.what = "recorded-shapes file";
  fo.overwrite = job.overwrite;
  fo.protected_paths = trace.specs;
  fo.protected_paths.push_back(job.trace);
  if (!job.store_path.empty()) fo.protected_paths.push_back(job.store_path);
  KILN_RETURN_IF_ERROR(check_parent_folder(job.record_shapes).with_context("--record-shapes"));
  return check_destination(job.record_shapes, fo).with_context("--record-shapes");
}

// A {"wait": "notices"} barrier: until the Planner has acted on that many notices of plans stored elsewhere
// (PlannerStats::store_notices, since it was made), or the barrier's timeout. A timeout is reported, not an
// error: the requests after it run on what the Planner holds.
NoticeWait wait_for_notices(const Planner& planner, const Trace& trace, size_t index) {
  const TraceRequest& b = trace.requests[index];
  NoticeWait w;
  w.request = index;
  w.wanted = b.notices;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(b.timeout_s);
  while ((w.seen = planner.stats().store_notices) < w.wanted) {
    if (Clock::now() >= deadline) {
      w.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  w.waited_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return w;
}

}  // namespace

const char* new_shapes_name(NewShapes n) { return enum_name(kNewShapesNames, n); }
StatusOr<NewShapes> parse_new_shapes(const std::string& name) {
  auto n = parse_enum(kNewShapesNames, name, "--new-shapes");
  if (!n.is_ok()) return invalid_argument("--new-shapes must be 'stopgap' or 'build-now', got '" + name + "'");
  return n;
}
const char* promote_by_name(PromoteBy p) { return enum_name(kPromoteByNames, p); }
StatusOr<PromoteBy> parse_promote_by(const std::string& name) {
  auto p = parse_enum(kPromoteByNames, name, "--promote-by");
  if (!p.is_ok()) return invalid_argument("--promote-by must be 'build' or 'tune', got '" + name + "'");
  return p;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

Status check_replay_job(const ReplayJob& job) {
  if (job.threads < 1 || job.threads > 256)
    return invalid_argument("--threads must be 1..256, got " + std::to_string(job.threads));
  if (job.split_max_parts < 2 || job.split_max_parts > 64)
    return invalid_argument("--split-max-parts must be 2..64 (one part is the shape itself), got " +
                            std::to_string(job.split_max_parts));
  if (job.handles < 1 || job.handles > 64)
    return invalid_argument("--handles must be 1..64, got " + std::to_string(job.handles));
  if (job.warm && !job.preload) return invalid_argument("--warm warms what --preload loads: give --preload too");
  if (job.save_kernel_caches && job.store_path.empty())
    return invalid_argument("--save-kernel-caches keeps kernel caches in the plan store: give --store too");
  if (job.promote_by == PromoteBy::kTune && (!job.promote || job.new_shapes != NewShapes::kStopgap))
    return invalid_argument("--promote-by tune tunes what replaces a stopgap: it needs --new-shapes stopgap and "
                            "no --no-promote");
  if (!job.split_overlap && (!job.split || job.new_shapes != NewShapes::kStopgap))
    return invalid_argument(
        "--no-split-overlap changes split stopgaps: it needs --new-shapes stopgap and no --no-split");
  if (job.split_max_parts_given && (!job.split || job.new_shapes != NewShapes::kStopgap))
    return invalid_argument("--split-max-parts bounds split stopgaps: it needs --new-shapes stopgap and no --no-split");
  if (job.tune_bounds_given && job.promote_by != PromoteBy::kTune)
    return invalid_argument(
        "--tune-top-k, --tune-budget and --tune-gpu-share bound the tunes of --promote-by tune: give it too");
  if (job.tuning.top_k < 0 || job.tuning.top_k > 10000)
    return invalid_argument("--tune-top-k must be 0..10000 (0: every candidate), got " +
                            std::to_string(job.tuning.top_k));
  if (!(job.tuning.gpu_share > 0 && job.tuning.gpu_share <= 1))
    return invalid_argument("--tune-gpu-share must be in (0, 1], got " + std::to_string(job.tuning.gpu_share));
  if (!(job.tuning.time_budget_s >= 0 && job.tuning.time_budget_s <= 3600))
    return invalid_argument("--tune-budget must be 0..3600 seconds (0: none), got " +
                            std::to_string(job.tuning.time_budget_s));
  return Status::ok();
}

StatusOr<PlannerOptions> planner_options(const ReplayJob& job) {
  auto b = BucketPolicy::parse(job.buckets);
  if (!b.is_ok()) return b.status().with_context("--buckets");
  // A service's Planner, as the job configures it. Keeping kernel caches writes to the store: one writable
  // connection (created when absent).
  PlannerOptions o = PlannerOptions::serving(job.store_path)
                         .with_new_shapes(job.new_shapes)
                         .with_promotion(job.promote, job.promote_by)
                         .with_tuning(job.tuning)
                         .with_stopgaps(job.split, job.padded, job.split_overlap, job.split_max_parts)
                         .with_handles(job.handles)
                         .with_buckets(*b)
                         .with_kernel_caches(job.save_kernel_caches);
  if (job.shadow_every >= 0) o.shadow.sample_every = job.shadow_every;  // docs/rollout.md "Shadow sampling"
  return o;
}

StatusOr<ReplayReport> replay_on(Planner& planner, Trace trace, int threads, bool preload, bool warm) {
  ReplayReport rep;
  rep.threads = threads;
  rep.preloaded = preload;
  std::vector<PreparedGraph> prepared;
  for (const Graph& g : trace.graphs) {
    KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner.prepare(g));
    prepared.push_back(std::move(pg));
  }
  // preload: what a service does at start, timed apart from the requests.
  for (size_t i = 0; preload && i < prepared.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(PreloadReport r, planner.preload(prepared[i], warm));
    rep.preload.loaded += r.loaded;
    rep.preload.warmed += r.warmed;
    rep.preload.padded_warmed = rep.preload.padded_warmed || r.padded_warmed;
    rep.preload.failed += r.failed;
    rep.preload.ms += r.ms;
    if (!r.last_failure.empty()) rep.preload.last_failure = r.last_failure;
  }
  std::mutex mu;
  Status first_error;
  const auto t_run = Clock::now();
  for (size_t begin = 0; begin < trace.requests.size() && first_error.is_ok();) {
    if (trace.requests[begin].barrier) {
      if (trace.requests[begin].notices > 0) rep.notice_waits.push_back(wait_for_notices(planner, trace, begin));
      else planner.wait_for_promotions();
      ++begin;
      continue;
    }
    size_t end = begin;
    while (end < trace.requests.size() && !trace.requests[end].barrier) ++end;
    std::atomic<size_t> next{begin};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        PhaseWorker w(planner, prepared, trace);
        std::vector<ReplaySample> local;
        Status st = w.run(next, end, &local);
        std::lock_guard<std::mutex> lock(mu);
        if (!st.is_ok() && first_error.is_ok()) first_error = st;
        rep.samples.insert(rep.samples.end(), local.begin(), local.end());
      });
    for (auto& t : pool) t.join();
    begin = end;
  }
  rep.wall_s = std::chrono::duration<double>(Clock::now() - t_run).count();
  KILN_RETURN_IF_ERROR(first_error);
  std::sort(rep.samples.begin(), rep.samples.end(),
            [](const ReplaySample& a, const ReplaySample& b) { return a.request < b.request; });
  rep.stats = planner.stats();
  rep.trace = std::move(trace);
  return rep;
}

StatusOr<ReplayReport> run_replay(const ReplayJob& job) {
  KILN_RETURN_IF_ERROR(check_replay_job(job));
  KILN_ASSIGN_OR_RETURN(Trace trace, read_trace(job.trace));
  // Notices come only from a server store (PostgreSQL NOTIFY): elsewhere such a barrier could only time out.
  for (size_t i = 0; i < trace.requests.size(); ++i)
    if (trace.requests[i].notices > 0 && !is_server_location(job.store_path))
      return invalid_argument("trace '" + job.trace +
                              "': a {\"wait\": \"notices\"} barrier needs a PostgreSQL --store (only a server store "
                              "sends notices of plans stored elsewhere)");
  if (!job.record_shapes.empty()) KILN_RETURN_IF_ERROR(check_record_destination(job, trace));
  KILN_ASSIGN_OR_RETURN(PlannerOptions po, planner_options(job));
  for (const std::string& sym : po.buckets.symbols()) {  // a misspelt dim would silently bucket nothing
    bool used = false;
    for (const Graph& g : trace.graphs) used = used || g.dynamic_dims.count(sym) > 0;
    if (!used) return invalid_argument("--buckets: no graph of the trace has a dynamic dim '" + sym + "'");
  }
  // The store may be created: its folder must exist (said before the GPU).
  if (job.save_kernel_caches && !is_server_location(job.store_path))
    KILN_RETURN_IF_ERROR(check_parent_folder(job.store_path).with_context("--store"));
  const auto t_create = Clock::now();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(po));
  const double create_ms = ms_between(t_create, Clock::now());
  KILN_ASSIGN_OR_RETURN(ReplayReport rep, replay_on(*planner, std::move(trace), job.threads, job.preload, job.warm));
  rep.planner_create_ms = create_ms;
  if (job.save_kernel_caches) {
    planner->wait_for_promotions();
    KILN_RETURN_IF_ERROR(planner->save_kernel_caches().with_context("--save-kernel-caches"));
    rep.stats = planner->stats();
  }
  if (!job.record_shapes.empty())
    KILN_RETURN_IF_ERROR(planner->recorder().write_file(job.record_shapes, job.overwrite));
  return rep;
}

}  // namespace kiln
