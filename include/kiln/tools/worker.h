// kiln/tools/worker.h: `kiln worker`, one per GPU of a fleet (docs/fleet.md). It claims the re-tune queue's
// rows of its own environment one at a time under a lease (PlanStore::claim_retune), keeps the lease alive
// from a second thread while it tunes (retune_one: the tuner's supervised candidates, budgets and numerics
// gate), stores the winner with its verdict, and ends the claim: done, failed (retried with backoff, then
// dead-lettered), or released when it is asked to stop (the job goes back to the queue at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/plan_store.h"

namespace kiln {

struct WorkerOptions {
  std::string name;          // who claims, as the lease and the log show it; default "user@host pid N"
  int64_t lease_s = 120;     // a claim not renewed for this long is taken by another worker
  double heartbeat_s = 0;    // how often the lease is renewed; 0: a third of lease_s
  int64_t max_jobs = 0;      // stop after this many claims; 0: no limit
  bool drain = false;        // stop when nothing of this environment is claimable (else wait for work)
  double poll_s = 5;         // how long to wait before asking again when there is nothing to do
  int64_t max_attempts = 3;  // a job that failed this many times is dead-lettered
  int64_t backoff_s = 30;    // a failed job waits backoff_s * 2^(attempt-1) before its next claim
  TuneOptions tune;          // per job (its time_budget_s included)
  RolloutPolicy rollout = RolloutPolicy::kImmediate;  // how a winner becomes active (docs/rollout.md "Policies")
  std::optional<EnvFingerprint> current;              // this environment; default collect_environment() (needs a GPU)
  const std::atomic<bool>* stop = nullptr;  // set (SIGTERM, SIGINT): the job in hand is released, the worker ends
  std::function<void(const struct WorkerJobReport&)> on_job;  // after each job (progress)
};

struct WorkerJobReport {
  RetuneJob job;
  RetuneRowReport tuned;  // what retune_one found
  RetuneJobEnd end = RetuneJobEnd::kDone;
  std::string note;  // the lease lost mid-job, an end the store refused
};

struct WorkerReport {
  std::string worker, fingerprint_key;
  std::vector<WorkerJobReport> jobs;
  int64_t done = 0, failed = 0, released = 0, lost = 0;  // lost: the claim no longer held at its end
  bool stopped = false;                                  // asked to stop
  double seconds = 0;
};

// Runs the loop until max_jobs, drain's empty queue, or stop. Errors: Unavailable without a GPU (when
// `current` is not given), store errors that end the loop (a job's own failure is reported, not returned).
StatusOr<WorkerReport> run_worker(PlanStore& store, const WorkerOptions& options);

}  // namespace kiln
