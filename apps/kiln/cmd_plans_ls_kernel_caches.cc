// kiln plans ls: the kept kernel caches (docs/store.md "Kernel caches"), under the plans or alone
// (--kernel-caches, which --json then prints).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/store/env_policy.h"
#include "kiln/core/strings.h"
#include "kiln/store/kernel_cache_record.h"
#include "kiln/store/plan_store.h"
#include "plans.h"

namespace kiln::cli::plans {

namespace {

struct JudgedCache {
  const KernelCacheInfo* info;
  std::vector<std::string> stale_reasons;  // empty: current (or damaged)
  const char* status() const {
    if (!info->problem.empty()) return "damaged";
    return stale_reasons.empty() ? "current" : "stale";
  }
};

std::string short_name(const KernelCacheInfo& c) {
  return kernel_cache_display_name(c.structure_sig, c.fingerprint_key, c.rowid);
}

}  // namespace

Status print_kernel_caches(const PlansOptions& o, PlanStore& store, const JudgedAgainst& env, bool alone) {
  KILN_ASSIGN_OR_RETURN(std::vector<KernelCacheInfo> all, store.list_kernel_caches());
  std::vector<JudgedCache> caches;
  for (const KernelCacheInfo& c : all) {
    if (!o.structure.empty() && c.structure_sig.compare(0, o.structure.size(), o.structure) != 0) continue;
    if (!o.fingerprint.empty() && c.fingerprint_key != o.fingerprint) continue;
    JudgedCache j{&c, {}};
    if (c.problem.empty())
      j.stale_reasons = kernel_cache_mismatches(c.fingerprint, env.fingerprint, env.kernel_cache_judged);
    caches.push_back(std::move(j));
  }
  if (alone && o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const JudgedCache& j : caches) {
      const KernelCacheInfo& c = *j.info;
      nlohmann::ordered_json e;
      e["structure_sig"] = c.structure_sig;
      e["fingerprint_key"] = c.fingerprint_key;
      e["fingerprint"] = c.problem.empty()
                             ? nlohmann::ordered_json::parse(fingerprint_to_json(c.fingerprint), nullptr, false)
                             : nlohmann::ordered_json();
      e["graph_name"] = c.graph_name;
      e["bytes"] = c.bytes;
      e["created_at"] =
          c.created_at ? nlohmann::ordered_json(*c.created_at) : nlohmann::ordered_json();  // null: unknown
      e["status"] = j.status();
      e["stale_reasons"] = j.stale_reasons;
      e["problem"] = c.problem;
      e["judged_against"] = env.basis;
      arr.push_back(std::move(e));
    }
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  if (caches.empty() && !alone) return Status::ok();  // a store without kernel caches lists as it always did
  if (!alone) std::printf("\n");
  std::vector<std::vector<std::string>> rows = {
      {"KERNEL CACHE", "GRAPH", "ENVIRONMENT", "GPU", "DRIVER", "CUDA", "CUDNN", "FRONTEND", "SIZE", "AGE", "STATUS"}};
  size_t stale = 0, damaged = 0;
  for (const JudgedCache& j : caches) {
    const KernelCacheInfo& c = *j.info;
    const EnvFingerprint& f = c.fingerprint;
    const bool ok = c.problem.empty();
    stale += ok && !j.stale_reasons.empty() ? 1 : 0;
    damaged += ok ? 0 : 1;
    rows.push_back({c.structure_sig.substr(0, 12), c.graph_name, c.fingerprint_key.substr(0, 12), ok ? f.gpu_name : "?",
                    ok ? EnvFingerprint::cuda_version_string(f.driver_version) : "?",
                    ok ? EnvFingerprint::cuda_version_string(f.cuda_runtime_version) : "?",
                    ok ? EnvFingerprint::cudnn_version_string(f.cudnn_version) : "?",
                    ok ? EnvFingerprint::cudnn_version_string(f.cudnn_frontend_version) : "?", size_text(c.bytes),
                    c.created_at ? age_of(*c.created_at) : "unknown",
                    !ok                       ? "DAMAGED"
                    : j.stale_reasons.empty() ? "current"
                                              : "STALE"});
  }
  print_table(rows);
  // Not "stale X: ..." as a plan's line: a reader of those lines must not take a cache for a plan.
  for (const JudgedCache& j : caches) {
    if (!j.info->problem.empty())
      std::printf("kernel cache %s is damaged: %s\n", printable(short_name(*j.info)).c_str(),
                  printable(j.info->problem).c_str());
    else if (!j.stale_reasons.empty())
      std::printf("kernel cache %s is stale: %s\n", printable(short_name(*j.info)).c_str(),
                  printable(join(j.stale_reasons, "; ")).c_str());
  }
  std::printf("%zu kernel cache%s in %s, %zu stale, %zu damaged (judged against %s)\n", caches.size(),
              caches.size() == 1 ? "" : "s", printable(shown_store(o)).c_str(), stale, damaged, env.basis.c_str());
  if (stale > 0)
    std::printf("(a stale kernel cache is never read: it is machine code for another GPU, driver or library; "
                "`kiln plans gc --stale` drops it)\n");
  if (damaged > 0)
    std::printf("(a damaged kernel cache is never read: `kiln plans verify` reports it, `kiln plans gc` drops it)\n");
  return Status::ok();
}

}  // namespace kiln::cli::plans
