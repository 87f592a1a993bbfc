// kiln worker's loop (kiln/tools/worker.h).
#include "kiln/tools/worker.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kiln/core/log.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

// Renews a claim's lease every `every_s` until stopped; remembers a renewal the store refused (lease lost).
class Heartbeat {
 public:
  Heartbeat(PlanStore& store, const RetuneJob& job, int64_t lease_s, double every_s)
      : thread_([this, &store, &job, lease_s, every_s] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, std::chrono::duration<double>(every_s), [this] { return done_; })) {
            lock.unlock();
            Status s = store.heartbeat_retune(job, lease_s);
            lock.lock();
            if (!s.is_ok()) {
              problem_ = s.message();
              KILN_LOG(kWarn, "worker: heartbeat: " << problem_);
              if (s.code() == StatusCode::kFailedPrecondition) return;  // lost: nothing more to renew
            }
          }
        }) {}
  ~Heartbeat() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::string problem() {
    std::lock_guard<std::mutex> lock(mu_);
    return problem_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string problem_;
  std::thread thread_;  // last: started once the rest is made
};

// How a tuned row ends its claim.
RetuneJobEnd end_for(const RetuneRowReport& r, PlanStore& store) {
  switch (r.outcome) {
    case RetuneOutcome::kTuned: {
      // A tuning the time budget cut short is stored untuned and its row stays queued: tried again later.
      StatusOr<std::vector<RetuneQueueEntry>> q = store.list_retune_queue(r.entry.fingerprint_key);
      if (q.is_ok())
        for (const RetuneQueueEntry& e : *q)
          if (e.structure_sig == r.entry.structure_sig && e.shape_key == r.entry.shape_key)
            return RetuneJobEnd::kFailed;
      return RetuneJobEnd::kDone;
    }
    case RetuneOutcome::kAlreadyTuned: return RetuneJobEnd::kDone;
    case RetuneOutcome::kNotReached: return RetuneJobEnd::kReleased;
    case RetuneOutcome::kFailed:
    case RetuneOutcome::kOtherEnvironment: return RetuneJobEnd::kFailed;
  }
  return RetuneJobEnd::kFailed;
}

std::string default_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  return std::string(host[0] ? host : "unknown") + " pid " + std::to_string(::getpid());
}

bool stopping(const WorkerOptions& o) { return o.stop && o.stop->load(); }

// Waits up to `s` seconds, returning early when asked to stop.
void idle(const WorkerOptions& o, double s) {
  auto until = Clock::now() + std::chrono::duration<double>(s);
  while (Clock::now() < until && !stopping(o)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// One claimed job: tuned under a heartbeat, then its claim ended.
WorkerJobReport work_on(PlanStore& store, const EnvFingerprint& current, const RetuneJob& job, const WorkerOptions& o) {
  WorkerJobReport rep;
  rep.job = job;
  TuneOptions to = o.tune;
  if (o.stop) to.cancel = o.stop;
  {
    const double every = o.heartbeat_s > 0 ? o.heartbeat_s : std::max(1.0, static_cast<double>(o.lease_s) / 3);
    Heartbeat beat(store, job, o.lease_s, every);
    rep.tuned = retune_one(store, current, job.entry, to, o.rollout);
    beat.stop();
    rep.note = beat.problem();
  }
  rep.end = end_for(rep.tuned, store);
  RetuneJobFinish fin;
  fin.end = rep.end;
  fin.message = rep.tuned.message.empty() ? retune_outcome_name(rep.tuned.outcome) : rep.tuned.message;
  if (rep.end == RetuneJobEnd::kReleased) fin.message = "released: the worker was asked to stop";
  fin.max_attempts = o.max_attempts;
  fin.backoff_s = o.backoff_s;
  Status s = store.finish_retune(job, fin);
  if (!s.is_ok()) rep.note += (rep.note.empty() ? "" : "; ") + s.message();
  return rep;
}

}  // namespace

StatusOr<WorkerReport> run_worker(PlanStore& store, const WorkerOptions& options) {
  if (store.read_only())
    return failed_precondition("plan store " + store.path() + " was opened read-only: a worker stores its winners");
  KILN_ASSIGN_OR_RETURN(EnvFingerprint current,
                        this_machine_environment(options.current, "a worker tunes on this machine's GPU"));
  WorkerReport rep;
  rep.worker = options.name.empty() ? default_name() : options.name;
  rep.fingerprint_key = fingerprint_key(current);
  RetuneLeaseOptions lease;
  lease.worker = rep.worker;
  lease.lease_s = options.lease_s;
  auto t0 = Clock::now();
  while (!stopping(options) && (options.max_jobs <= 0 || static_cast<int64_t>(rep.jobs.size()) < options.max_jobs)) {
    KILN_ASSIGN_OR_RETURN(std::optional<RetuneJob> job, store.claim_retune(rep.fingerprint_key, lease));
    if (!job) {
      if (options.drain) break;
      idle(options, options.poll_s);
      continue;
    }
    WorkerJobReport jr = work_on(store, current, *job, options);
    if (jr.note.find("lease lost") != std::string::npos) ++rep.lost;
    else if (jr.end == RetuneJobEnd::kDone) ++rep.done;
    else if (jr.end == RetuneJobEnd::kFailed) ++rep.failed;
    else ++rep.released;
    if (options.on_job) options.on_job(jr);
    rep.jobs.push_back(std::move(jr));
  }
  rep.stopped = stopping(options);
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return rep;
}

}  // namespace kiln
