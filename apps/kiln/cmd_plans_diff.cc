// kiln plans diff --from ENV --to ENV (docs/rollout.md "Upgrade report"): what a store holds for one environment
// against another (a driver, cuDNN or frontend upgrade): per key, the configuration each environment's plan runs and
// its stored time, the keys the new environment has no plan for yet, and which environment fields differ. From the
// stored records alone: re-running both winners on the GPU is not built yet.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/disposition.h"
#include "kiln/core/engine_config.h"
#include "kiln/core/printable.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"
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

}  // namespace

Status run_diff(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/true));
  KILN_ASSIGN_OR_RETURN(DiffSide from, diff_side(*store, o.from_env, "--from"));
  KILN_ASSIGN_OR_RETURN(DiffSide to, diff_side(*store, o.to_env, "--to"));
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
    rows.push_back({key.first.substr(0, 12), key.second, fc, fc == tc ? "(same)" : tc, ms_fixed(a), ms_fixed(b),
                    both_timed ? ms_fixed(b / a) : "untimed"});
  }
  for (const auto& [key, t] : to.plans) added += from.plans.count(key) ? 0 : 1;
  const double geomean = timed ? std::exp(log_sum / timed) : 0;
  if (o.json) {
    nlohmann::ordered_json out = {{"store", shown_location(o.store)},
                                  {"from", from.plans.begin()->second.stored_fingerprint_key},
                                  {"to", to.plans.begin()->second.stored_fingerprint_key},
                                  {"environment_changes", fields.reasons},
                                  {"compared", compared},
                                  {"configuration_changes", changed},
                                  {"not_rebaked", missing},
                                  {"only_in_to", added},
                                  {"geomean_time_ratio", timed ? nlohmann::ordered_json(geomean) : nullptr},
                                  {"source", "stored records (not re-run)"},
                                  {"keys", keys}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::printf("environment changes (--from -> --to):\n");
  if (fields.reasons.empty()) std::printf("  none under the default policy's rules\n");
  for (const std::string& r : fields.reasons) std::printf("  %s\n", printable(r).c_str());
  print_table(rows);
  std::printf("%d keys in both, %d with another configuration; %d not re-baked for --to; %d only in --to", compared,
              changed, missing, added);
  if (timed) std::printf("; stored time --to/--from: geomean %.3f over %d tuned keys", geomean, timed);
  std::printf(" (stored records, not re-run)\n");
  return Status::ok();
}

}  // namespace kiln::cli::plans
