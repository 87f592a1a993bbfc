// kiln plans export and import (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

Status run_export(const PlansOptions& given) {
  // --fingerprint as ls reads it: hex digits (refused otherwise, before anything is written), a unique prefix
  // of a key standing for the whole key.
  if (!given.fingerprint.empty()) KILN_RETURN_IF_ERROR(fingerprint_prefix_text(given.fingerprint).status());
  KILN_ASSIGN_OR_RETURN(auto store, open_store(given, true, /*read_only=*/true));
  PlansOptions o = given;
  KILN_ASSIGN_OR_RETURN(o.fingerprint, resolve_fingerprint_key(given.fingerprint, *store));
  ExportOptions eo;
  eo.filter = filter_of(o);
  eo.overwrite = o.force;
  KILN_ASSIGN_OR_RETURN(ExportReport rep, store->export_bundle(o.file, eo));
  std::printf("exported %" PRId64 " plan%s (%zu environment%s, %" PRId64 " graph spec%s) to %s\n", rep.records,
              rep.records == 1 ? "" : "s", rep.fingerprint_keys.size(), rep.fingerprint_keys.size() == 1 ? "" : "s",
              rep.graph_specs, rep.graph_specs == 1 ? "" : "s", o.file.c_str());
  if (rep.fusion_records > 0)
    std::printf("with %" PRId64 " fusion decision%s (keys that run as an unfused chain; their parts' plans included)\n",
                rep.fusion_records, rep.fusion_records == 1 ? "" : "s");
  return Status::ok();
}

Status run_import(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, false));
  ImportOptions io;
  if (o.check_env) {
    EnvReport env = collect_environment(0);
    if (!env.device_status.is_ok())
      return unavailable("import --check-env needs this machine's GPU: " + env.device_status.message());
    io.current = env.fingerprint;
  }
  if (!o.specs.empty() && !o.deep) return invalid_argument("import: --spec gives the graphs for --deep; add --deep");
  std::unique_ptr<DeepPlanVerifier> deep;
  if (o.deep) {
    KILN_ASSIGN_OR_RETURN(deep, make_deep_verifier(o, *store, "import"));
    io.validator = deep->validator();
  }
  KILN_ASSIGN_OR_RETURN(ImportReport rep, store->import_bundle(o.file, io));
  std::printf("imported %" PRId64 ", replaced %" PRId64 " older, kept %" PRId64 " newer, %" PRId64
              " unchanged, skipped %" PRId64 " for another environment; %" PRId64 " graph spec%s added\n",
              rep.imported, rep.replaced, rep.kept_newer, rep.unchanged, rep.skipped_stale, rep.graph_specs,
              rep.graph_specs == 1 ? "" : "s");
  if (rep.skipped_decided > 0)
    std::printf("skipped %" PRId64 " plan%s this store rejected or retired for its key (docs/rollout.md; 'kiln plans "
                "promote' brings one back)\n",
                rep.skipped_decided, rep.skipped_decided == 1 ? "" : "s");
  if (rep.fusion_records > 0)
    std::printf("%" PRId64 " fusion decision%s added or replaced (keys that run as an unfused chain)\n",
                rep.fusion_records, rep.fusion_records == 1 ? "" : "s");
  if (deep) {
    size_t checked = 0;
    for (const DeepVerifyRow& r : deep->rows()) checked += r.checked ? 1 : 0;
    std::printf("deep-checked %zu of %zu plans on this GPU (the others: no graph, pass --spec, or another "
                "environment)\n",
                checked, deep->rows().size());
  }
  return Status::ok();
}

}  // namespace kiln::cli::plans
