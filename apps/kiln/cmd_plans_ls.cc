// kiln plans ls (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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

Status run_ls(const PlansOptions& given) {
  if (given.kernel_caches && (!given.shape.empty() || given.tuned_only))
    return invalid_argument("ls --kernel-caches: --shape and --tuned select plans, and a kernel cache has neither "
                            "(one is kept per structure and environment): use --structure or --fingerprint");
  if (!given.fingerprint.empty()) KILN_RETURN_IF_ERROR(fingerprint_prefix_text(given.fingerprint).status());
  KILN_ASSIGN_OR_RETURN(bool no_store, said_no_store(given));
  if (no_store) return Status::ok();
  KILN_ASSIGN_OR_RETURN(auto store, open_store(given, true, /*read_only=*/true));
  // --fingerprint may be the 12 digits the table shows (a unique prefix): from here on, the whole key.
  PlansOptions o = given;
  KILN_ASSIGN_OR_RETURN(o.fingerprint, resolve_fingerprint_key(given.fingerprint, *store));
  if (o.kernel_caches) {
    KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
    return print_kernel_caches(o, *store, env, /*alone=*/true);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store->list(filter_of(o)));
  KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
  // A corrupt record (verify's check) is neither current nor stale: its fingerprint is not judged.
  std::vector<FingerprintCheck> checks;
  for (const PlanSummary& p : plans)
    checks.push_back(p.problem.empty() ? check_fingerprint(p.record.fingerprint, env.fingerprint, env.policy)
                                       : FingerprintCheck{});
  auto status_of = [&](size_t i) -> std::string {
    return !plans[i].problem.empty() ? "corrupt" : checks[i].pass ? "current" : "stale";
  };
  // The keys that serve as an unfused chain (docs/store.md "Fusion decisions"), by key and environment.
  KILN_ASSIGN_OR_RETURN(std::vector<FusionRecord> fusions, store->list_fusion_records());
  std::map<std::tuple<std::string, std::string, std::string>, const FusionRecord*> chain_of;
  for (const FusionRecord& f : fusions) chain_of[{f.structure_sig, f.shape_key, f.fingerprint_key()}] = &f;
  auto chain_for = [&](const PlanRecord& r) -> const FusionRecord* {
    auto it = chain_of.find({r.structure_sig, r.shape_key, r.fingerprint_key()});
    return it == chain_of.end() ? nullptr : it->second;
  };
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (size_t i = 0; i < plans.size(); ++i) {
      nlohmann::ordered_json j = record_json(plans[i].record, plans[i].plan_size);
      j["status"] = status_of(i);
      j["stale_reasons"] = checks[i].reasons;
      if (!plans[i].problem.empty()) j["problem"] = plans[i].problem;
      j["judged_against"] = env.basis;
      if (const FusionRecord* f = chain_for(plans[i].record)) {
        nlohmann::ordered_json parts = nlohmann::ordered_json::array();
        for (const FusionPartRef& p : f->parts)
          parts.push_back({{"name", p.name}, {"structure_sig", p.structure_sig}, {"shape_key", p.shape_key}});
        j["serves"] = "unfused chain";
        j["fusion"] = {{"parts", parts},          {"materialized", f->materialized}, {"policy", f->policy},
                       {"fused_ms", f->fused_ms}, {"unfused_ms", f->unfused_ms},     {"explanation", f->explanation}};
      }
      arr.push_back(std::move(j));
    }
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "GPU", "CUDNN", "FRONTEND", "ENGINE", "TUNED", "MEDIAN", "VERDICT", "AGE", "STATUS"}};
  size_t stale = 0, corrupt = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanRecord& r = plans[i].record;
    corrupt += plans[i].problem.empty() ? 0 : 1;
    stale += plans[i].problem.empty() && !checks[i].pass ? 1 : 0;
    rows.push_back({r.structure_sig.substr(0, 12), r.shape_key, r.fingerprint.gpu_name,
                    EnvFingerprint::cudnn_version_string(r.fingerprint.cudnn_version),
                    EnvFingerprint::cudnn_version_string(r.fingerprint.cudnn_frontend_version),
                    plan_identity(r.engine_id, r.knobs), r.tuned ? "yes" : "no", ms_text(r.stats.median_ms, r.tuned),
                    disposition_name(r.numerics.verdict), age_of(r.created_at),
                    plans[i].problem.empty() && checks[i].pass ? "current"
                    : plans[i].problem.empty()                 ? "STALE"
                                                               : "CORRUPT"});
  }
  print_table(rows);
  for (size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].problem.empty()) {
      std::printf("corrupt %s/%s: %s\n", printable(plans[i].record.structure_sig.substr(0, 12)).c_str(),
                  printable(plans[i].record.shape_key).c_str(), printable(plans[i].problem).c_str());
      continue;
    }
    if (checks[i].pass) continue;
    std::string why;
    for (const std::string& reason : checks[i].reasons) why += (why.empty() ? "" : "; ") + reason;
    std::printf("stale %s/%s: %s\n", printable(plans[i].record.structure_sig.substr(0, 12)).c_str(),
                printable(plans[i].record.shape_key).c_str(), printable(why).c_str());
  }
  for (const PlanSummary& p : plans) {
    const FusionRecord* f = chain_for(p.record);
    if (!f) continue;
    std::string names;
    for (const FusionPartRef& part : f->parts) names += (names.empty() ? "" : ", ") + part.name;
    std::printf("unfused %s/%s: serves the chain of %zu parts (%s), %s against the fused %s (policy %s)\n",
                printable(p.record.structure_sig.substr(0, 12)).c_str(), printable(p.record.shape_key).c_str(),
                f->parts.size(), printable(names).c_str(), ms_text(f->unfused_ms, true).c_str(),
                ms_text(f->fused_ms, f->fused_ms > 0).c_str(), f->policy.c_str());
  }
  std::printf("%zu plan%s in %s, %zu stale%s (judged against %s)\n", plans.size(), plans.size() == 1 ? "" : "s",
              printable(shown_store(o)).c_str(), stale,
              corrupt > 0 ? (", " + std::to_string(corrupt) + " corrupt").c_str() : "", env.basis.c_str());
  if (corrupt > 0)
    std::printf("(a corrupt record is never run: `kiln plans verify --quarantine` moves it aside, `kiln plans gc` "
                "drops it)\n");
  if (stale > 0)
    std::printf("(a stale plan is never run: `kiln plans retune` or `kiln tune --untuned` bakes it again on the "
                "GPU, `kiln compile --target` ahead of time; `kiln plans gc --stale` drops it)\n");
  // The kept kernel caches under the plans, unless the filter is one only plans have.
  if (o.shape.empty() && !o.tuned_only) KILN_RETURN_IF_ERROR(print_kernel_caches(o, *store, env, /*alone=*/false));
  return Status::ok();
}

}  // namespace kiln::cli::plans
