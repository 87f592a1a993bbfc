// kiln replay's report (kiln/tools/replay.h): JSON and text from the samples.
#include <cstdarg>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/runtime/bucket_policy.h"
#include "kiln/tools/replay.h"

namespace kiln {
namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Per graph and shape: how its first request was served, and the execution times of the stopgap and of
// the static plan (hits on each).
nlohmann::ordered_json by_shape_json(const ReplayReport& rep) {
  struct ShapeRows {
    const ReplaySample* first = nullptr;
    std::vector<double> stopgap, static_plan, stopgap_gpu, static_gpu;
    std::string first_config, last_config;
  };
  std::map<std::pair<size_t, std::string>, ShapeRows> by_shape;
  for (const ReplaySample& smp : rep.samples) {
    const TraceRequest& q = rep.trace.requests[smp.request];
    const Graph& g = rep.trace.graphs[q.graph];
    ShapeRows& r = by_shape[{q.graph, shape_key_text(q.shape.empty() ? g.dynamic_dims : q.shape)}];
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
    shapes.push_back({{"graph", rep.trace.graphs[k.first].name},
                      {"shape", k.second},
                      {"first_source", plan_source_name(r.first->source)},
                      {"first_plan", plan_source_name(r.first->built_from)},
                      {"first_why", r.first->why},
                      {"first_execution_ms", r.first->obtain_ms + r.first->exec_ms},
                      {"stopgap_executions", r.stopgap.size()},
                      {"stopgap_execute_ms_p50", percentile(r.stopgap, 0.5)},
                      {"stopgap_gpu_ms_p50", percentile(r.stopgap_gpu, 0.5)},
                      {"executions", r.static_plan.size()},
                      {"execute_ms_p50", percentile(r.static_plan, 0.5)},
                      {"gpu_ms_p50", percentile(r.static_gpu, 0.5)},
                      {"first_plan_config", r.first_config},
                      {"config", r.last_config}});
  return shapes;
}

std::vector<double> latencies(const ReplayReport& rep) {
  std::vector<double> all;
  for (const ReplaySample& s : rep.samples) all.push_back(s.obtain_ms + s.exec_ms);
  return all;
}

// Each {"wait": "notices"} barrier: what it waited for and saw, and which sources served the requests after it
// (up to the next such barrier): a fleet's new plans read from the store once their notices came.
nlohmann::ordered_json notice_waits_json(const ReplayReport& rep) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (size_t i = 0; i < rep.notice_waits.size(); ++i) {
    const NoticeWait& w = rep.notice_waits[i];
    const size_t until = i + 1 < rep.notice_waits.size() ? rep.notice_waits[i + 1].request : rep.trace.requests.size();
    std::map<std::string, int64_t> after;
    for (const ReplaySample& smp : rep.samples)
      if (smp.request > w.request && smp.request < until) ++after[plan_source_name(smp.source)];
    nlohmann::ordered_json a = nlohmann::ordered_json::object();
    for (const auto& [name, n] : after) a[name] = n;
    arr.push_back({{"request", w.request},
                   {"wanted", w.wanted},
                   {"seen", w.seen},
                   {"waited_s", w.waited_s},
                   {"timed_out", w.timed_out},
                   {"sources_after", a}});
  }
  return arr;
}

}  // namespace

nlohmann::ordered_json replay_report_json(const ReplayReport& rep) {
  nlohmann::ordered_json j;
  j["trace"] = rep.trace.path;
  j["requests"] = rep.samples.size();
  j["threads"] = rep.threads;
  j["planner_create_ms"] = rep.planner_create_ms;
  if (rep.preloaded)
    j["preload"] = {{"ms", rep.preload.ms},         {"plans", rep.preload.loaded},
                    {"warmed", rep.preload.warmed}, {"padded_warmed", rep.preload.padded_warmed},
                    {"failed", rep.preload.failed}, {"last_failure", rep.preload.last_failure}};
  j["wall_s"] = rep.wall_s;
  const std::vector<double> all = latencies(rep);
  j["latency_ms"] = {{"p50", percentile(all, 0.5)}, {"p90", percentile(all, 0.9)}, {"p99", percentile(all, 0.99)}};
  nlohmann::ordered_json per = nlohmann::ordered_json::object();
  for (int si = 0; si < kPlanSourceCount; ++si) {
    std::vector<double> first, obtain, exec;
    for (const ReplaySample& s : rep.samples)
      if (static_cast<int>(s.source) == si) {
        first.push_back(s.obtain_ms + s.exec_ms);
        obtain.push_back(s.obtain_ms);
        exec.push_back(s.exec_ms);
      }
    const double share =
        rep.samples.empty() ? 0.0 : static_cast<double>(first.size()) / static_cast<double>(rep.samples.size());
    per[plan_source_name(static_cast<PlanSource>(si))] = {{"calls", first.size()},
                                                          {"share", share},
                                                          {"obtain_ms_p50", percentile(obtain, 0.5)},
                                                          {"first_execution_ms_p50", percentile(first, 0.5)},
                                                          {"first_execution_ms_p90", percentile(first, 0.9)},
                                                          {"execute_ms_p50", percentile(exec, 0.5)}};
  }
  j["by_source"] = per;
  j["by_shape"] = by_shape_json(rep);
  const PlannerStats& pst = rep.stats;
  j["promotions"] = {{"promoted", pst.promotions},
                     {"by_tuning", pst.promotions_tuned},
                     {"stopgaps_left", pst.stopgaps},
                     {"failed", pst.promotion_failures},
                     {"last_failure", pst.last_promotion_failure},
                     {"last_tune_fallback", pst.last_tune_fallback}};
  j["first_use"] = {{"checked", pst.first_use_checks},
                    {"refused", pst.first_use_refused},
                    {"last_failure", pst.last_first_use_failure}};
  if (!rep.notice_waits.empty()) j["notice_waits"] = notice_waits_json(rep);
  j["stats"] = pst.text();
  return j;
}

std::string replay_report_text(const ReplayReport& rep) {
  const nlohmann::ordered_json j = replay_report_json(rep);
  const std::vector<double> all = latencies(rep);
  std::string s = format("replay %s: %zu requests on %d threads in %.3f s (Planner ready in %.1f ms)\n",
                         rep.trace.path.c_str(), rep.samples.size(), rep.threads, rep.wall_s, rep.planner_create_ms);
  if (rep.preloaded)
    s += format("  preloaded %d plans (%d warmed%s) in %.1f ms; %d did not load or warm%s", rep.preload.loaded,
                rep.preload.warmed, rep.preload.padded_warmed ? ", a padded plan run once" : "", rep.preload.ms,
                rep.preload.failed, rep.preload.failed ? "; last: " : "") +
         (rep.preload.failed ? rep.preload.last_failure : "") + "\n";
  s += format("  latency (obtain + execute + sync) ms: p50 %.4f  p90 %.4f  p99 %.4f\n", percentile(all, 0.5),
              percentile(all, 0.9), percentile(all, 0.99));
  s += format("  %-11s %8s %7s %14s %20s %16s\n", "source", "calls", "share", "obtain ms p50", "first exec ms p50/p90",
              "execute ms p50");
  for (const auto& [name, v] : j["by_source"].items())
    s += format("  %-11s %8lld %6.1f%% %14.4f %10.4f/%-9.4f %16.4f\n", name.c_str(),
                static_cast<long long>(v["calls"].get<size_t>()), 100.0 * v["share"].get<double>(),
                v["obtain_ms_p50"].get<double>(), v["first_execution_ms_p50"].get<double>(),
                v["first_execution_ms_p90"].get<double>(), v["execute_ms_p50"].get<double>());
  if (j.contains("notice_waits"))
    for (const auto& w : j["notice_waits"]) {
      std::string after;
      for (const auto& [name, n] : w["sources_after"].items())
        after += (after.empty() ? "" : ", ") + name + " " + std::to_string(n.get<int64_t>());
      s += format("  waited %.1f s for %lld notices of plans stored elsewhere: %lld seen%s; after it: %s\n",
                  w["waited_s"].get<double>(), static_cast<long long>(w["wanted"].get<int64_t>()),
                  static_cast<long long>(w["seen"].get<int64_t>()), w["timed_out"].get<bool>() ? " (timed out)" : "",
                  after.empty() ? "no requests" : after.c_str());
    }
  return s + "  " + rep.stats.text() + "\n";
}

}  // namespace kiln
