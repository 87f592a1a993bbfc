// Launch overhead against CUDA Graph replay (issue 13): per-execution time of one small fused op and of a
// chain of ten, launched on the stream (ExecutablePlan::execute per step) and replayed from a graph
// (CapturedSequence::replay), and the host cost of a rebind by update in place against re-instantiation.
//
//   capture_bench [--spec F] [--chain-spec F] [--store S] [--iters N] [--reps R] [--rebinds N] [--out FILE]
//
// Single op: --spec (default examples/small/conv_bias_relu.json). Chain: ten executions of --chain-spec
// (default bench/capture/chain_conv8.json, a small conv + bias + ReLU with 8 channels in and out),
// each reading the previous one's output (the spec's output must fit its input "x"). Plans come from a
// Planner (its store when --store names one, else cuDNN's heuristics). Times: each repetition enqueues N
// executions back to back between two events (GPU time / N) and times the enqueueing on the host; the
// median of R repetitions is reported. Goals: 1.8x (single op), 2.2x (chain). Needs a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/capture/capture.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/measure/measure.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kChain = 10;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "capture_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

// Device buffers for every tensor a plan binds, zeroed; `shared` names buffers to take instead.
struct Buffers {
  std::vector<DeviceBuffer> owned;
  TensorBindings bindings;
};
Status make_buffers(const ExecutablePlan& plan, const TensorBindings& shared, Buffers* b) {
  const Graph& g = plan.graph();
  for (const TensorDesc& d : g.tensors) {
    auto bytes = plan.tensor_bytes(d.name);
    if (!bytes.is_ok()) continue;  // virtual or by value
    if (shared.count(d.name)) {
      b->bindings[d.name] = shared.at(d.name);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(*bytes));
    KILN_RETURN_IF_ERROR(buf.fill_bytes(0));
    b->bindings[d.name] = TensorBinding{buf.data(), *bytes};
    b->owned.push_back(std::move(buf));
  }
  return Status::ok();
}

// One workload: its steps on two sets of buffers (A for timing, B to rebind to).
struct Workload {
  std::string name;
  std::shared_ptr<const ExecutablePlan> plan;
  std::vector<Buffers> owned;
  DeviceBuffer workspace;
  std::vector<CaptureStep> a, b;
};

Status make_workload(const std::string& name, std::shared_ptr<const ExecutablePlan> plan, int steps, Workload* w) {
  w->name = name;
  w->plan = plan;
  const size_t ws = static_cast<size_t>(std::max<int64_t>(plan->workspace_bytes(), 16));
  KILN_ASSIGN_OR_RETURN(w->workspace, DeviceBuffer::allocate(ws));
  for (std::vector<CaptureStep>* set : {&w->a, &w->b}) {
    TensorBinding prev_y;
    for (int i = 0; i < steps; ++i) {
      TensorBindings shared;
      if (i > 0) shared["x"] = prev_y;  // each step reads the previous output
      Buffers buf;
      KILN_RETURN_IF_ERROR(make_buffers(*plan, shared, &buf));
      prev_y = buf.bindings.at(plan->graph().tensors[static_cast<size_t>(plan->graph().outputs.at(0))].name);
      set->push_back({plan, buf.bindings, w->workspace.data()});
      w->owned.push_back(std::move(buf));
    }
  }
  return Status::ok();
}

struct Timing {
  double gpu_us = 0, host_us = 0;  // per execution of the whole sequence, medians
};

template <typename F>
StatusOr<Timing> time_it(cudaStream_t stream, int iters, int reps, F&& run_once) {
  KILN_ASSIGN_OR_RETURN(UniqueEvent start, make_event());
  KILN_ASSIGN_OR_RETURN(UniqueEvent stop, make_event());
  for (int i = 0; i < std::max(10, iters / 10); ++i) KILN_RETURN_IF_ERROR(run_once());  // warm-up
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::vector<double> gpu, host;
  for (int r = 0; r < reps; ++r) {
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) KILN_RETURN_IF_ERROR(run_once());
    const auto t1 = Clock::now();
    KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float ms = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    gpu.push_back(1000.0 * ms / iters);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  return Timing{median(gpu), median(host)};
}

struct Result {
  std::string name;
  int steps = 0;
  Timing stream, graph;
  double update_us = 0, reinstantiate_us = 0;
  CaptureStats update_stats, reinstantiate_stats;
  double goal = 0;
};

// The host time of one rebind, median over `n` alternating between the B and A buffers.
StatusOr<double> time_rebinds(const Planner& planner, const Workload& w, cudaStream_t stream, bool in_place, int n,
                              CaptureStats* stats) {
  CaptureOptions o;
  o.cuda_graphs = true;
  o.update_in_place = in_place;
  KILN_ASSIGN_OR_RETURN(auto seq, CapturedSequence::create(planner, w.a, o));
  KILN_RETURN_IF_ERROR(seq->capture(stream));
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(seq->rebind(i % 2 ? w.a : w.b, stream));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    KILN_RETURN_IF_ERROR(seq->replay(stream));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  *stats = seq->stats();
  return median(us);
}

StatusOr<Result> run(const Planner& planner, const Workload& w, cudaStream_t stream, int iters, int reps, int rebinds,
                     double goal) {
  Result r;
  r.name = w.name;
  r.steps = static_cast<int>(w.a.size());
  r.goal = goal;
  KILN_ASSIGN_OR_RETURN(r.stream, time_it(stream, iters, reps, [&]() -> Status {
                          for (const CaptureStep& s : w.a)
                            KILN_RETURN_IF_ERROR(s.plan->execute(stream, s.tensors, s.workspace));
                          return Status::ok();
                        }));
  CaptureOptions o;
  o.cuda_graphs = true;
  KILN_ASSIGN_OR_RETURN(auto seq, CapturedSequence::create(planner, w.a, o));
  KILN_RETURN_IF_ERROR(seq->capture(stream));
  KILN_ASSIGN_OR_RETURN(r.graph, time_it(stream, iters, reps, [&] { return seq->replay(stream); }));
  KILN_ASSIGN_OR_RETURN(r.update_us, time_rebinds(planner, w, stream, true, rebinds, &r.update_stats));
  KILN_ASSIGN_OR_RETURN(r.reinstantiate_us, time_rebinds(planner, w, stream, false, rebinds, &r.reinstantiate_stats));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "examples/small/conv_bias_relu.json", chain_spec = "bench/capture/chain_conv8.json", store, out;
  int iters = 2000, reps = 7, rebinds = 200;
  const char* usage =
      "usage: capture_bench [--spec F] [--chain-spec F] [--store S] [--iters N] [--reps R] [--rebinds N] "
      "[--out FILE]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--spec" && more) spec = argv[++i];
    else if (a == "--chain-spec" && more) chain_spec = argv[++i];
    else if (a == "--store" && more) store = argv[++i];
    else if (a == "--iters" && more) iters = std::atoi(argv[++i]);
    else if (a == "--reps" && more) reps = std::atoi(argv[++i]);
    else if (a == "--rebinds" && more) rebinds = std::atoi(argv[++i]);
    else if (a == "--out" && more) out = argv[++i];
    else {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (iters < 1 || reps < 1 || rebinds < 2) {
    std::fprintf(stderr, "%s--iters and --reps must be >= 1, --rebinds >= 2\n", usage);
    return 2;
  }
  PlannerOptions po;
  po.store_path = store;
  po.handles = 1;
  po.new_shapes = NewShapes::kBuildNow;  // static plans only: the store's tuned one, else heuristics
  auto planner = Planner::create(po);
  if (!planner.is_ok()) return fail("Planner::create", planner.status());
  auto single_graph = parse_spec_file(spec);
  if (!single_graph.is_ok()) return fail("spec", single_graph.status());
  auto chain_graph = parse_spec_file(chain_spec);
  if (!chain_graph.is_ok()) return fail("chain spec", chain_graph.status());
  auto single = (*planner)->obtain(*single_graph);
  if (!single.is_ok()) return fail("obtain " + spec, single.status());
  auto chain = (*planner)->obtain(*chain_graph);
  if (!chain.is_ok()) return fail("obtain the chain's plan", chain.status());
  auto stream = make_stream();
  if (!stream.is_ok()) return fail("stream", stream.status());

  Workload w1, w10;
  Status st = make_workload(single_graph->name, single->plan, 1, &w1);
  if (!st.is_ok()) return fail("buffers", st);
  st = make_workload("chain of 10 x " + chain_graph->name, chain->plan, kChain, &w10);
  if (!st.is_ok()) return fail("buffers", st);
  KILN_CUDA_CALL_NOEXCEPT(cudaDeviceSynchronize());

  std::vector<Result> results;
  for (auto [w, goal] : {std::pair<const Workload*, double>{&w1, 1.8}, {&w10, 2.2}}) {
    auto r = run(**planner, *w, stream->get(), iters, reps, rebinds, goal);
    if (!r.is_ok()) return fail(w->name, r.status());
    results.push_back(*r);
  }

  std::printf("capture_bench: %d executions x %d repetitions (median), %d rebinds\n", iters, reps, rebinds);
  std::printf("%-34s %5s %12s %12s %8s %6s %12s %12s %14s\n", "workload", "steps", "stream us", "graph us", "speedup",
              "goal", "host launch", "update us", "re-instant. us");
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    const double speedup = r.graph.gpu_us > 0 ? r.stream.gpu_us / r.graph.gpu_us : 0.0;
    std::printf("%-34s %5d %12.2f %12.2f %7.2fx %5.1fx %5.1f/%-6.1f %12.1f %14.1f\n", r.name.c_str(), r.steps,
                r.stream.gpu_us, r.graph.gpu_us, speedup, r.goal, r.stream.host_us, r.graph.host_us, r.update_us,
                r.reinstantiate_us);
    rows.push_back({{"workload", r.name},
                    {"steps", r.steps},
                    {"plan", (r.steps == 1 ? w1 : w10).plan->identity()},
                    {"plan_source", plan_source_name((r.steps == 1 ? w1 : w10).plan->built_from())},
                    {"stream_us_per_execution", r.stream.gpu_us},
                    {"graph_us_per_execution", r.graph.gpu_us},
                    {"stream_host_enqueue_us", r.stream.host_us},
                    {"graph_host_enqueue_us", r.graph.host_us},
                    {"speedup", speedup},
                    {"goal", r.goal},
                    {"goal_met", speedup >= r.goal},
                    {"rebind_update_us", r.update_us},
                    {"rebind_reinstantiate_us", r.reinstantiate_us},
                    {"update_stats", r.update_stats.text()},
                    {"reinstantiate_stats", r.reinstantiate_stats.text()}});
  }
  std::printf(
      "(us per execution of the whole sequence, GPU time between events; host launch: stream/graph enqueue us;\n"
      " update / re-instantiation: host us of one rebind, each including its re-capture)\n");
  for (const Result& r : results)
    std::printf("  %s: update path %s; re-instantiation path %s\n", r.name.c_str(), r.update_stats.text().c_str(),
                r.reinstantiate_stats.text().c_str());
  if (!out.empty()) {
    nlohmann::json j;
    j["benchmark"] = "capture_bench";
    j["method"] =
        "Plans from kiln::Planner (store when given, else heuristics). Each repetition enqueues --iters executions "
        "of the sequence back to back on one non-blocking stream between two CUDA events: stream = "
        "ExecutablePlan::execute per step, graph = one CapturedSequence::replay (cudaGraphLaunch); per-execution "
        "time = event time / iters, median of --reps repetitions, after a warm-up. Chain: ten executions of "
        "--chain-spec (conv+bias+ReLU, 8->8 channels, NHWC 2x8x8x8) each reading the previous output. Rebind: host time of "
        "CapturedSequence::rebind (re-capture + cudaGraphExecUpdate, or re-capture + cudaGraphInstantiate), "
        "median of --rebinds alternating between two buffer sets, a replay after each.";
    j["iters"] = iters;
    j["reps"] = reps;
    j["rebinds"] = rebinds;
    j["spec"] = spec;
    j["chain_spec"] = chain_spec;
    j["store"] = store;
    j["results"] = rows;
    std::vector<std::string> args(argv, argv + argc);
    j["meta"] = environment_meta(args);
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "capture_bench: cannot write %s\n", out.c_str());
      return 3;
    }
  }
  return 0;
}
