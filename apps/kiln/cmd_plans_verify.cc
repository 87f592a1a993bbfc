// kiln plans verify (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "kiln/core/hash.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

namespace {

std::string short_key(const std::string& sig, const std::string& shape, const std::string& fp) {
  return sig.substr(0, 12) + "/" + shape + "/" + fp.substr(0, 12);
}

std::string deep_status(const DeepVerifyRow& r) {
  if (!r.checked) return "not deep-checked";
  return disposition_name(r.result.verdict);
}

// --deep's rows in `kiln plans verify --json`.
nlohmann::ordered_json deep_verify_rows_json(const std::vector<DeepVerifyRow>& deep_rows) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const DeepVerifyRow& r : deep_rows) {
    nlohmann::ordered_json row = {{"structure_sig", r.structure_sig},
                                  {"shape_key", r.shape_key},
                                  {"fingerprint_key", r.fingerprint_key},
                                  {"plan", r.plan},
                                  {"status", deep_status(r)}};
    if (r.checked) {
      row["message"] = r.result.message;
      row["reference"] = reference_kind_name(r.result.reference_kind);
      row["max_abs"] = r.result.max_abs;
      row["max_rel"] = r.result.max_rel;
      row["nmse"] = r.result.nmse;
      row["graph"] = r.graph_source;
    } else {
      row["reason"] = r.reason;
    }
    rows.push_back(row);
  }
  return rows;
}

// One --deep row of `kiln plans verify`'s text.
void print_deep_verify_row(const DeepVerifyRow& r, bool quarantine) {
  std::string key = short_key(r.structure_sig, r.shape_key, r.fingerprint_key);
  if (!r.checked) {
    std::printf("NOT DEEP-CHECKED  %s %s: %s\n", key.c_str(), r.plan.c_str(), r.reason.c_str());
    return;
  }
  std::string line = std::string(disposition_name(r.result.verdict)) + "  " + key + " " + r.plan;
  char measures[160];
  std::snprintf(measures, sizeof measures, " max_abs=%.3g max_rel=%.3g nmse=%.3g (%s reference)", r.result.max_abs,
                r.result.max_rel, r.result.nmse, reference_kind_name(r.result.reference_kind));
  if (r.result.verdict == Disposition::kPassed || r.result.verdict == Disposition::kIncorrect) line += measures;
  line += "; graph: " + r.graph_source;
  if (r.result.verdict != Disposition::kPassed) line += "\n    " + r.result.message;
  if (r.result.problem() && quarantine) line += " (quarantined)";
  std::printf("%s\n", line.c_str());
}

}  // namespace

Status run_verify(const PlansOptions& o) {
  if (!o.specs.empty() && !o.deep) return invalid_argument("verify: --spec gives the graphs for --deep; add --deep");
  if (o.seed_given && !o.deep) return invalid_argument("verify: --seed is the seed of --deep's inputs; add --deep");
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/!o.quarantine));
  VerifyOptions vo;
  vo.quarantine = o.quarantine;
  std::unique_ptr<DeepPlanVerifier> deep;
  if (o.deep) {
    KILN_ASSIGN_OR_RETURN(deep, make_deep_verifier(o, *store, "verify"));
    vo.validator = deep->validator();
  }
  KILN_ASSIGN_OR_RETURN(VerifyReport rep, store->verify(vo));
  // Records the deep check refused: reported as deep problems (exit 1), not as corrupt ones (exit 4).
  std::map<std::tuple<std::string, std::string, std::string>, const DeepVerifyRow*> deep_problem;
  if (deep)
    for (const DeepVerifyRow& r : deep->rows())
      if (r.checked && r.result.problem()) deep_problem[{r.structure_sig, r.shape_key, r.fingerprint_key}] = &r;
  std::vector<const VerifyProblem*> corrupt;
  for (const auto& p : rep.problems)
    if (!deep_problem.count({p.structure_sig, p.shape_key, p.fingerprint_key})) corrupt.push_back(&p);
  size_t passed = 0, not_checked = 0, not_verified = 0;
  if (deep)
    for (const DeepVerifyRow& r : deep->rows()) {
      if (!r.checked) ++not_checked;
      else if (r.result.verdict == Disposition::kPassed) ++passed;
      else if (r.result.verdict == Disposition::kNotVerified) ++not_verified;
    }

  if (o.json) {
    nlohmann::ordered_json j;
    j["store"] = shown_store(o);
    j["integrity"] = rep.integrity;
    j["checked"] = rep.checked;
    j["ok"] = rep.ok;
    nlohmann::ordered_json probs = nlohmann::ordered_json::array();
    for (const auto& p : rep.problems)
      probs.push_back({{"structure_sig", p.structure_sig},
                       {"shape_key", p.shape_key},
                       {"fingerprint_key", p.fingerprint_key},
                       {"reason", p.reason}});
    j["problems"] = probs;
    nlohmann::ordered_json cache_probs = nlohmann::ordered_json::array();
    for (const auto& p : rep.kernel_cache_problems)
      cache_probs.push_back(
          {{"structure_sig", p.structure_sig}, {"fingerprint_key", p.fingerprint_key}, {"reason", p.reason}});
    j["kernel_caches"] = {
        {"checked", rep.kernel_caches_checked}, {"ok", rep.kernel_caches_ok}, {"problems", cache_probs}};
    nlohmann::ordered_json rollout_probs = nlohmann::ordered_json::array();
    for (const auto& p : rep.rollout_problems)
      rollout_probs.push_back({{"structure_sig", p.structure_sig},
                               {"shape_key", p.shape_key},
                               {"fingerprint_key", p.fingerprint_key},
                               {"reason", p.reason}});
    j["other_states"] = {{"checked", rep.rollout_checked}, {"ok", rep.rollout_ok}, {"problems", rollout_probs}};
    if (deep) j["deep"] = deep_verify_rows_json(deep->rows());
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    for (const VerifyProblem* p : corrupt)
      std::printf("CORRUPT  %s: %s%s\n",
                  printable(short_key(p->structure_sig, p->shape_key, p->fingerprint_key)).c_str(),
                  printable(p->reason).c_str(), o.quarantine ? " (quarantined)" : "");
    for (const VerifyProblem& p : rep.kernel_cache_problems)
      std::printf("CORRUPT  kernel cache %s: %s%s\n",
                  printable(kernel_cache_display_name(p.structure_sig, p.fingerprint_key, p.rowid)).c_str(),
                  printable(p.reason).c_str(), o.quarantine ? " (dropped)" : "");
    for (const VerifyProblem& p : rep.rollout_problems)
      std::printf("CORRUPT  %s, plan %s\n",
                  printable(short_key(p.structure_sig, p.shape_key, p.fingerprint_key)).c_str(),
                  printable(p.reason).c_str());
    if (deep)
      for (const DeepVerifyRow& r : deep->rows()) print_deep_verify_row(r, o.quarantine);
    std::printf("checked %" PRId64 " plan%s: %" PRId64 " ok, %zu corrupt", rep.checked, rep.checked == 1 ? "" : "s",
                rep.ok, corrupt.size());
    if (rep.kernel_caches_checked > 0)
      std::printf("; %" PRId64 " kernel cache%s: %" PRId64 " ok, %zu corrupt", rep.kernel_caches_checked,
                  rep.kernel_caches_checked == 1 ? "" : "s", rep.kernel_caches_ok, rep.kernel_cache_problems.size());
    if (rep.rollout_checked > 0)
      std::printf("; %" PRId64 " plan%s in other states: %" PRId64 " ok, %zu corrupt", rep.rollout_checked,
                  rep.rollout_checked == 1 ? "" : "s", rep.rollout_ok, rep.rollout_problems.size());
    if (deep)
      std::printf("; deep: %zu passed, %zu failed the check, %zu not verified (no reference), %zu not deep-checked",
                  passed, deep_problem.size(), not_verified, not_checked);
    std::printf("; database integrity: %s\n", rep.integrity.c_str());
  }
  if (rep.integrity != "ok")
    return corruption("plan store " + shown_store(o) + " failed integrity_check: " + rep.integrity);
  // A damaged kernel cache counts as a corrupt record does (exit 4); --quarantine drops it (it is compiled again).
  const size_t bad_caches = rep.kernel_cache_problems.size();
  const std::string caches_text =
      std::to_string(bad_caches) + " of " + std::to_string(rep.kernel_caches_checked) + " kernel caches";
  if (!corrupt.empty())
    return corruption(std::to_string(corrupt.size()) + " of " + std::to_string(rep.checked) + " plan records in " +
                      shown_store(o) + " are corrupt" + (bad_caches > 0 ? ", and " + caches_text : "") +
                      (o.quarantine ? " (moved to quarantine)" : " (run with --quarantine to set them aside)"));
  if (!rep.rollout_problems.empty() && bad_caches == 0)
    return corruption(std::to_string(rep.rollout_problems.size()) + " of " + std::to_string(rep.rollout_checked) +
                      " plans in other states (candidate, shadow, retired, rejected) in " + shown_store(o) +
                      " are damaged: never activated; `kiln plans rm` removes them with their key");
  if (bad_caches > 0)
    return corruption(caches_text + " in " + shown_store(o) + " are corrupt" +
                      (o.quarantine ? " (dropped: their kernels are compiled again)"
                                    : " (run with --quarantine to drop them, or `kiln plans gc`)"));
  if (!deep_problem.empty())
    return check_failed(std::to_string(deep_problem.size()) + " of " + std::to_string(rep.checked) + " plans in " +
                        shown_store(o) + " failed the deep check on this GPU" +
                        (o.quarantine ? " (moved to quarantine)" : " (run with --quarantine to set them aside)"));
  return Status::ok();
}

}  // namespace kiln::cli::plans
