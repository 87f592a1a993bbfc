// kiln plans retune (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
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
#include "tune_isolation.h"
#include "kiln/core/hash.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/workshop.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

namespace {

std::atomic<bool> g_retune_interrupted{false};
extern "C" void on_retune_sigint(int) {
  g_retune_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

}  // namespace

Status run_retune(const PlansOptions& o) {
  StatusOr<RolloutPolicy> rollout = parse_rollout_policy(o.rollout);
  if (!rollout.is_ok()) return rollout.status().with_context("--rollout");
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("plans retune tunes each queued graph on this machine's GPU, and there is none: " +
                       env.device_status.message());
  store.reset();  // checked above; the Planner holds its own connections
  PlannerOptions po = PlannerOptions::offline(o.store).with_store(o.store, /*writable=*/true);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(po));
  RetuneOptions ro;  // its `current`: the Planner's environment
  ro.budget_s = o.budget_s;
  ro.tune.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  ro.tune.top_k = o.top_k;
  ro.tune.budget.exhaustive = o.exhaustive;
  if (o.compile_first > 0) ro.tune.budget.first = o.compile_first;
  if (o.compile_patience > 0) ro.tune.budget.patience = o.compile_patience;
  ro.tune.build_helpers = cli_build_helpers(o.build_helpers);
  ro.rollout = *rollout;
  ro.cancel = &g_retune_interrupted;
  ro.on_row = [&](const RetuneRowReport& r) {
    if (o.json) return;
    std::string key = r.entry.structure_sig.substr(0, 12) + (r.entry.shape_key.empty() ? "" : "/" + r.entry.shape_key);
    std::string line = std::string(retune_outcome_name(r.outcome)) + "  " + key + " '" + r.entry.graph_name + "'";
    if (r.outcome == RetuneOutcome::kTuned || r.outcome == RetuneOutcome::kAlreadyTuned) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": %s %.4f ms %s", r.winner.c_str(), r.median_ms, disposition_name(r.verdict));
      line += buf;
    }
    if (r.outcome != RetuneOutcome::kTuned && !r.message.empty()) line += ": " + r.message;
    char secs[32];
    std::snprintf(secs, sizeof secs, " (%.1f s)", r.seconds);
    if (r.outcome == RetuneOutcome::kTuned || r.outcome == RetuneOutcome::kFailed) line += secs;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  g_retune_interrupted = false;
  std::signal(SIGINT, on_retune_sigint);
  StatusOr<RetuneReport> rep = planner->workshop().retune_queued(ro);
  std::signal(SIGINT, SIG_DFL);
  if (!rep.is_ok()) return rep.status();
  if (o.json) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const RetuneRowReport& r : rep->rows)
      rows.push_back({{"structure_sig", r.entry.structure_sig},
                      {"shape_key", r.entry.shape_key},
                      {"fingerprint_key", r.entry.fingerprint_key},
                      {"graph_name", r.entry.graph_name},
                      {"outcome", retune_outcome_name(r.outcome)},
                      {"message", r.message},
                      {"winner", r.winner},
                      {"state", r.outcome == RetuneOutcome::kTuned ? plan_state_name(r.state) : ""},
                      {"median_ms", r.median_ms},
                      {"verdict", disposition_name(r.verdict)},
                      {"seconds", r.seconds}});
    nlohmann::ordered_json j = {{"store", shown_store(o)},
                                {"tuned", rep->tuned},
                                {"already_tuned", rep->already_tuned},
                                {"failed", rep->failed},
                                {"other_environment", rep->other_environment},
                                {"not_reached", rep->not_reached},
                                {"budget_exhausted", rep->budget_exhausted},
                                {"cancelled", rep->cancelled},
                                {"rows", rows}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::printf("re-tuned %" PRId64 " of %zu queued (%" PRId64 " already tuned, %" PRId64 " failed, %" PRId64
                " for other environments, %" PRId64 " not reached%s) in %s\n",
                rep->tuned, rep->rows.size(), rep->already_tuned, rep->failed, rep->other_environment, rep->not_reached,
                rep->budget_exhausted ? ": the time budget ran out" : "", printable(shown_store(o)).c_str());
  }
  if (rep->cancelled) return cancelled("interrupted: re-tuned plans were stored, the rest stay queued");
  if (rep->failed > 0)
    return check_failed(std::to_string(rep->failed) + " queued re-tune" + (rep->failed == 1 ? "" : "s") +
                        " failed (kept in the queue; `kiln plans queue` lists them)");
  return Status::ok();
}

}  // namespace kiln::cli::plans
