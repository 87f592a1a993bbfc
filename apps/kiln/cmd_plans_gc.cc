// kiln plans gc (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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
#include "kiln/runtime/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

Status run_gc(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  GcOptions g;
  g.drop_quarantine = !o.keep_quarantine;
  if (o.older_than_days >= 0)
    g.older_than = static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(o.older_than_days * 86400);
  if (o.stale) {
    KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
    if (!env.device_judged)
      return unavailable("gc --stale compares plans with this machine's GPU, and there is none: name the "
                         "device with --target PROFILE (e.g. profiles/h200.json)");
    g.current = env.fingerprint;
    g.policy = env.policy;
  }
  KILN_ASSIGN_OR_RETURN(GcReport rep, store->gc(g));
  std::printf("removed %" PRId64 " stale, %" PRId64 " old, %" PRId64 " corrupt plan%s; cleared %" PRId64
              " quarantined; dropped %" PRId64 " unused graph spec%s\n",
              rep.stale_removed, rep.old_removed, rep.corrupt_removed, rep.corrupt_removed == 1 ? "" : "s",
              rep.quarantine_removed, rep.graph_specs_removed, rep.graph_specs_removed == 1 ? "" : "s");
  if (rep.fusion_records_removed > 0)
    std::printf("dropped %" PRId64
                " fusion decision%s that could not serve any more (a part's plan gone, or damaged)\n",
                rep.fusion_records_removed, rep.fusion_records_removed == 1 ? "" : "s");
  return Status::ok();
}

}  // namespace kiln::cli::plans
