// kiln stats [SHAPES_FILE] [--store S]: a recorded-shapes file's summary (kiln::Planner's recorder,
// docs/runtime.md): per structure, the shapes served, how often, and which are still served by stopgaps (padded,
// dynamic, bucket or heuristics) rather than a stored tuned plan; with --buckets, the bucket representatives to
// tune. With --store, a plan store's (a fleet's): its plans, the job log's outcomes, and the winner changes
// (docs/fleet.md "Winner changes").
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "kiln/core/printable.h"
#include "plans.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/shape_recorder.h"

namespace kiln::cli {
namespace {

struct StatsCmdOptions {
  std::string file, buckets, store;
  bool store_given = false;  // --store was on the command line (an empty one is refused as such)
  bool json = false;
  int top = 20;
};

// The store's part: its plans, the job log's outcomes and the winner changes (newest last; the last --top in
// text). JSON into *j, else printed.
Status store_stats(const StatsCmdOptions& o, nlohmann::ordered_json* j) {
  plans::PlansOptions po;
  po.store = o.store;
  KILN_ASSIGN_OR_RETURN(auto store, plans::open_store(po, /*must_exist=*/true, /*read_only=*/true));
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> records, store->list());
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneJobLogEntry> log, store->retune_job_log());
  KILN_ASSIGN_OR_RETURN(std::vector<WinnerChange> changes, store->winner_changes());
  KILN_ASSIGN_OR_RETURN(std::vector<GraphSpecEntry> specs, store->list_graph_specs());
  std::map<std::string, std::string> graph_of;  // structure|shape -> the graph's name, where a spec is kept
  for (const GraphSpecEntry& e : specs) graph_of[e.structure_sig + "|" + e.shape_key] = e.graph_name;
  int64_t tuned = 0;
  std::map<std::string, int64_t> envs, outcomes;
  for (const PlanSummary& r : records) {
    tuned += r.record.tuned;
    ++envs[r.record.fingerprint_key()];
  }
  for (const RetuneJobLogEntry& e : log) ++outcomes[e.outcome];
  std::map<std::string, int64_t> keys;  // structure|shape|environment -> its changes
  for (const WinnerChange& c : changes) ++keys[c.structure_sig + "|" + c.shape_key + "|" + c.fingerprint_key];
  auto graph = [&](const WinnerChange& c) {
    auto it = graph_of.find(c.structure_sig + "|" + c.shape_key);
    return it == graph_of.end() ? std::string() : it->second;
  };
  if (j) {
    nlohmann::ordered_json list = nlohmann::json::array();
    for (const WinnerChange& c : changes)
      list.push_back({{"structure", c.structure_sig},
                      {"shape_key", c.shape_key},
                      {"graph", graph(c)},
                      {"fingerprint", c.fingerprint_key},
                      {"from", c.from_config},
                      {"to", c.to_config},
                      {"from_median_ms", c.from_median_ms},
                      {"to_median_ms", c.to_median_ms},
                      {"from_tuned_by", c.from_tuned_by},
                      {"to_tuned_by", c.to_tuned_by},
                      {"changed_at", c.changed_at}});
    (*j)["store"] = {
        {"location", shown_location(o.store)}, {"plans", records.size()},   {"tuned", tuned},
        {"environments", envs.size()},         {"jobs", outcomes},          {"winner_changes", changes.size()},
        {"keys_changed", keys.size()},         {"changes", std::move(list)}};
    return Status::ok();
  }
  std::string jobs;
  for (const auto& [outcome, n] : outcomes)  // the log's words, printed safe (the table is data)
    jobs += (jobs.empty() ? "" : ", ") + std::to_string(n) + " " + (outcome.empty() ? "\"\"" : printable(outcome));
  std::printf("%s: %zu plan%s (%lld tuned) in %zu environment%s; job log: %s\n",
              printable(shown_location(o.store)).c_str(), records.size(), records.size() == 1 ? "" : "s",
              static_cast<long long>(tuned), envs.size(), envs.size() == 1 ? "" : "s",
              jobs.empty() ? "empty" : jobs.c_str());
  std::printf("winner changes: %zu, over %zu key%s (a tuned plan replaced by a tuned one of another configuration)\n",
              changes.size(), keys.size(), keys.size() == 1 ? "" : "s");
  const size_t first = changes.size() > static_cast<size_t>(o.top) ? changes.size() - static_cast<size_t>(o.top) : 0;
  if (!changes.empty())
    std::printf("  %-19s %-16s %-16s %-26s %-24s %s\n", "when (UTC)", "graph", "shape", "from -> to", "ms -> ms", "by");
  for (size_t i = first; i < changes.size(); ++i) {
    const WinnerChange& c = changes[i];
    char when[32] = "?";
    const std::time_t t = static_cast<std::time_t>(c.changed_at);
    std::tm tm{};
    if (gmtime_r(&t, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    char ms[64];
    std::snprintf(ms, sizeof ms, "%.4g -> %.4g", c.from_median_ms, c.to_median_ms);
    const std::string g = printable(graph(c).empty() ? c.structure_sig.substr(0, 12) : graph(c));
    std::printf("  %-19s %-16s %-16s %-26s %-24s %s\n", when, g.c_str(),
                c.shape_key.empty() ? "(static)" : printable(c.shape_key).c_str(),
                (printable(c.from_config) + " -> " + printable(c.to_config)).c_str(), ms,
                (printable(c.from_tuned_by) + " -> " + printable(c.to_tuned_by)).c_str());
  }
  if (first > 0) std::printf("  ... %zu earlier (--top N shows more)\n", first);
  return Status::ok();
}

Status shape_stats(const StatsCmdOptions& o, nlohmann::ordered_json* json_out) {
  KILN_ASSIGN_OR_RETURN(std::vector<RecordedShape> shapes, read_shapes_file(o.file));
  auto policy = BucketPolicy::parse(o.buckets);
  if (!policy.is_ok()) return policy.status().with_context("--buckets");
  if (o.top < 1) return invalid_argument("--top must be >= 1, got " + std::to_string(o.top));
  // Hottest first, whatever order the file has (the recorder writes it sorted; a hand-made one may not be).
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const RecordedShape& a, const RecordedShape& b) { return a.count > b.count; });
  // Counts are added saturating (a file's counts are any non-negative int64).
  auto add = [](int64_t& sum, int64_t v) {
    if (__builtin_add_overflow(sum, v, &sum)) sum = INT64_MAX;
  };
  int64_t calls = 0;
  std::map<std::string, int64_t> by_source;
  std::map<std::string, std::string> graph_of;
  std::map<std::string, int64_t> calls_of;
  for (const RecordedShape& s : shapes) {
    add(calls, s.count);
    for (const auto& [src, n] : s.sources) add(by_source[src], n);
    graph_of.emplace(s.structure, s.graph);
    add(calls_of[s.structure], s.count);
  }
  // A shape whose calls were served by a bucket build or heuristics at least once has no stored plan of
  // its own in that service: a candidate for offline tuning.
  auto stopgap = [](const RecordedShape& s) {
    return s.sources.count("dynamic") || s.sources.count("padded") || s.sources.count("split") ||
           s.sources.count("bucket") || s.sources.count("heuristics");
  };
  if (json_out) {
    nlohmann::ordered_json j;
    j["file"] = o.file;
    j["shapes"] = shapes.size();
    j["calls"] = calls;
    j["calls_by_source"] = by_source;
    nlohmann::ordered_json list = nlohmann::json::array();
    for (size_t i = 0; i < shapes.size() && static_cast<int>(i) < o.top; ++i) {
      const RecordedShape& s = shapes[i];
      auto shape = parse_shape_key(s.shape_key);
      list.push_back({{"structure", s.structure},
                      {"graph", s.graph},
                      {"shape_key", s.shape_key},
                      {"count", s.count},
                      {"sources", s.sources},
                      {"stopgap", stopgap(s)},
                      {"bucket", shape.is_ok() ? policy->bucket_key(*shape) : s.shape_key},
                      {"tune_at", shape.is_ok() ? shape_key_text(policy->representative(*shape)) : s.shape_key}});
    }
    j["hottest"] = std::move(list);
    json_out->update(j);
    return Status::ok();
  }
  std::printf("%s: %zu shapes of %zu structures, %lld calls", o.file.c_str(), shapes.size(), graph_of.size(),
              static_cast<long long>(calls));
  // Printed: no control characters reach the terminal (the file is data, its names anything).
  auto printable = [](const std::string& t) { return t.empty() ? std::string("\"\"") : kiln::printable(t); };
  std::string srcs;
  for (const auto& [src, n] : by_source) srcs += (srcs.empty() ? "" : ", ") + printable(src) + " " + std::to_string(n);
  std::printf("%s%s%s\n", srcs.empty() ? "" : " (", srcs.c_str(), srcs.empty() ? "" : ")");
  std::printf("  %-10s %-18s %-24s %-10s %-22s %s\n", "calls", "graph", "shape", "stopgap", "bucket", "structure");
  for (size_t i = 0; i < shapes.size() && static_cast<int>(i) < o.top; ++i) {
    const RecordedShape& s = shapes[i];
    auto shape = parse_shape_key(s.shape_key);
    const std::string name = printable(s.graph);
    const std::string key = s.shape_key.empty() ? s.shape_key : printable(s.shape_key);
    std::printf("  %-10lld %-18s %-24s %-10s %-22s %s\n", static_cast<long long>(s.count), name.c_str(),
                key.empty() ? "(static)" : key.c_str(), stopgap(s) ? "yes" : "no",
                shape.is_ok() ? policy->bucket_key(*shape).c_str() : "?", s.structure.c_str());
  }
  if (shapes.size() > static_cast<size_t>(o.top))
    std::printf("  ... %zu more (--top N shows more)\n", shapes.size() - static_cast<size_t>(o.top));
  return Status::ok();
}

Status run_stats(const StatsCmdOptions& o) {
  if (o.store_given && o.store.empty()) return invalid_argument("--store is empty: give a store's path or location");
  if (o.file.empty() && o.store.empty())
    return invalid_argument("kiln stats needs a recorded-shapes file, --store, or both");
  if (o.top < 1) return invalid_argument("--top must be >= 1, got " + std::to_string(o.top));
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!o.file.empty()) KILN_RETURN_IF_ERROR(shape_stats(o, o.json ? &j : nullptr));
  if (!o.store.empty()) {
    if (!o.file.empty() && !o.json) std::printf("\n");
    KILN_RETURN_IF_ERROR(store_stats(o, o.json ? &j : nullptr).with_context("--store"));
  }
  if (o.json) std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return Status::ok();
}

void add_stats(CLI::App& app, Runner* run) {
  auto o = std::make_shared<StatsCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "stats",
      "Summarize a recorded-shapes file (kiln::Planner's recorder) and/or a plan store's winner changes and jobs");
  sub->add_option("file", o->file, "Recorded-shapes file (docs/runtime.md)");
  sub->add_option("--store", o->store,
                  "A plan store (a path or a PostgreSQL location): its plans, job outcomes and "
                  "winner changes (docs/fleet.md)");
  sub->add_option("--top", o->top, "Show the N hottest shapes")->capture_default_str();
  sub->add_option("--buckets", o->buckets, "Bucket policy to group shapes by (e.g. 'batch=pow2')");
  sub->add_flag("--json", o->json, "Machine-readable output");
  CLI::Option* store = sub->get_option("--store");
  sub->callback([run, o, store] {
    o->store_given = store->count() > 0;
    *run = [o] { return run_stats(*o); };
  });
}

}  // namespace

KILN_REGISTER_COMMAND("stats", add_stats);

}  // namespace kiln::cli
