// kiln stats SHAPES_FILE: a recorded-shapes file's summary (kiln::Planner's recorder, docs/runtime.md):
// per structure, the shapes served, how often, and which are still served by stopgaps (padded, dynamic,
// bucket or heuristics) rather than a stored tuned plan; with --buckets, the bucket representatives to tune.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "kiln/core/printable.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/shape_recorder.h"

namespace kiln::cli {
namespace {

struct StatsCmdOptions {
  std::string file, buckets;
  bool json = false;
  int top = 20;
};

Status run_stats(const StatsCmdOptions& o) {
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
  if (o.json) {
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
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
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

void add_stats(CLI::App& app, Runner* run) {
  auto o = std::make_shared<StatsCmdOptions>();
  CLI::App* sub = app.add_subcommand("stats", "Summarize a recorded-shapes file (kiln::Planner's recorder)");
  sub->add_option("file", o->file, "Recorded-shapes file (docs/runtime.md)")->required();
  sub->add_option("--top", o->top, "Show the N hottest shapes")->capture_default_str();
  sub->add_option("--buckets", o->buckets, "Bucket policy to group shapes by (e.g. 'batch=pow2')");
  sub->add_flag("--json", o->json, "Machine-readable output");
  sub->callback([run, o] { *run = [o] { return run_stats(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("stats", add_stats);

}  // namespace kiln::cli
