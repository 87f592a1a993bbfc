// kiln replay TRACE: runs a trace of requests (graph, shape) through kiln::Planner with N threads, each
// request obtained and executed on buffers the replay owns, and reports per source the calls served, the
// time to first execution (obtain + execute + sync) and the execution time, with latency percentiles
// (docs/runtime.md "Replaying a trace"). The trace is checked whole before the GPU is touched.
//
// Trace (JSON): {"format": "kiln-trace", "version": 1,
//                "requests": [{"spec": "mlp.json", "shape": {"tokens": 100}, "count": 20}, ...]}
// spec paths are relative to the trace's folder; "shape" may be left out (the spec's own); "count" is 1
// by default. Requests run in order, spread over the threads. An entry {"wait": "promotions"} is a barrier:
// every request before it finishes and the Planner's background promotions are done before the next runs.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/read_file.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/limits.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"

namespace kiln::cli {
namespace {

struct ReplayCmdOptions {
  std::string trace, store_path, buckets, record_shapes, new_shapes = "stopgap", promote_by = "build";
  int threads = 1, handles = 4, tune_top_k = PromotionTuning{}.top_k;
  double tune_budget_s = PromotionTuning{}.time_budget_s;
  bool tune_bounds_given = false;  // --tune-top-k or --tune-budget
  bool json = false, force = false, no_promote = false, no_padded = false, preload = false, warm = false;
};

struct Request {
  size_t graph = 0;  // index into the prepared graphs
  std::map<std::string, int64_t> shape;
  bool barrier = false;  // {"wait": "promotions"}
};

struct TraceGraphs {
  std::vector<std::string> specs;
  std::vector<Graph> graphs;
};

StatusOr<std::vector<Request>> read_trace(const std::string& path, TraceGraphs* tg) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, {"trace", kMaxShapesFileBytes}));
  const std::string where = "trace '" + path + "'";
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(where + ": not JSON");
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "kiln-trace")
    return invalid_argument(where + ": not a trace (\"format\" is not \"kiln-trace\")");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    return invalid_argument(where + ": \"version\" must be 1");
  if (!j.contains("requests") || !j["requests"].is_array() || j["requests"].empty())
    return invalid_argument(where + ": \"requests\" is missing, not a list, or empty");
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  std::map<std::string, size_t> index;
  std::vector<Request> out;
  constexpr int64_t kMaxRequests = 10'000'000;
  for (size_t i = 0; i < j["requests"].size(); ++i) {
    const auto& r = j["requests"][i];
    const std::string at = where + ": requests[" + std::to_string(i) + "]";
    if (r.is_object() && r.contains("wait")) {
      if (!r["wait"].is_string() || r["wait"].get<std::string>() != "promotions" || r.size() != 1)
        return invalid_argument(at + ": a barrier is exactly {\"wait\": \"promotions\"}");
      Request b;
      b.barrier = true;
      out.push_back(b);
      continue;
    }
    if (!r.is_object() || !r.contains("spec") || !r["spec"].is_string())
      return invalid_argument(at + ": \"spec\" is missing or not a string");
    for (const auto& [field, v] : r.items())  // a typo ("shapes") must not run the spec's own shape
      if (field != "spec" && field != "shape" && field != "count")
        return invalid_argument(at + ": unknown field \"" + field +
                                "\" (a request has \"spec\", \"shape\" and \"count\")");
    std::string spec = r["spec"].get<std::string>();
    if (spec.empty()) return invalid_argument(at + ": \"spec\" is empty");
    if (spec[0] != '/') spec = dir + "/" + spec;
    auto it = index.find(spec);
    if (it == index.end()) {
      auto g = parse_spec_file(spec);
      if (!g.is_ok()) return g.status().with_context(at);
      it = index.emplace(spec, tg->graphs.size()).first;
      tg->specs.push_back(spec);
      tg->graphs.push_back(std::move(g).value());
    }
    Request q;
    q.graph = it->second;
    if (r.contains("shape")) {
      if (!r["shape"].is_object()) return invalid_argument(at + ": \"shape\" is not an object");
      for (const auto& [sym, v] : r["shape"].items()) {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > limits::kMaxExtent)
          return invalid_argument(at + ": shape \"" + sym + "\" is not an integer from 1 to " +
                                  std::to_string(limits::kMaxExtent));
        if (!tg->graphs[q.graph].dynamic_dims.count(sym))
          return invalid_argument(at + ": graph '" + tg->graphs[q.graph].name + "' has no dynamic dim '" + sym + "'");
        q.shape[sym] = v.get<int64_t>();
      }
      if (!q.shape.empty() && q.shape.size() != tg->graphs[q.graph].dynamic_dims.size())
        return invalid_argument(at + ": shape must name every dynamic dim of graph '" + tg->graphs[q.graph].name + "'");
    }
    int64_t count = 1;
    if (r.contains("count")) {
      if (!r["count"].is_number_integer() || r["count"].get<int64_t>() < 1)
        return invalid_argument(at + ": \"count\" is not an integer >= 1");
      count = r["count"].get<int64_t>();
    }
    if (count > kMaxRequests - static_cast<int64_t>(out.size()))
      return invalid_argument(where + ": more than " + std::to_string(kMaxRequests) + " requests");
    for (int64_t k = 0; k < count; ++k) out.push_back(q);
  }
  if (tg->graphs.empty()) return invalid_argument(where + ": no request names a spec (only barriers)");
  return out;
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

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

Status run_replay(const ReplayCmdOptions& o) {
  if (o.threads < 1 || o.threads > 256)
    return invalid_argument("--threads must be 1..256, got " + std::to_string(o.threads));
  if (o.handles < 1 || o.handles > 64)
    return invalid_argument("--handles must be 1..64, got " + std::to_string(o.handles));
  if (o.warm && !o.preload) return invalid_argument("--warm warms what --preload loads: give --preload too");
  if (o.promote_by != "build" && o.promote_by != "tune")
    return invalid_argument("--promote-by must be 'build' or 'tune', got '" + o.promote_by + "'");
  if (o.promote_by == "tune" && (o.no_promote || o.new_shapes != "stopgap"))
    return invalid_argument("--promote-by tune tunes what replaces a stopgap: it needs --new-shapes stopgap and "
                            "no --no-promote");
  if (o.tune_bounds_given && o.promote_by != "tune")
    return invalid_argument("--tune-top-k and --tune-budget bound the tunes of --promote-by tune: give it too");
  if ((o.tune_top_k < 0 || o.tune_top_k > 10000))
    return invalid_argument("--tune-top-k must be 0..10000 (0: every candidate), got " + std::to_string(o.tune_top_k));
  if (!(o.tune_budget_s >= 0 && o.tune_budget_s <= 3600))
    return invalid_argument("--tune-budget must be 0..3600 seconds (0: none), got " + std::to_string(o.tune_budget_s));
  TraceGraphs tg;
  KILN_ASSIGN_OR_RETURN(std::vector<Request> requests, read_trace(o.trace, &tg));
  if (!o.record_shapes.empty()) {  // refused now, not after the run
    FileWriteOptions fo;
    fo.what = "recorded-shapes file";
    fo.overwrite = o.force;
    // Never the command's own inputs, --force or not.
    fo.protected_paths = tg.specs;
    fo.protected_paths.push_back(o.trace);
    if (!o.store_path.empty()) fo.protected_paths.push_back(o.store_path);
    KILN_RETURN_IF_ERROR(check_destination(o.record_shapes, fo).with_context("--record-shapes"));
    const size_t slash = o.record_shapes.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : o.record_shapes.substr(0, slash);
    struct stat st {};
    if (::stat(parent.c_str(), &st) != 0)
      return invalid_argument("--record-shapes: folder '" + parent + "' does not exist");
    if (!S_ISDIR(st.st_mode)) return invalid_argument("--record-shapes: '" + parent + "' is not a folder");
  }
  PlannerOptions po;
  if (o.new_shapes == "stopgap") po.new_shapes = NewShapes::kStopgap;
  else if (o.new_shapes == "build-now") po.new_shapes = NewShapes::kBuildNow;
  else return invalid_argument("--new-shapes must be 'stopgap' or 'build-now', got '" + o.new_shapes + "'");
  po.promote = !o.no_promote;
  po.padded = !o.no_padded;
  po.promote_by = o.promote_by == "tune" ? PromoteBy::kTune : PromoteBy::kBuild;
  po.tuning.top_k = o.tune_top_k;
  po.tuning.time_budget_s = o.tune_budget_s;
  po.store_path = o.store_path;
  po.handles = o.handles;
  auto b = BucketPolicy::parse(o.buckets);
  if (!b.is_ok()) return b.status().with_context("--buckets");
  po.buckets = *b;
  const auto t_create = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(po));
  const double create_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_create).count();
  std::vector<PreparedGraph> prepared;
  for (const Graph& g : tg.graphs) {
    KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner->prepare(g));
    prepared.push_back(std::move(pg));
  }
  // --preload: what a service does at start, timed apart from the requests.
  PreloadReport pre;
  for (size_t i = 0; o.preload && i < prepared.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(PreloadReport r, planner->preload(prepared[i], o.warm));
    pre.loaded += r.loaded;
    pre.warmed += r.warmed;
    pre.failed += r.failed;
    pre.ms += r.ms;
    if (!r.last_failure.empty()) pre.last_failure = r.last_failure;
  }
  struct Sample {
    PlanSource source;
    PlanSource built_from;  // of the plan executed (a hit on a stopgap: kDynamic or kPadded)
    size_t request;
    double obtain_ms, exec_ms;
    double gpu_ms;       // the execution's own time on the stream (CUDA events), host launch overhead left out
    std::string config;  // the plan's engine configuration
  };
  std::mutex mu;
  std::vector<Sample> samples;
  Status first_error;
  std::atomic<size_t> next{0};
  size_t phase_end = 0;  // requests [next, phase_end) run in this phase
  auto worker = [&] {
    auto stream = make_stream();
    auto ev0 = make_event(), ev1 = make_event();
    for (const Status& s : {stream.status(), ev0.status(), ev1.status()})
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.is_ok()) first_error = s;
        return;
      }
    // Keyed by the plan itself, held: a promoted stopgap freed here could hand its address to the next
    // plan, whose shape these buffers do not fit.
    std::map<std::shared_ptr<const ExecutablePlan>, PlanBuffers> mine;
    std::vector<Sample> local;
    for (size_t i = next++; i < phase_end; i = next++) {
      const Request& q = requests[i];
      const auto t0 = std::chrono::steady_clock::now();
      auto got = planner->obtain(prepared[q.graph], q.shape);
      const auto t1 = std::chrono::steady_clock::now();
      auto t_exec = t1;
      Status st = got.status();
      if (st.is_ok()) {
        auto it = mine.find(got->plan);
        if (it == mine.end()) {
          auto bufs = buffers_for(*got->plan, stream->get());
          if (!bufs.is_ok()) st = bufs.status();
          else it = mine.emplace(got->plan, std::move(bufs).value()).first;
        }
        // The buffers of a plan this thread has not run before are not timed: an application owns its
        // buffers, and their cudaMalloc is no part of the Planner's time to first execution.
        t_exec = std::chrono::steady_clock::now();
        if (st.is_ok()) st = cuda_status(cudaEventRecord(ev0->get(), stream->get()), "cudaEventRecord(start)");
        if (st.is_ok()) st = got->plan->execute(stream->get(), it->second.bindings, it->second.workspace.data());
        if (st.is_ok()) st = cuda_status(cudaEventRecord(ev1->get(), stream->get()), "cudaEventRecord(end)");
        if (st.is_ok() && cudaStreamSynchronize(stream->get()) != cudaSuccess)
          st = unavailable("replay: the stream failed after executing graph '" + prepared[q.graph].graph->name + "'");
      }
      const auto t2 = std::chrono::steady_clock::now();
      float gpu_ms = 0;
      if (st.is_ok()) st = cuda_status(cudaEventElapsedTime(&gpu_ms, ev0->get(), ev1->get()), "cudaEventElapsedTime");
      if (!st.is_ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.is_ok()) first_error = st;
        return;
      }
      local.push_back({got->source, got->plan->built_from(), i,
                       std::chrono::duration<double, std::milli>(t1 - t0).count(),
                       std::chrono::duration<double, std::milli>(t2 - t_exec).count(), static_cast<double>(gpu_ms),
                       got->plan->identity()});
    }
    std::lock_guard<std::mutex> lock(mu);
    samples.insert(samples.end(), local.begin(), local.end());
  };
  const auto t_run = std::chrono::steady_clock::now();
  for (size_t begin = 0; begin < requests.size() && first_error.is_ok();) {
    if (requests[begin].barrier) {
      planner->wait_for_promotions();
      ++begin;
      continue;
    }
    phase_end = begin;
    while (phase_end < requests.size() && !requests[phase_end].barrier) ++phase_end;
    next = begin;
    std::vector<std::thread> pool;
    for (int t = 0; t < o.threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
    begin = phase_end;
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();
  KILN_RETURN_IF_ERROR(first_error);
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.request < b.request; });

  nlohmann::ordered_json j;
  j["trace"] = o.trace;
  j["requests"] = samples.size();
  j["threads"] = o.threads;
  j["planner_create_ms"] = create_ms;
  if (o.preload)
    j["preload"] = {{"ms", pre.ms},
                    {"plans", pre.loaded},
                    {"warmed", pre.warmed},
                    {"failed", pre.failed},
                    {"last_failure", pre.last_failure}};
  j["wall_s"] = wall_s;
  std::vector<double> all;
  for (const Sample& s : samples) all.push_back(s.obtain_ms + s.exec_ms);
  j["latency_ms"] = {{"p50", pct(all, 0.5)}, {"p90", pct(all, 0.9)}, {"p99", pct(all, 0.99)}};
  nlohmann::ordered_json per = nlohmann::ordered_json::object();
  for (int si = 0; si < kPlanSourceCount; ++si) {
    std::vector<double> first, obtain, exec;
    for (const Sample& s : samples)
      if (static_cast<int>(s.source) == si) {
        first.push_back(s.obtain_ms + s.exec_ms);
        obtain.push_back(s.obtain_ms);
        exec.push_back(s.exec_ms);
      }
    per[plan_source_name(static_cast<PlanSource>(si))] = {
        {"calls", first.size()},
        {"share", samples.empty() ? 0.0 : static_cast<double>(first.size()) / static_cast<double>(samples.size())},
        {"obtain_ms_p50", pct(obtain, 0.5)},
        {"first_execution_ms_p50", pct(first, 0.5)},
        {"first_execution_ms_p90", pct(first, 0.9)},
        {"execute_ms_p50", pct(exec, 0.5)}};
  }
  j["by_source"] = per;
  // Per graph and shape: how its first request was served, and the execution times of the stopgap and of
  // the static plan (hits on each).
  struct ShapeRows {
    const Sample* first = nullptr;
    std::vector<double> stopgap, static_plan, stopgap_gpu, static_gpu;
    std::string first_config, last_config;
  };
  std::map<std::pair<size_t, std::string>, ShapeRows> by_shape;
  for (const Sample& smp : samples) {
    const Request& q = requests[smp.request];
    ShapeRows& r = by_shape[{q.graph, shape_key_text(q.shape.empty() ? prepared[q.graph].shape : q.shape)}];
    if (!r.first) r.first = &smp;
    if (r.first_config.empty()) r.first_config = smp.config;
    r.last_config = smp.config;
    if (r.first == &smp) continue;
    if (plan_source_is_stopgap(smp.built_from)) {
      r.stopgap.push_back(smp.exec_ms);
      r.stopgap_gpu.push_back(smp.gpu_ms);
    } else {
      r.static_plan.push_back(smp.exec_ms);
      r.static_gpu.push_back(smp.gpu_ms);
    }
  }
  nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
  for (const auto& [k, r] : by_shape)
    shapes.push_back({{"graph", tg.graphs[k.first].name},
                      {"shape", k.second},
                      {"first_source", plan_source_name(r.first->source)},
                      {"first_plan", plan_source_name(r.first->built_from)},
                      {"first_execution_ms", r.first->obtain_ms + r.first->exec_ms},
                      {"stopgap_executions", r.stopgap.size()},
                      {"stopgap_execute_ms_p50", pct(r.stopgap, 0.5)},
                      {"stopgap_gpu_ms_p50", pct(r.stopgap_gpu, 0.5)},
                      {"executions", r.static_plan.size()},
                      {"execute_ms_p50", pct(r.static_plan, 0.5)},
                      {"gpu_ms_p50", pct(r.static_gpu, 0.5)},
                      {"first_plan_config", r.first_config},
                      {"config", r.last_config}});
  j["by_shape"] = shapes;
  const PlannerStats pst = planner->stats();
  j["promotions"] = {{"promoted", pst.promotions},
                     {"by_tuning", pst.promotions_tuned},
                     {"stopgaps_left", pst.stopgaps},
                     {"failed", pst.promotion_failures},
                     {"last_failure", pst.last_promotion_failure},
                     {"last_tune_fallback", pst.last_tune_fallback}};
  j["stats"] = planner->stats().text();
  if (!o.record_shapes.empty()) KILN_RETURN_IF_ERROR(planner->recorder().write_file(o.record_shapes, o.force));
  if (o.json) {
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::printf("replay %s: %zu requests on %d threads in %.3f s (Planner ready in %.1f ms)\n", o.trace.c_str(),
              samples.size(), o.threads, wall_s, create_ms);
  if (o.preload)
    std::printf("  preloaded %d plans (%d warmed) in %.1f ms; %d did not load or warm%s%s\n", pre.loaded, pre.warmed,
                pre.ms, pre.failed, pre.failed ? "; last: " : "", pre.last_failure.c_str());
  std::printf("  latency (obtain + execute + sync) ms: p50 %.4f  p90 %.4f  p99 %.4f\n", pct(all, 0.5), pct(all, 0.9),
              pct(all, 0.99));
  std::printf("  %-11s %8s %7s %14s %20s %16s\n", "source", "calls", "share", "obtain ms p50", "first exec ms p50/p90",
              "execute ms p50");
  for (const auto& [name, v] : per.items())
    std::printf("  %-11s %8lld %6.1f%% %14.4f %10.4f/%-9.4f %16.4f\n", name.c_str(),
                static_cast<long long>(v["calls"].get<size_t>()), 100.0 * v["share"].get<double>(),
                v["obtain_ms_p50"].get<double>(), v["first_execution_ms_p50"].get<double>(),
                v["first_execution_ms_p90"].get<double>(), v["execute_ms_p50"].get<double>());
  std::printf("  %s\n", planner->stats().text().c_str());
  return Status::ok();
}

void add_replay(CLI::App& app, Runner* run) {
  auto o = std::make_shared<ReplayCmdOptions>();
  CLI::App* sub = app.add_subcommand("replay", "Run a trace of requests through kiln::Planner and report per source");
  sub->add_option("trace", o->trace, "Trace file (JSON: format kiln-trace, see docs/runtime.md)")->required();
  sub->add_option("--store", o->store_path, "Plan store the Planner reads");
  sub->add_option("--buckets", o->buckets, "Bucket policy (e.g. 'batch=pow2;seq=ranges:1-64,65-512')");
  sub->add_option("--threads", o->threads, "Threads sending requests")->capture_default_str();
  sub->add_option("--handles", o->handles, "cuDNN handles in the Planner's pool")->capture_default_str();
  sub->add_option("--new-shapes", o->new_shapes,
                  "A shape the store lacks: 'stopgap' (a padded or dynamic-shape plan now, its static plan in the "
                  "background) "
                  "or 'build-now' (the static plan on the calling thread)")
      ->capture_default_str();
  sub->add_option("--record-shapes", o->record_shapes, "Write the shapes served to this file (kiln stats reads it)");
  sub->add_flag("--no-promote", o->no_promote, "Keep stopgaps (no background static builds): to measure them");
  sub->add_option("--promote-by", o->promote_by,
                  "What replaces a stopgap in the background: 'build' (the bucket's tuned configuration built for "
                  "the shape) or 'tune' (the shape tuned, bounded by --tune-top-k and --tune-budget)")
      ->capture_default_str();
  CLI::Option* top_k = sub->add_option("--tune-top-k", o->tune_top_k,
                                       "With --promote-by tune: the heuristic's first K candidates (0: all)")
                           ->capture_default_str();
  CLI::Option* budget =
      sub->add_option("--tune-budget", o->tune_budget_s, "With --promote-by tune: seconds per shape (0: none)")
          ->capture_default_str();
  sub->add_flag("--no-padded", o->no_padded,
                "No padded stopgaps (a new shape gets a dynamic-shape build instead): to compare them");
  sub->add_flag("--preload", o->preload,
                "Before the first request, load every stored plan of each traced spec's structure (what a service "
                "does at start; timed apart). Padded stopgaps need a bucket policy (--buckets) whose buckets hold "
                "more than one size");
  sub->add_flag("--warm", o->warm, "With --preload: run each preloaded plan once, so no request pays its first load");
  sub->add_flag("--force", o->force, "Write over an existing --record-shapes file");
  sub->add_flag("--json", o->json, "Machine-readable report");
  sub->callback([run, o, top_k, budget] {
    o->tune_bounds_given = top_k->count() > 0 || budget->count() > 0;
    *run = [o] { return run_replay(*o); };
  });
}

}  // namespace

KILN_REGISTER_COMMAND("replay", add_replay);

}  // namespace kiln::cli
