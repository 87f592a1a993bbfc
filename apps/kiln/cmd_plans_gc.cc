// kiln plans gc (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cmath>
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

Status run_gc(const PlansOptions& o) {
  // A dry run only reads (PlanStore::gc finds the same rows without writing): opened read-only, it leaves the
  // file as it was, and it runs on a store this user cannot write.
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/o.dry_run));
  GcOptions g;
  g.drop_quarantine = !o.keep_quarantine;
  if (!o.target.empty() && !o.stale)
    return invalid_argument("gc: --target judges which records are stale; add --stale (without it nothing is judged)");
  if (std::isnan(o.older_than_days) || o.older_than_days > 1e6)
    return invalid_argument("--older-than must be a number of days from 0 to 1000000, got " +
                            std::to_string(o.older_than_days));
  if (o.older_than_days >= 0)
    g.older_than = static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(o.older_than_days * 86400);
  if (o.stale) {
    KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
    if (!env.device_judged)
      return unavailable("gc --stale compares plans with this machine's GPU, and there is none: name the "
                         "device with --target PROFILE (e.g. profiles/h200.json)");
    g.current = env.fingerprint;
    g.policy = env.policy;
    g.kernel_cache_judged = env.kernel_cache_judged;
  }
  g.dry_run = o.dry_run;
  KILN_ASSIGN_OR_RETURN(GcReport rep, store->gc(g));
  const bool dry = rep.dry_run;
  std::printf("%s %" PRId64 " stale, %" PRId64 " old, %" PRId64 " corrupt plan%s; %s %" PRId64
              " quarantined; %s %" PRId64 " unused graph spec%s\n",
              dry ? "would remove" : "removed", rep.stale_removed, rep.old_removed, rep.corrupt_removed,
              rep.corrupt_removed == 1 ? "" : "s", dry ? "would clear" : "cleared", rep.quarantine_removed,
              dry ? "would drop" : "dropped", rep.graph_specs_removed, rep.graph_specs_removed == 1 ? "" : "s");
  if (rep.fusion_records_removed > 0)
    std::printf("%s %" PRId64 " fusion decision%s that could not serve any more (a part's plan gone, or damaged)\n",
                dry ? "would drop" : "dropped", rep.fusion_records_removed, rep.fusion_records_removed == 1 ? "" : "s");
  // Kernel caches: each one by name and why, then the counts.
  for (const KernelCacheRemoval& k : rep.kernel_caches_removed) {
    const std::string graph = k.graph_name.empty() ? "" : " (" + k.graph_name + ")";
    std::printf("%s kernel cache %s%s: %s\n", dry ? "would remove" : "removed",
                printable(kernel_cache_display_name(k.structure_sig, k.fingerprint_key, k.rowid)).c_str(),
                printable(graph).c_str(), printable(k.why).c_str());
  }
  const int64_t caches =
      rep.kernel_caches_stale_removed + rep.kernel_caches_old_removed + rep.kernel_caches_corrupt_removed;
  if (caches > 0)
    std::printf("%s %" PRId64 " kernel cache%s: %" PRId64 " kept for another environment, %" PRId64 " old, %" PRId64
                " corrupt\n",
                dry ? "would remove" : "removed", caches, caches == 1 ? "" : "s", rep.kernel_caches_stale_removed,
                rep.kernel_caches_old_removed, rep.kernel_caches_corrupt_removed);
  if (dry) std::printf("dry run: nothing was removed\n");
  return Status::ok();
}

}  // namespace kiln::cli::plans
