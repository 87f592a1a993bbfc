// What shadow sampling costs a request (issue 35, docs/rollout.md "Shadow sampling"): request latency with shadow
// sampling off and on, p50 and p99.
//
//   shadow_bench --spec F [--spec F ...] [--requests N] [--every E,E,...] [--work DIR] [--out FILE]
//
// For each spec: a store is made with the tuned winner active and the runner-up (tuned again without the winner) in
// shadow, as `kiln tune --rollout shadow` stores it. Then, for each sampling rate E (0: off; default 0,100,10), a
// fresh serving Planner over that store serves N requests (default 5000) on one set of caller buffers; a request's
// latency is the host's wall time from execute() to the end of cudaStreamSynchronize() (what a synchronous server
// sees). The shadow rule is set so that nothing is decided within the run (the shadow plan keeps running: 1.4
// million agreeing samples before a verdict), so every rate's cost is measured whole. The first 200 requests of each
// run are warm-up, not counted. Needs a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/workshop.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_check.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kWarmup = 200;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "shadow_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

// The winner active, the runner-up in shadow; their identities.
Status make_store(const Graph& g, const std::string& path, std::string* winner, std::string* runner_up) {
  KILN_ASSIGN_OR_RETURN(auto planner, Planner::create(PlannerOptions::offline(path)));
  TuneJob job;
  job.tune.top_k = 6;
  job.unfused = false;
  KILN_ASSIGN_OR_RETURN(TunedGraph first, planner->workshop().tune(g, job));
  if (!first.kept) return failed_precondition("the tune kept no winner");
  *winner = plan_identity(first.kept->record.engine_id, first.kept->record.knobs);
  job.tune.exclude = {*winner};
  job.rollout = RolloutPolicy::kShadow;
  KILN_ASSIGN_OR_RETURN(TunedGraph second, planner->workshop().tune(g, job));
  if (!second.kept || second.kept->state != PlanState::kShadow)
    return failed_precondition("no runner-up was stored in shadow");
  *runner_up = plan_identity(second.kept->record.engine_id, second.kept->record.knobs);
  return Status::ok();
}

struct Run {
  int every = 0;
  double p50_us = 0, p99_us = 0, mean_us = 0;
  int64_t samples = 0;
  std::string why;
};

Status serve(const Graph& g, const std::string& store, int every, int requests, Run* run) {
  PlannerOptions o = PlannerOptions::serving(store);
  o.shadow.sample_every = every;
  o.shadow.rule.detect_rate = 1e-5;  // 1.4 million samples before any verdict: the shadow runs the whole time
  o.shadow.rule.max_samples = 1 << 30;
  KILN_ASSIGN_OR_RETURN(auto planner, Planner::create(o));
  KILN_ASSIGN_OR_RETURN(Obtained got, planner->obtain(g));
  const ExecutablePlan& plan = *got.plan;
  std::vector<DeviceBuffer> owned;
  TensorBindings bindings;
  std::map<int, void*> inputs;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    auto bytes = plan.tensor_bytes(g.tensors[i].name);
    if (!bytes.is_ok()) continue;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(*bytes));
    bindings[g.tensors[i].name] = TensorBinding{buf.data(), *bytes};
    if (!g.is_graph_output(static_cast<int>(i))) inputs[static_cast<int>(i)] = buf.data();
    owned.push_back(std::move(buf));
  }
  KILN_RETURN_IF_ERROR(generate_inputs_on_device(g, 3, inputs));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer ws,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes(), 16))));
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<double> us;
  us.reserve(static_cast<size_t>(requests));
  for (int r = 0; r < kWarmup + requests; ++r) {
    const auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(plan.execute(stream.get(), bindings, ws.data()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    if (r >= kWarmup) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  run->every = every;
  run->p50_us = percentile(us, 0.50);
  run->p99_us = percentile(us, 0.99);
  double sum = 0;
  for (double v : us) sum += v;
  run->mean_us = sum / static_cast<double>(us.size());
  run->samples = planner->stats().shadow_samples;
  run->why = got.why;
  return Status::ok();
}

std::vector<int> parse_rates(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> specs;
  std::string out, work = std::filesystem::temp_directory_path().string() + "/kiln_shadow_bench";
  int requests = 5000;
  std::vector<int> rates = {0, 100, 10};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "shadow_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--spec") specs.push_back(next());
      else if (a == "--requests") requests = std::stoi(next());
      else if (a == "--every") rates = parse_rates(next());
      else if (a == "--work") work = next();
      else if (a == "--out") out = next();
      else {
        std::fprintf(stderr, "shadow_bench: unknown argument '%s'\n", a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "shadow_bench: %s: not a number\n", a.c_str());
      return 2;
    }
  }
  if (specs.empty() || requests < 1 || rates.empty()) {
    std::fprintf(stderr,
                 "usage: shadow_bench --spec F [--spec F ...] [--requests N] [--every 0,100,10] [--out FILE]\n");
    return 2;
  }
  nlohmann::json doc = {{"method", "per request: host wall time of execute() + cudaStreamSynchronize(), one stream, "
                                   "after 200 warm-up requests; a fresh serving Planner per rate over a store with the "
                                   "tuned winner active and the runner-up in shadow; no verdict within the run"},
                        {"requests", requests},
                        {"results", nlohmann::json::array()}};
  for (const std::string& spec : specs) {
    auto g = parse_spec_file(spec);
    if (!g.is_ok()) return fail(spec, g.status());
    const std::string store = work + "/" + g->name + ".db";
    std::filesystem::create_directories(work);
    std::filesystem::remove(store);
    std::string winner, runner_up;
    if (Status st = make_store(*g, store, &winner, &runner_up); !st.is_ok()) return fail(spec + ": tune", st);
    std::vector<Run> runs;
    for (int every : rates) {
      Run run;
      if (Status st = serve(*g, store, every, requests, &run); !st.is_ok()) return fail(spec + ": serve", st);
      runs.push_back(run);
    }
    const Run& off = runs.front();
    for (const Run& r : runs) {
      std::printf(
          "%-28s every %-4d p50 %8.1f us  p99 %8.1f us  mean %8.1f us  (%.3fx / %.3fx of the first)  %lld samples\n",
          g->name.c_str(), r.every, r.p50_us, r.p99_us, r.mean_us, r.p50_us / off.p50_us, r.p99_us / off.p99_us,
          static_cast<long long>(r.samples));
      doc["results"].push_back({{"spec", spec},
                                {"graph", g->name},
                                {"active", winner},
                                {"shadow", runner_up},
                                {"sample_every", r.every},
                                {"p50_us", r.p50_us},
                                {"p99_us", r.p99_us},
                                {"mean_us", r.mean_us},
                                {"p50_ratio", r.p50_us / off.p50_us},
                                {"p99_ratio", r.p99_us / off.p99_us},
                                {"samples", r.samples}});
    }
  }
  if (!out.empty()) {
    std::ofstream f(out);
    f << doc.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "shadow_bench: cannot write %s\n", out.c_str());
      return 3;
    }
  }
  return 0;
}
