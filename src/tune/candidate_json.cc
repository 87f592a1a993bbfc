// One candidate's JSON, both ways (kiln/tune/tune_policy.h): the object reports print and the one a tuning
// worker sends its supervisor are the same encoder, the latter with the exact fields added.
#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/tune/tune_policy.h"

namespace kiln {
namespace {

using Json = nlohmann::json;

// A number that a report may leave out (0) or write as null (`null_value`: rel_error's infinity).
double number_or(const Json& j, const char* key, double null_value = 0.0) {
  if (!j.contains(key)) return 0.0;
  if (j.at(key).is_null()) return null_value;
  return j.at(key).get<double>();
}

}  // namespace

Json candidate_to_json(const CandidateResult& c, CandidateJson form) {
  Json knobs = Json::object();
  for (const auto& [k, v] : c.config.knobs) knobs[k] = v;
  Json j = {
      {"identity", c.identity()},
      {"engine_id", c.config.engine_id},
      {"knobs", knobs},
      {"disposition", disposition_name(c.disposition)},
      {"message", c.message},
      {"workspace_bytes", c.workspace_bytes},
      {"heuristic_rank", c.heuristic_rank},
      {"samples", c.samples},
      {"throttled", c.throttled},
  };
  const bool exact = form == CandidateJson::kExact;
  if (c.timed() || exact) {
    j["median_ms"] = c.median_ms;
    j["min_ms"] = c.min_ms;
    j["max_ms"] = c.max_ms;
    j["rel_error"] = std::isfinite(c.rel_error) ? Json(c.rel_error) : Json(nullptr);
  } else {
    j["median_ms"] = nullptr;
  }
  if (c.timed() && c.flops > 0.0) j["tflops"] = c.flops / (c.median_ms * 1e-3) / 1e12;
  if (c.timed() && c.bytes > 0.0) j["gbps"] = c.bytes / (c.median_ms * 1e-3) / 1e9;
  if (c.flops > 0.0 || exact) j["flops"] = c.flops;
  if (c.bytes > 0.0 || exact) j["bytes"] = c.bytes;
  j["phases_ms"] = {{"build", c.build_ms},
                    {"gate", c.check_ms},
                    {"warmup", c.warmup_ms},
                    {"timing", std::max(0.0, c.measure_ms - c.warmup_ms)}};
  if (exact) j["measure_ms"] = c.measure_ms;  // the report gives its timing part only
  return j;
}

StatusOr<CandidateResult> candidate_from_json(const Json& j) {
  try {
    CandidateResult c;
    c.config.engine_id = j.at("engine_id").get<int64_t>();
    c.config.knobs = j.at("knobs").get<Knobs>();
    StatusOr<Disposition> d = parse_disposition(j.at("disposition").get<std::string>());
    if (!d.is_ok()) return d.status().with_context("candidate " + c.identity());
    c.disposition = *d;
    c.message = j.at("message").get<std::string>();
    c.workspace_bytes = j.at("workspace_bytes").get<int64_t>();
    c.heuristic_rank = j.at("heuristic_rank").get<int>();
    c.samples = j.at("samples").get<size_t>();
    c.throttled = j.at("throttled").get<bool>();
    c.median_ms = number_or(j, "median_ms");
    c.min_ms = number_or(j, "min_ms");
    c.max_ms = number_or(j, "max_ms");
    c.rel_error = number_or(j, "rel_error", std::numeric_limits<double>::infinity());
    c.flops = number_or(j, "flops");
    c.bytes = number_or(j, "bytes");
    const Json& phases = j.at("phases_ms");
    c.build_ms = phases.at("build").get<double>();
    c.check_ms = phases.at("gate").get<double>();
    c.warmup_ms = phases.at("warmup").get<double>();
    c.measure_ms =
        j.contains("measure_ms") ? j.at("measure_ms").get<double>() : phases.at("timing").get<double>() + c.warmup_ms;
    return c;
  } catch (const Json::exception& e) {
    return invalid_argument(std::string("candidate JSON: ") + e.what());
  }
}

}  // namespace kiln
