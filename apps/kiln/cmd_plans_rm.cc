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
#include "kiln/deep_verify.h"
#include "kiln/env_policy.h"
#include "kiln/hash.h"
#include "kiln/lower.h"
#include "kiln/plan_bridge.h"
#include "kiln/plan_store.h"
#include "kiln/retune.h"
#include "kiln/tune_policy.h"

#include "plans.h"

namespace kiln::cli::plans {

Status run_rm(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(int64_t n, store->remove(filter_of(o), o.all));
  std::printf("removed %" PRId64 " plan%s\n", n, n == 1 ? "" : "s");
  return Status::ok();
}

}  // namespace kiln::cli::plans
