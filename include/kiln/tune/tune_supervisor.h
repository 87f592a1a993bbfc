// kiln/tune/tune_supervisor.h: a tuning that survives a crashing candidate (issue 11, item 6). cuDNN has
// crashed inside plan creation for some shapes; a segfault must not lose the run. The candidates are
// built, checked and timed in a worker process (for `kiln tune`: the kiln binary itself, `kiln
// tune-worker`, started fresh: a CUDA context does not survive fork) that reports each step on a pipe
// (TuneEvent, one JSON line each). When the worker dies by a signal, the supervisor knows what it was
// doing: the one candidate in progress is Failed ("crashed: signal 11 (SIGSEGV) while building"), and a
// new worker goes on with the candidates not yet settled. When several builds were in flight, the new
// worker runs without the pipeline (one candidate built and run at a time) so that the next crash names
// exactly one. The winner is chosen from the merged results with the tuner's own rules.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/tune/tuner.h"

namespace kiln {

// What one worker is asked to do: the candidates already settled (skipped), whether to pipeline, and the
// time left of the budget (0: none).
struct WorkerRequest {
  std::vector<std::string> skip;
  bool serial = false;
  double time_budget_s = 0;
  int attempt = 0;
};

// A started worker: its process id and the read end of its event pipe (owned by the supervisor after
// spawn returns: it closes it).
struct WorkerProcess {
  pid_t pid = -1;
  int events_fd = -1;
};
using SpawnWorker = std::function<StatusOr<WorkerProcess>(const WorkerRequest&)>;

// Runs the tuning in workers from `spawn` until every candidate is settled, a worker fails without a
// candidate to blame (its exit status becomes the error), the budget runs out, options.cancel is set
// (the worker gets SIGTERM, finishes its candidate and reports), or `max_restarts` workers have
// crashed (the rest are NotVerified). Uses options' winner, incumbent, progress, cancel and budget.
StatusOr<TuneResult> tune_supervised(const SpawnWorker& spawn, const std::string& graph_name,
                                     const TuneOptions& options, int max_restarts = 8);

// The worker's side: runs tune_with_backend on `backend` for `request`, writing every event as one JSON
// line to `events_fd` (plans included). The caller exits with the returned status' exit code.
Status run_tune_worker(TuneBackend& backend, const std::string& graph_name, TuneOptions options,
                       const WorkerRequest& request, int events_fd);

// A worker that fails before run_tune_worker (a bad request, no device) reports it with this, so that
// the supervisor returns the same Status (and `kiln tune` the same exit code) as an in-process tune.
void write_worker_error(int events_fd, const Status& status);

// Test hook for the crash test: a backend that raises `sig` in this process when it builds (phase
// "build") or runs (phase "run") the candidate `identity`, and otherwise forwards to `inner`.
std::unique_ptr<TuneBackend> crash_injecting_backend(std::unique_ptr<TuneBackend> inner, std::string identity,
                                                     std::string phase, int sig);

// The options a worker needs, as the JSON its request carries (the winner rule, incumbent, progress and
// cancel stay with the supervisor), and back: InvalidArgument naming what is missing or malformed.
std::string tune_worker_options_to_json(const TuneOptions& options);
StatusOr<TuneOptions> tune_worker_options_from_json(const std::string& text);

// One event as a JSON line (no newline) and back.
std::string tune_event_to_json(const TuneEvent& event);
StatusOr<TuneEvent> tune_event_from_json(const std::string& line);

}  // namespace kiln
