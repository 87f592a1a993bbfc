// kiln plans rm (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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

Status run_rm(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  // --fingerprint may be the 12 digits `ls` shows (a unique prefix), as `ls` takes it (a hostile trial's "removed 0").
  PlansOptions whole = o;
  KILN_ASSIGN_OR_RETURN(whole.fingerprint, resolve_fingerprint_key(o.fingerprint, *store));
  KILN_ASSIGN_OR_RETURN(int64_t n, store->remove(filter_of(whole), o.all));
  std::printf("removed %" PRId64 " plan%s\n", n, n == 1 ? "" : "s");
  return Status::ok();
}

}  // namespace kiln::cli::plans
