// kiln plans show (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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

Status run_show(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/true));
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store->list(filter_of(o)));
  if (plans.empty())
    return not_found("no plan matches structure '" + o.structure + "'" +
                     (o.shape.empty() ? "" : " shape '" + o.shape + "'"));
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const PlanSummary& p : plans) {
    StatusOr<PlanRecord> full = store->read(p.record.structure_sig, p.record.shape_key, p.record.fingerprint_key());
    nlohmann::ordered_json j = record_json(p.record, p.plan_size);
    if (full.is_ok()) {
      j["plan_bytes_xxh128"] = stable_hash128_hex(full->plan_bytes);
      std::string sum = compute_record_checksum(*full);
      j["checksum_ok"] = sum == full->checksum;
    } else {
      j["error"] = full.status().message();
    }
    arr.push_back(j);
  }
  std::printf(
      "%s\n",
      (arr.size() == 1 ? arr[0] : arr).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return Status::ok();
}

}  // namespace kiln::cli::plans
