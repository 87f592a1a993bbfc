// kiln worker (docs/fleet.md): one per GPU; takes this environment's queued re-tunes under a lease, tunes
// them, stores the winners, and says what it did (kiln/tools/worker.h).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "tune_isolation.h"
#include "kiln/core/read_file.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"
#include "kiln/tools/worker.h"
#include "kiln/tune/tune_policy.h"

namespace kiln::cli {

namespace {

struct WorkerCliOptions {
  std::string store;
  std::string name;
  bool once = false;
  int64_t max_jobs = 0;
  bool drain = false;
  bool json = false;
  int64_t lease_s = 120;
  double poll_s = 5;
  int64_t max_attempts = 3;
  int64_t backoff_s = 30;
  double job_budget_s = 300;
  double candidate_budget_ms = 100;
  int top_k = 0;
  bool exhaustive = false;  // every runtime-compiled candidate (no candidate budget)
  int compile_first = 0;    // the candidate budget's first and patience (0: its defaults)
  int compile_patience = 0;
  int build_helpers = -1;             // --build-helpers (-1: the machine's default)
  std::string rollout = "immediate";  // how a winner replaces an active plan (docs/rollout.md)
  std::string environment_json;       // tests: this environment instead of the GPU's
};

std::atomic<bool> g_fleet_worker_stop{false};
extern "C" void on_fleet_worker_signal(int) { g_fleet_worker_stop = true; }

std::string key_of(const RetuneQueueEntry& e) {
  return e.structure_sig.substr(0, 12) + (e.shape_key.empty() ? "" : "/" + e.shape_key);
}

nlohmann::ordered_json job_json(const WorkerJobReport& j) {
  return {{"structure_sig", j.job.entry.structure_sig},
          {"shape_key", j.job.entry.shape_key},
          {"fingerprint_key", j.job.entry.fingerprint_key},
          {"graph_name", j.job.entry.graph_name},
          {"attempt", j.job.attempt},
          {"end", enum_name(kRetuneJobEndNames, j.end)},
          {"outcome", retune_outcome_name(j.tuned.outcome)},
          {"winner", j.tuned.winner},
          {"state", j.tuned.outcome == RetuneOutcome::kTuned ? plan_state_name(j.tuned.state) : ""},
          {"median_ms", j.tuned.median_ms},
          {"verdict", disposition_name(j.tuned.verdict)},
          {"message", j.tuned.message},
          {"note", j.note},
          {"seconds", j.tuned.seconds}};
}

// Bounds the flags' checks leave open: times that would overflow a unix time, and a poll that would hammer the store.
constexpr int64_t kMaxLeaseS = 7 * 86400, kMaxBackoffS = 30 * 86400;
constexpr double kMinPollS = 0.05, kMaxPollS = 3600;

Status check_worker_bounds(const WorkerCliOptions& o) {
  if (o.lease_s > kMaxLeaseS)
    return invalid_argument("--lease must be at most " + std::to_string(kMaxLeaseS) + " seconds (a week), got " +
                            std::to_string(o.lease_s));
  if (o.backoff_s > kMaxBackoffS)
    return invalid_argument("--backoff must be at most " + std::to_string(kMaxBackoffS) + " seconds (30 days), got " +
                            std::to_string(o.backoff_s));
  if (!(o.poll_s >= kMinPollS && o.poll_s <= kMaxPollS)) {
    char got[64];
    std::snprintf(got, sizeof got, "%g", o.poll_s);
    return invalid_argument("--poll must be 0.05 to " + std::to_string(static_cast<int64_t>(kMaxPollS)) +
                            " seconds, got " + got);
  }
  return Status::ok();
}

Status run_worker_cli(const WorkerCliOptions& o) {
  KILN_RETURN_IF_ERROR(check_worker_bounds(o));
  StatusOr<RolloutPolicy> rollout = parse_rollout_policy(o.rollout);
  if (!rollout.is_ok()) return rollout.status().with_context("--rollout");
  const std::string store_path = o.store.empty() ? default_store_path() : o.store;
  WorkerOptions wo;
  if (!o.environment_json.empty()) {
    KILN_ASSIGN_OR_RETURN(wo.current, read_environment_json(o.environment_json));
  }
  // A worker takes jobs from a store that exists: a mistyped path must not become a new, empty store it waits on.
  if (!is_server_location(store_path)) {
    KILN_ASSIGN_OR_RETURN(bool exists, path_exists(store_path, "plan store"));
    if (!exists)
      return not_found("no plan store at " + store_path + " (a worker takes its jobs from an existing store)");
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PlanStore> store, PlanStore::open(store_path));
  wo.name = o.name;
  wo.max_jobs = o.once ? 1 : o.max_jobs;
  wo.drain = o.drain || o.once;
  wo.lease_s = o.lease_s;
  wo.poll_s = o.poll_s;
  wo.max_attempts = o.max_attempts;
  wo.backoff_s = o.backoff_s;
  wo.tune.time_budget_s = o.job_budget_s;
  wo.tune.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  wo.tune.top_k = o.top_k;
  wo.tune.budget.exhaustive = o.exhaustive;
  if (o.compile_first > 0) wo.tune.budget.first = o.compile_first;
  if (o.compile_patience > 0) wo.tune.budget.patience = o.compile_patience;
  wo.tune.build_helpers = cli_build_helpers(o.build_helpers);
  wo.rollout = *rollout;
  wo.stop = &g_fleet_worker_stop;
  wo.on_job = [&](const WorkerJobReport& j) {
    if (o.json) return;
    std::string line = std::string(enum_name(kRetuneJobEndNames, j.end)) + "  " + key_of(j.job.entry) + " '" +
                       printable(j.job.entry.graph_name) + "' (attempt " + std::to_string(j.job.attempt) + ")";
    if (!j.tuned.winner.empty()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": %s %.4f ms %s", j.tuned.winner.c_str(), j.tuned.median_ms,
                    disposition_name(j.tuned.verdict));
      line += buf;
    }
    if (!j.tuned.message.empty()) line += ": " + j.tuned.message;
    if (!j.note.empty()) line += " [" + j.note + "]";
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  g_fleet_worker_stop = false;
  std::signal(SIGTERM, on_fleet_worker_signal);
  std::signal(SIGINT, on_fleet_worker_signal);
  StatusOr<WorkerReport> rep = run_worker(*store, wo);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  if (!rep.is_ok()) return rep.status();
  if (o.json) {
    nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
    for (const WorkerJobReport& j : rep->jobs) jobs.push_back(job_json(j));
    nlohmann::ordered_json j = {{"store", store->path()},
                                {"worker", rep->worker},
                                {"fingerprint_key", rep->fingerprint_key},
                                {"done", rep->done},
                                {"failed", rep->failed},
                                {"released", rep->released},
                                {"lost", rep->lost},
                                {"stopped", rep->stopped},
                                {"seconds", rep->seconds},
                                {"jobs", jobs}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::printf("worker %s: %zu job%s (%" PRId64 " done, %" PRId64 " failed, %" PRId64 " released, %" PRId64
                " lost) for environment %s in %s, %.1f s%s\n",
                rep->worker.c_str(), rep->jobs.size(), rep->jobs.size() == 1 ? "" : "s", rep->done, rep->failed,
                rep->released, rep->lost, rep->fingerprint_key.substr(0, 12).c_str(), store->path().c_str(),
                rep->seconds, rep->stopped ? " (stopped: the job in hand went back to the queue)" : "");
  }
  if (rep->stopped) return Status::ok();  // a clean stop (SIGTERM) is the normal end of a service
  if (rep->failed > 0)
    return check_failed(std::to_string(rep->failed) + " job" + (rep->failed == 1 ? "" : "s") +
                        " failed (retried later, or dead-lettered: `kiln plans queue` lists them)");
  return Status::ok();
}

void add_worker(CLI::App& app, Runner* run) {
  auto o = std::make_shared<WorkerCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "worker", "Take this GPU's queued re-tunes from the plan store under a lease, tune them, store the winners");
  sub->add_option("--store", o->store, "Plan store: a SQLite file or postgresql://... (default: $KILN_STORE)")
      ->check(non_empty_path());
  sub->add_option("--name", o->name, "This worker's name in leases and the job log (default: host pid N)");
  sub->add_flag("--once", o->once, "Take at most one job, then exit");
  sub->add_option("--max-jobs", o->max_jobs, "Stop after this many jobs (default: no limit)")
      ->check(whole_number_at_least(1));
  sub->add_flag("--drain", o->drain, "Exit when nothing of this environment is left to claim (default: wait)");
  sub->add_flag("--json", o->json, "Machine-readable report of what it did");
  sub->add_option("--lease", o->lease_s, "Seconds a claim holds without a heartbeat (default 120)")
      ->check(whole_number_at_least(2));
  sub->add_option("--poll", o->poll_s, "Seconds between asks when there is no work (default 5)")
      ->check(positive_number());
  sub->add_option("--max-attempts", o->max_attempts, "Dead-letter a job after this many failures (default 3)")
      ->check(whole_number_at_least(1));
  sub->add_option("--backoff", o->backoff_s,
                  "Seconds before a failed job's first retry, doubled each time (default 30)")
      ->check(whole_number_at_least(0));
  sub->add_option("--job-budget", o->job_budget_s, "Seconds of tuning per job (default 300)")->check(positive_number());
  sub->add_option("--candidate-budget-ms", o->candidate_budget_ms, "Sampling budget per candidate (default 100)")
      ->check(positive_number());
  sub->add_option("--top-k", o->top_k, "Only the heuristic's first k configurations (default: all)")
      ->check(whole_number_at_least(0));
  add_candidate_budget_flags(sub, &o->exhaustive, &o->compile_first, &o->compile_patience);
  add_build_helpers_flag(sub, &o->build_helpers);
  sub->add_option("--rollout", o->rollout,
                  "How a winner replaces an active plan of another configuration: immediate, verify (a candidate "
                  "until 'kiln plans promote') or shadow (sampled beside it by serving Planners); docs/rollout.md")
      ->capture_default_str();
  sub->add_option("--environment-json", o->environment_json,
                  "Testing: claim as the environment of this fingerprint JSON, not this machine's GPU")
      ->check(non_empty_path())
      ->group("");  // hidden: tests only
  sub->callback([run, o] { *run = [o] { return run_worker_cli(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("worker", add_worker);

}  // namespace kiln::cli
