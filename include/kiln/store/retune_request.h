// kiln/store/retune_request.h: the re-tune queue's rows (docs/store.md "The re-tune queue"). A process that
// could not use a tuned plan (miss, stale or corrupt record) under the policy kHeuristicsAndQueue asks for one
// here; `kiln plans retune` (retune_queued() in kiln/runtime/retune.h) drains it on a machine of that
// environment. One row per (structure_sig, shape_key, fingerprint_key of the environment that wants the plan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/fingerprint.h"
#include <optional>
#include "kiln/core/status.h"

namespace kiln {

struct RetuneRequest {
  std::string structure_sig;
  std::string shape_key;       // may be empty (a graph with no dynamic dim)
  EnvFingerprint fingerprint;  // the environment that wants a tuned plan
  std::string graph_name;
  std::string spec_json;     // the graph as spec JSON (graph_to_spec_json): re-tunable without its file
  std::string reason;        // "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)"
  int64_t requested_at = 0;  // unix seconds; 0: now
  int64_t count = 1;         // requests this one stands for (a hot shape's served calls); < 1 counts as 1
  // Asked for by hand (`kiln plans queue add`): a dead-lettered job of this key becomes a new job. A Planner's
  // automatic requests leave a dead job dead (else a key that always fails would be retried forever).
  bool revive = false;
};

// Distinct reasons kept per queue row (the oldest are dropped), and the longest reason kept (longer ones are
// cut with "...").
inline constexpr size_t kRetuneReasonsKept = 8;
inline constexpr size_t kRetuneReasonMaxChars = 500;

struct RetuneQueueEntry {
  std::string structure_sig, shape_key, fingerprint_key;
  EnvFingerprint fingerprint;
  std::string graph_name;
  std::string spec_json;
  std::vector<std::string> reasons;  // distinct, in the order first seen
  int64_t request_count = 0;         // how many times it was asked for
  int64_t first_seen = 0;            // unix seconds
  int64_t last_seen = 0;
  std::string requested_by;  // user@host of the last request
  std::string problem;       // non-empty when a column did not read back (e.g. fingerprint JSON)
};

// ---- Leases: the queue as a fleet's job queue (docs/fleet.md) ----
// A worker (`kiln worker`, one per GPU) claims the oldest queued row of its own environment for a while (its
// lease), keeps the claim alive (heartbeat), and ends it: done (the plan is stored; the row is gone), failed
// (retried after a backoff, dead-lettered with the reason after max_attempts), or released (back to the queue,
// the attempt not counted: a worker stopping). A claim whose lease ran out (its worker died) is claimed again;
// the first worker's token then no longer holds, so a job is completed at most once.
struct RetuneLeaseOptions {
  std::string worker;     // who claims: "user@host/gpu0 pid 1234"
  int64_t lease_s = 120;  // how long the claim holds without a heartbeat
  int64_t now = 0;        // unix seconds; 0: now (tests set it)
};

struct RetuneJob {
  RetuneQueueEntry entry;
  std::string token;  // this claim; heartbeat and finish name it
  std::string worker;
  int64_t attempt = 0;  // 1 for the first claim of the row
  int64_t lease_expires_at = 0;
};

enum class RetuneJobEnd { kDone, kFailed, kReleased };
inline constexpr EnumName<RetuneJobEnd> kRetuneJobEndNames[] = {
    {RetuneJobEnd::kDone, "done"}, {RetuneJobEnd::kFailed, "failed"}, {RetuneJobEnd::kReleased, "released"}};

struct RetuneJobFinish {
  RetuneJobEnd end = RetuneJobEnd::kDone;
  std::string message;       // what the worker found (the winner, why it failed)
  int64_t max_attempts = 3;  // a failed job is dead-lettered at this many attempts
  int64_t backoff_s = 30;    // a failed job waits backoff_s * 2^(attempt-1) before it is claimed again
  int64_t now = 0;           // unix seconds; 0: now
};

// A queued row with its lease, for listings: state "queued" (free), "claimed" (a worker holds it; "expired"
// when its lease ran out), "retry" (failed, waiting for next_attempt_at), "dead" (dead-lettered: last_error
// says why; never claimed again until its lease row is removed).
struct RetuneJobState {
  RetuneQueueEntry entry;
  std::string state = "queued";
  std::string worker;
  int64_t attempts = 0, lease_expires_at = 0, next_attempt_at = 0;
  std::string last_error;
};

// One ended claim, as the job log keeps it (outcome "done", "failed", "dead", "released").
struct RetuneJobLogEntry {
  std::string token, structure_sig, shape_key, fingerprint_key, worker, outcome, message;
  int64_t attempt = 0, finished_at = 0;
};

// The re-tune queue and its leases: a fleet's job queue (docs/fleet.md). PlanStore implements it over its
// tables; one interface so that a worker or a Planner needs only this part of the store.
class RetuneQueue {
 public:
  // Adds a request, or counts a queued key again (count, last_seen, reason; spec and fingerprint replaced).
  // InvalidArgument for an empty signature or spec; FailedPrecondition (and a log line) for a read-only store.
  virtual StatusOr<RetuneQueueEntry> enqueue_retune(const RetuneRequest& request) = 0;
  // The queued rows (for one environment when fingerprint_key is non-empty), oldest request first.
  virtual StatusOr<std::vector<RetuneQueueEntry>> list_retune_queue(const std::string& fingerprint_key = "") = 0;
  // Removes one row; returns whether it was there.
  virtual StatusOr<bool> remove_from_retune_queue(const std::string& structure_sig, const std::string& shape_key,
                                                  const std::string& fingerprint_key) = 0;

  // Claims the oldest claimable row of the environment `fingerprint_key` (free, its lease expired, or its
  // retry due), or nullopt. PostgreSQL: SELECT ... FOR UPDATE SKIP LOCKED, so workers never wait on each other.
  virtual StatusOr<std::optional<RetuneJob>> claim_retune(const std::string& fingerprint_key,
                                                          const RetuneLeaseOptions& options) = 0;
  // Extends the claim's lease; FailedPrecondition ("lease lost") when the claim no longer holds.
  virtual Status heartbeat_retune(const RetuneJob& job, int64_t lease_s) = 0;
  // Ends the claim as `finish` says and logs it; FailedPrecondition ("lease lost") when it no longer holds
  // (another worker took the job after this one's lease ran out): nothing is changed then.
  virtual Status finish_retune(const RetuneJob& job, const RetuneJobFinish& finish) = 0;
  virtual StatusOr<std::vector<RetuneJobState>> list_retune_jobs(const std::string& fingerprint_key = "") = 0;
  virtual StatusOr<std::vector<RetuneJobLogEntry>> retune_job_log() = 0;  // oldest first

 protected:
  RetuneQueue() = default;
  ~RetuneQueue() = default;
};

}  // namespace kiln
