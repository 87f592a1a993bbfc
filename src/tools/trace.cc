// Reading a replay trace (kiln/tools/replay.h): checked whole before the GPU is touched.
#include <nlohmann/json.hpp>

#include "kiln/core/read_file.h"
#include "kiln/graph/limits.h"
#include "kiln/tools/replay.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"

namespace kiln {

namespace {

// {"wait": "promotions"}, or {"wait": "notices", "count": N >= 1, "timeout_s": T > 0 (default 60)}.
StatusOr<TraceRequest> parse_barrier(const nlohmann::json& r, const std::string& at) {
  const char* forms =
      ": a barrier is {\"wait\": \"promotions\"} or {\"wait\": \"notices\", \"count\": N, \"timeout_s\": T}";
  TraceRequest b;
  b.barrier = true;
  if (!r["wait"].is_string()) return invalid_argument(at + forms);
  const std::string kind = r["wait"].get<std::string>();
  if (kind == "promotions") {
    if (r.size() != 1) return invalid_argument(at + forms);
    return b;
  }
  if (kind != "notices") return invalid_argument(at + ": unknown barrier \"" + kind + "\"" + forms);
  for (const auto& [field, v] : r.items())
    if (field != "wait" && field != "count" && field != "timeout_s")
      return invalid_argument(at + ": unknown field \"" + field + "\"" + forms);
  if (!r.contains("count") || !r["count"].is_number_integer() || r["count"].get<int64_t>() < 1 ||
      r["count"].get<int64_t>() > kMaxTraceRequests)
    return invalid_argument(at + ": \"count\" of a notices barrier must be a whole number from 1 to " +
                            std::to_string(kMaxTraceRequests));
  b.notices = r["count"].get<int64_t>();
  if (r.contains("timeout_s")) {
    if (!r["timeout_s"].is_number() || !(r["timeout_s"].get<double>() > 0) || r["timeout_s"].get<double>() > 86400)
      return invalid_argument(at + ": \"timeout_s\" must be a number of seconds above 0 and at most 86400");
    b.timeout_s = r["timeout_s"].get<double>();
  }
  return b;
}

}  // namespace

StatusOr<Trace> read_trace(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, {"trace", kMaxShapesFileBytes}));
  return parse_trace_json(text, path);
}

StatusOr<Trace> parse_trace_json(const std::string& text, const std::string& path) {
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
  for (const auto& [field, v] : j.items())  // a misspelt field must not be ignored
    if (field != "format" && field != "version" && field != "requests")
      return invalid_argument(where + ": unknown field \"" + field +
                              "\" (a trace has \"format\", \"version\" and "
                              "\"requests\")");
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  Trace trace;
  trace.path = path;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < j["requests"].size(); ++i) {
    const auto& r = j["requests"][i];
    const std::string at = where + ": requests[" + std::to_string(i) + "]";
    if (r.is_object() && r.contains("wait")) {
      KILN_ASSIGN_OR_RETURN(TraceRequest b, parse_barrier(r, at));
      trace.requests.push_back(b);
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
      // A trace's specs are files: a pipe or device would block the read (kiln validate reads one on purpose).
      KILN_RETURN_IF_ERROR(check_readable_file(spec, {"spec", -1}).with_context(at));
      auto g = parse_spec_file(spec);
      if (!g.is_ok()) return g.status().with_context(at);
      it = index.emplace(spec, trace.graphs.size()).first;
      trace.specs.push_back(spec);
      trace.graphs.push_back(std::move(g).value());
    }
    TraceRequest q;
    q.graph = it->second;
    const Graph& graph = trace.graphs[q.graph];
    if (r.contains("shape")) {
      if (!r["shape"].is_object()) return invalid_argument(at + ": \"shape\" is not an object");
      for (const auto& [sym, v] : r["shape"].items()) {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > limits::kMaxExtent)
          return invalid_argument(at + ": shape \"" + sym + "\" is not an integer from 1 to " +
                                  std::to_string(limits::kMaxExtent));
        if (!graph.dynamic_dims.count(sym))
          return invalid_argument(at + ": graph '" + graph.name + "' has no dynamic dim '" + sym + "'");
        q.shape[sym] = v.get<int64_t>();
      }
      if (q.shape.size() != graph.dynamic_dims.size())  // {} too: leave "shape" out for the spec's own
        return invalid_argument(at + ": shape must name every dynamic dim of graph '" + graph.name + "'");
    }
    int64_t count = 1;
    if (r.contains("count")) {
      if (!r["count"].is_number_integer() || r["count"].get<int64_t>() < 1)
        return invalid_argument(at + ": \"count\" is not an integer >= 1");
      count = r["count"].get<int64_t>();
    }
    if (count > kMaxTraceRequests - static_cast<int64_t>(trace.requests.size()))
      return invalid_argument(where + ": more than " + std::to_string(kMaxTraceRequests) + " requests");
    trace.requests.insert(trace.requests.end(), static_cast<size_t>(count), q);
  }
  if (trace.graphs.empty()) return invalid_argument(where + ": no request names a spec (only barriers)");
  return trace;
}

}  // namespace kiln
