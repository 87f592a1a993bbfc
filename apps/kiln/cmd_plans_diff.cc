// kiln plans diff --from ENV --to ENV (docs/rollout.md "Upgrade report"): what a store holds for one environment
// against another (a driver, cuDNN or frontend upgrade): per key, the configuration each environment's plan runs and
// its stored time, the keys the new environment has no plan for yet, and which environment fields differ; with
// --rerun, both configurations of every key built on this GPU, run on the same inputs, checked against the
// reference and timed side by side (kiln/tools/plan_rerun.h).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/disposition.h"
#include "kiln/core/engine_config.h"
#include "kiln/core/printable.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "kiln/lower/environment.h"
#include "kiln/store/store_path.h"
#include "kiln/tools/plan_rerun.h"
#include "plans.h"

namespace kiln::cli::plans {
namespace {

using DiffKey = std::pair<std::string, std::string>;  // structure, shape

struct DiffSide {
  std::map<DiffKey, PlanSummary> plans;
  EnvFingerprint env;
};

StatusOr<DiffSide> diff_side(PlanStore& store, const std::string& given, const char* option) {
  if (given.empty())
    return invalid_argument(std::string(option) +
                            " is required (an environment fingerprint key, or 6+ hex digits of one)");
  KILN_ASSIGN_OR_RETURN(std::string fp, resolve_fingerprint_key(given, store));
  ListFilter f;
  f.fingerprint_key = fp;
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> rows, store.list(f));
  if (rows.empty())
    return not_found(std::string(option) + " " + given + ": the store holds no plan for that environment");
  DiffSide s;
  for (PlanSummary& r : rows) {
    if (!r.problem.empty()) continue;  // a damaged record is verify's to report
    s.env = r.record.fingerprint;
    s.plans[{r.record.structure_sig, r.record.shape_key}] = std::move(r);
  }
  return s;
}

std::string ms_fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

// --rerun: what it needs on this machine (the graphs, a GPU), and what it found over the keys.
struct Rerunner {
  GraphCatalog catalog;
  UniqueStream stream;
  UniqueCudnnHandle handle;
  RerunOptions options;
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "FROM", "TO", "FROM MS", "TO MS", "TO/FROM", "MAX |TO-FROM|", "FROM GATE", "TO GATE"}};
  int ran = 0, not_here = 0, no_graph = 0, to_problems = 0, from_problems = 0, timed = 0, throttled = 0;
  double log_sum = 0;
};

StatusOr<std::unique_ptr<Rerunner>> make_rerunner(const PlansOptions& o, PlanStore& store) {
  auto r = std::make_unique<Rerunner>();
  for (const std::string& spec : o.specs) KILN_RETURN_IF_ERROR(r->catalog.add_spec_file(spec));
  KILN_RETURN_IF_ERROR(r->catalog.add_store(store));
  const EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("plans diff --rerun runs both plans of every key on this machine's GPU, and there is none: " +
                       env.device_status.message());
  KILN_ASSIGN_OR_RETURN(r->stream, make_stream());
  KILN_ASSIGN_OR_RETURN(r->handle, make_cudnn_handle(r->stream.get()));
  r->options.check.seed = o.seed;
  return r;
}

nlohmann::ordered_json side_json(const RerunSide& s) {
  nlohmann::ordered_json j = {{"config", s.config}, {"ran", s.ran}};
  if (!s.why.empty()) j["why"] = s.why;
  if (s.ran) {
    j["verdict"] = disposition_name(s.check.verdict);
    j["check"] = s.check.message;
    j["max_abs_vs_reference"] = s.check.max_abs;
    j["median_ms"] = s.median_ms;
    j["min_ms"] = s.min_ms;
    j["rel_error"] = s.rel_error;
    j["samples"] = s.samples;
  }
  return j;
}

std::string gate_cell(const RerunSide& s) { return s.ran ? disposition_name(s.check.verdict) : "not run"; }

// Both configurations of one key re-run here; its JSON, and a row of the rerun table.
nlohmann::ordered_json rerun_key(Rerunner& r, const DiffKey& key, const PlanRecord& from, const PlanRecord& to) {
  const Graph* graph = r.catalog.find(key.first, key.second);
  if (graph == nullptr) {
    ++r.no_graph;
    r.rows.push_back({key.first.substr(0, 12), key.second, "-", "-", "-", "-", "no graph (pass --spec)", "", "", ""});
    return {{"ran", false}, {"why", "no graph: the store keeps no spec of this key (pass --spec)"}};
  }
  const RerunResult res =
      rerun_configs(*graph, EngineConfig{from.engine_id, from.knobs}, EngineConfig{to.engine_id, to.knobs},
                    r.handle.get(), r.stream.get(), r.options);
  r.ran += res.both_ran() ? 1 : 0;
  r.not_here += res.from.ran ? 0 : 1;
  // The upgrade's own plan that cannot be built or run here is its problem as much as one the gate refuses.
  r.to_problems += !res.to.ran || res.to.check.problem() ? 1 : 0;
  r.throttled += res.from.throttled || res.to.throttled ? 1 : 0;
  r.from_problems += res.from.ran && res.from.check.problem() ? 1 : 0;
  if (res.time_ratio > 0) {
    r.log_sum += std::log(res.time_ratio);
    ++r.timed;
  }
  char diff[32];
  std::snprintf(diff, sizeof diff, "%.3g", res.max_abs_between);
  r.rows.push_back({key.first.substr(0, 12), key.second, res.from.config, res.to.config,
                    res.from.median_ms > 0 ? ms_fixed(res.from.median_ms) : "-",
                    res.to.median_ms > 0 ? ms_fixed(res.to.median_ms) : "-",
                    res.time_ratio > 0 ? ms_fixed(res.time_ratio) : (res.from.ran ? "untimed" : "from: not here"),
                    res.both_ran() ? diff : "-", gate_cell(res.from), gate_cell(res.to)});
  nlohmann::ordered_json j = {{"ran", res.both_ran()}, {"from", side_json(res.from)}, {"to", side_json(res.to)}};
  if (res.both_ran()) {
    j["time_ratio"] = res.time_ratio > 0 ? nlohmann::ordered_json(res.time_ratio) : nullptr;
    j["max_abs_between"] = std::isfinite(res.max_abs_between) ? nlohmann::ordered_json(res.max_abs_between)
                                                              : nlohmann::ordered_json("inf");
    j["nmse_between"] =
        std::isfinite(res.nmse_between) ? nlohmann::ordered_json(res.nmse_between) : nlohmann::ordered_json("inf");
    if (!res.note.empty()) j["note"] = res.note;
    if (res.from.throttled || res.to.throttled) j["throttled"] = true;
  }
  return j;
}

nlohmann::ordered_json rerun_summary(const Rerunner& r) {
  return {{"rerun", r.ran},
          {"from_not_here", r.not_here},
          {"no_graph", r.no_graph},
          {"to_failing_gate_or_not_run", r.to_problems},
          {"from_failing_gate", r.from_problems},
          {"geomean_time_ratio", r.timed ? nlohmann::ordered_json(std::exp(r.log_sum / r.timed)) : nullptr},
          {"timed", r.timed},
          {"throttled_keys", r.throttled}};
}

// A --to plan that fails the gate here is the upgrade's problem: exit 1 (CheckFailed), after the report.
Status rerun_status(const Rerunner* r) {
  if (r == nullptr || r->to_problems == 0) return Status::ok();
  return check_failed(std::to_string(r->to_problems) +
                      " --to plan(s) could not be built or run here, or gave outputs the numerics gate refuses on this "
                      "GPU (the report names them)");
}

}  // namespace

Status run_diff(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/true));
  KILN_ASSIGN_OR_RETURN(DiffSide from, diff_side(*store, o.from_env, "--from"));
  KILN_ASSIGN_OR_RETURN(DiffSide to, diff_side(*store, o.to_env, "--to"));
  if (!o.rerun && (o.seed_given || !o.specs.empty()))
    return invalid_argument(std::string(o.seed_given ? "--seed" : "--spec") +
                            " is for --rerun (the inputs and graphs of the re-run); add --rerun");
  std::unique_ptr<Rerunner> rerun;
  if (o.rerun) {
    KILN_ASSIGN_OR_RETURN(rerun, make_rerunner(o, *store));
  }
  const FingerprintCheck fields = check_fingerprint(from.env, to.env, EnvPolicy{});
  nlohmann::ordered_json keys = nlohmann::ordered_json::array();
  std::vector<std::vector<std::string>> rows = {{"STRUCTURE", "SHAPE", "FROM", "TO", "FROM MS", "TO MS", "TO/FROM"}};
  int compared = 0, changed = 0, missing = 0, added = 0;
  double log_sum = 0;
  int timed = 0;
  for (const auto& [key, f] : from.plans) {
    auto t = to.plans.find(key);
    const std::string fc = plan_identity(f.record.engine_id, f.record.knobs);
    if (t == to.plans.end()) {
      ++missing;
      keys.push_back({{"structure_sig", key.first},
                      {"shape_key", key.second},
                      {"from_config", fc},
                      {"to_config", nullptr},
                      {"status", "no plan in --to (not re-baked yet)"}});
      rows.push_back(
          {key.first.substr(0, 12), key.second, fc, "-", ms_fixed(f.record.stats.median_ms), "-", "not re-baked"});
      continue;
    }
    ++compared;
    const std::string tc = plan_identity(t->second.record.engine_id, t->second.record.knobs);
    changed += fc != tc ? 1 : 0;
    const double a = f.record.stats.median_ms, b = t->second.record.stats.median_ms;
    const bool both_timed = f.record.tuned && t->second.record.tuned && a > 0 && b > 0;
    if (both_timed) {
      log_sum += std::log(b / a);
      ++timed;
    }
    keys.push_back({{"structure_sig", key.first},
                    {"shape_key", key.second},
                    {"from_config", fc},
                    {"to_config", tc},
                    {"configuration_changed", fc != tc},
                    {"from_median_ms", a},
                    {"to_median_ms", b},
                    {"time_ratio", both_timed ? nlohmann::ordered_json(b / a) : nlohmann::ordered_json(nullptr)},
                    {"from_verdict", disposition_name(f.record.numerics.verdict)},
                    {"to_verdict", disposition_name(t->second.record.numerics.verdict)}});
    if (rerun) keys.back()["rerun"] = rerun_key(*rerun, key, f.record, t->second.record);
    rows.push_back({key.first.substr(0, 12), key.second, fc, fc == tc ? "(same)" : tc, ms_fixed(a), ms_fixed(b),
                    both_timed ? ms_fixed(b / a) : "untimed"});
  }
  for (const auto& [key, t] : to.plans) added += from.plans.count(key) ? 0 : 1;
  const double geomean = timed ? std::exp(log_sum / timed) : 0;
  if (o.json) {
    nlohmann::ordered_json out = {
        {"store", shown_location(o.store)},
        {"from", from.plans.begin()->second.stored_fingerprint_key},
        {"to", to.plans.begin()->second.stored_fingerprint_key},
        {"environment_changes", fields.reasons},
        {"compared", compared},
        {"configuration_changes", changed},
        {"not_rebaked", missing},
        {"only_in_to", added},
        {"geomean_time_ratio", timed ? nlohmann::ordered_json(geomean) : nullptr},
        {"source", rerun ? "stored records, and both re-run on this GPU" : "stored records (not re-run)"},
        {"keys", keys}};
    if (rerun) out["rerun"] = rerun_summary(*rerun);
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return rerun_status(rerun.get());
  }
  std::printf("environment changes (--from -> --to):\n");
  if (fields.reasons.empty()) std::printf("  none under the default policy's rules\n");
  for (const std::string& r : fields.reasons) std::printf("  %s\n", printable(r).c_str());
  print_table(rows);
  std::printf("%d keys in both, %d with another configuration; %d not re-baked for --to; %d only in --to", compared,
              changed, missing, added);
  if (timed) std::printf("; stored time --to/--from: geomean %.3f over %d tuned keys", geomean, timed);
  std::printf(" (stored records, not re-run)\n");
  if (!rerun) return Status::ok();
  std::printf("\nre-run on this GPU (both configurations built here, same inputs, timed in alternation):\n");
  print_table(rerun->rows);
  std::printf("%d keys re-run; %d whose --from configuration this cuDNN does not offer or run; %d without a graph; "
              "--to plans not run or failing the gate: %d, --from failing it: %d",
              rerun->ran, rerun->not_here, rerun->no_graph, rerun->to_problems, rerun->from_problems);
  if (rerun->timed)
    std::printf("; measured time --to/--from: geomean %.3f over %d keys", std::exp(rerun->log_sum / rerun->timed),
                rerun->timed);
  std::printf("\n");
  return rerun_status(rerun.get());
}

}  // namespace kiln::cli::plans
