// The `kiln plans` subcommands' shared options and helpers (cmd_plans.cc registers the subcommands, one
// file each: cmd_plans_<name>.cc). docs/store.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/core/printable.h"
#include "kiln/core/status.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kiln::cli::plans {

struct PlansOptions {
  std::string store;
  bool json = false;
  std::string structure;
  std::string shape;
  std::string fingerprint;
  bool tuned_only = false;
  bool all = false;
  bool quarantine = false;
  bool deep = false;
  bool stale = false;
  double older_than_days = -1;
  bool keep_quarantine = false;
  bool check_env = false;
  bool force = false;  // export: write over an existing bundle file
  std::string file;
  std::vector<std::string> specs;     // verify/import --deep: graphs of the records
  uint64_t seed = 1;                  // verify --deep: random inputs
  bool seed_given = false;            // --seed was on the command line (it means nothing without --deep)
  bool clear = false;                 // queue --clear
  double budget_s = 0;                // retune: whole run
  double candidate_budget_ms = 1000;  // retune: sampling per candidate
  int top_k = 0;                      // retune: only the heuristic's first k configurations
  bool exhaustive = false;            // retune: every runtime-compiled candidate (no candidate budget)
  int compile_first = 0;              // retune: the candidate budget's first and patience (0: its defaults)
  int compile_patience = 0;
  int build_helpers = -1;             // --build-helpers (-1: the machine's default)
  std::string rollout = "immediate";  // retune --rollout: how a winner replaces an active plan (docs/rollout.md)
  std::string target;                 // ls, gc --stale: judge against this device profile
  bool kernel_caches = false;         // ls --kernel-caches: list the kept kernel caches alone
  bool dry_run = false;               // gc --dry-run: say what would go, remove nothing
  std::string shapes_file;            // queue add --shapes: a recorded-shapes file
  int hottest = 0;                    // queue add --hottest: at most this many shapes per spec (0: all)
  std::string reason;                 // queue add, promote, reject, rollback --reason
  std::string config;                 // promote, reject --config: a plan's configuration
  std::string from_env, to_env;       // diff --from, --to: environment fingerprint keys (or prefixes)
  bool rerun = false;                 // diff --rerun: both configurations of every key re-run on this GPU
  std::string environment_json;       // queue add: testing, this environment instead of the GPU's
};

// What `ls` and `gc --stale` judge records against, under the default policy: a recorded device
// (--target PROFILE, with this build's libraries), else this machine's GPU, else, without a GPU, this
// build's libraries alone (cuDNN, frontend, CUDA runtime; the device fields are not judged).
struct JudgedAgainst {
  EnvFingerprint fingerprint;
  EnvPolicy policy;
  std::string basis;  // for people: "this GPU (NVIDIA H200)", ...
  bool device_judged = true;
  // What a kept kernel cache is judged on: everything against this GPU, all but the driver against a
  // profile, the libraries alone without either (kiln/store/kernel_cache_record.h).
  KernelCacheJudged kernel_cache_judged = KernelCacheJudged::kEverything;
};

ListFilter filter_of(const PlansOptions& o);
// For the listing subcommands (ls, queue): true when o.store does not exist, having said so ("[]" with
// --json, else "no plan store at ..."). A PostgreSQL location is never "no store": it is opened (and an unreachable
// server is its Unavailable error).
StatusOr<bool> said_no_store(const PlansOptions& o);
// The store at o.store; `must_exist`: NotFound for a missing file instead of creating one (a PostgreSQL location has
// no file: it is opened, its own errors said: Unavailable for a server that cannot be reached).
// `read_only`: for the commands that only read (ls, show, verify without --quarantine, export): the file is
// not touched (no schema added to an older store, no switch to WAL), and a store in a read-only place opens.
StatusOr<std::unique_ptr<PlanStore>> open_store(const PlansOptions& o, bool must_exist, bool read_only = false);
StatusOr<JudgedAgainst> judged_against(const PlansOptions& o);
// The fewest hex digits of an environment key that `ls --fingerprint` takes as a prefix (ls shows 12).
inline constexpr size_t kMinFingerprintPrefix = 6;
// `ls --fingerprint`'s text lowercased; InvalidArgument (exit 2) unless it is 6 to 32 hex digits.
StatusOr<std::string> fingerprint_prefix_text(const std::string& given, const char* option = "--fingerprint");
// `ls --fingerprint`'s key: "" when none was given; the whole key (lowercased) when `given` is one or is the
// prefix of exactly one key in the store (its plans' and kernel caches'); `given` itself when it begins none
// (it then lists nothing). InvalidArgument (exit 2) for anything but 6 to 32 hex digits, and for a prefix that
// begins several keys, naming them.
StatusOr<std::string> resolve_fingerprint_key(const std::string& given, PlanStore& store);
std::string age_of(int64_t created_at);
std::string ms_text(double ms, bool tuned);
nlohmann::ordered_json record_json(const PlanRecord& r, int64_t plan_size);
void print_table(const std::vector<std::vector<std::string>>& rows);
// "41 B", "3.2 KiB", "1.5 MiB".
std::string size_text(int64_t bytes);
// ls's kernel cache part (cmd_plans_ls_kernel_caches.cc): with `alone` (ls --kernel-caches) the whole output,
// text or JSON; else the section under the plans' text, printed only when some cache matches the filter.
Status print_kernel_caches(const PlansOptions& o, PlanStore& store, const JudgedAgainst& env, bool alone);
StatusOr<std::unique_ptr<DeepPlanVerifier>> make_deep_verifier(const PlansOptions& o, PlanStore& store,
                                                               const char* command);

// o.store as messages show it: a PostgreSQL location's password hidden (kiln/store/store_path.h).
inline std::string shown_store(const PlansOptions& o) { return shown_location(o.store); }

Status run_ls(const PlansOptions& o);
Status run_show(const PlansOptions& o);
Status run_rm(const PlansOptions& o);
Status run_verify(const PlansOptions& o);
Status run_gc(const PlansOptions& o);
Status run_export(const PlansOptions& o);
Status run_import(const PlansOptions& o);
Status run_queue(const PlansOptions& o);
Status run_queue_add(const PlansOptions& o);  // cmd_plans_queue_add.cc
Status run_retune(const PlansOptions& o);
// `kiln plans`' subcommand maker (cmd_plans.cc): a subcommand with --store, running `fn`.
using AddSubcommand = std::function<CLI::App*(const char* name, const char* help, Status (*fn)(const PlansOptions&))>;
// Registers history, candidates, promote, reject and rollback (cmd_plans_rollout.cc).
void add_rollout(const AddSubcommand& add, const std::function<void(CLI::App*, const char*)>& add_filter,
                 const std::shared_ptr<PlansOptions>& o);
Status run_history(const PlansOptions& o);     // cmd_plans_rollout.cc
Status run_candidates(const PlansOptions& o);  // cmd_plans_rollout.cc
Status run_promote(const PlansOptions& o);     // cmd_plans_rollout.cc
Status run_reject(const PlansOptions& o);      // cmd_plans_rollout.cc
Status run_rollback(const PlansOptions& o);    // cmd_plans_rollout.cc
Status run_diff(const PlansOptions& o);        // cmd_plans_diff.cc

}  // namespace kiln::cli::plans
