// The capture gate (kiln/cuda/capture_gate.h): one gate for the process, captures its shared side, synchronizing
// work its exclusive side, work preferred (a capture waits while work waits: captures cannot starve it); loads
// shared among themselves and exclusive of both (a capture waits while loads wait; loads wait while work waits).
#include "kiln/cuda/capture_gate.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "kiln/core/log.h"

namespace kiln {
namespace {

// How long synchronizing work waits for the captures in progress. A capture lasts as long as what it records is
// enqueued (microseconds to milliseconds); a wait this long means a capturing thread waits on Kiln's work (it
// obtains, under its capture, a plan another thread is building): the work goes on rather than deadlock, and
// may invalidate the captures still in progress (new ones wait for it).
constexpr auto kMaxWaitForCaptures = std::chrono::seconds(10);

struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int captures = 0;       // CaptureGuards holding it
  int work_waiting = 0;   // SynchronizingWork waiting for it
  bool working = false;   // a SynchronizingWork holds it
  int loading = 0;        // LoadingWork holding it (side by side)
  int loads_waiting = 0;  // LoadingWork waiting for it
};

Gate& gate() {
  static Gate* g = new Gate;  // never destroyed: holds may end during exit
  return *g;
}

// Waits (holding `lock`) until `free()`, then up to kMaxWaitForCaptures more for the captures in progress to end too.
// Past that it goes on once `free()` again (another hold that came meanwhile goes first; captures do not), logging
// that `what` may invalidate the captures still in progress.
template <class Free>
void wait_out_captures(Gate& g, std::unique_lock<std::mutex>& lock, const Free& free, const char* what) {
  g.cv.wait(lock, free);
  if (g.cv.wait_for(lock, kMaxWaitForCaptures, [&] { return free() && g.captures == 0; })) return;
  g.cv.wait(lock, free);
  if (g.captures > 0)
    KILN_LOG(kWarn, what << " went on after waiting 10 s for " << g.captures
                         << " CUDA graph capture(s) in progress to end: they may be invalidated");
}

// This thread's holds of each kind: a nested hold neither locks again nor waits for its own thread.
thread_local int captures_here = 0;
thread_local int work_here = 0;
thread_local int loads_here = 0;

}  // namespace

CaptureGuard::CaptureGuard() : held_(captures_here == 0 && work_here == 0 && loads_here == 0) {
  if (held_) {
    Gate& g = gate();
    std::unique_lock<std::mutex> lock(g.mu);
    g.cv.wait(lock, [&] { return !g.working && g.work_waiting == 0 && g.loading == 0 && g.loads_waiting == 0; });
    ++g.captures;
  }
  ++captures_here;
}

CaptureGuard::~CaptureGuard() {
  --captures_here;
  if (!held_) return;
  Gate& g = gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    --g.captures;
  }
  g.cv.notify_all();
}

SynchronizingWork::SynchronizingWork() {
  // Nested in this thread's own work, which holds the gate already; or in its own load, which keeps every capture
  // out as work does (waiting for the loads to end would wait for itself).
  if (work_here > 0 || loads_here > 0) {
    ++work_here;
    return;
  }
  if (captures_here > 0) {  // this thread holds a capture: running would invalidate every capture in progress
    refused_ = true;
    return;
  }
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  ++g.work_waiting;
  // One work at a time, however long the other takes, and none beside loads (which end on their own).
  wait_out_captures(
      g, lock, [&] { return !g.working && g.loading == 0; }, "device work");
  --g.work_waiting;
  g.working = true;
  held_ = true;
  ++work_here;
}

SynchronizingWork::~SynchronizingWork() {
  if (refused_) return;
  --work_here;
  if (!held_) return;
  Gate& g = gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.working = false;
  }
  g.cv.notify_all();
}

LoadingWork::LoadingWork() {
  if (work_here > 0 || loads_here > 0) {  // nested in this thread's own work or load: captures are out already
    ++loads_here;
    return;
  }
  if (captures_here > 0) {  // this thread holds a capture: loading modules now would break it
    refused_ = true;
    return;
  }
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mu);
  ++g.loads_waiting;
  // After any work in progress or waiting (work cannot be starved by a stream of loads), beside other loads.
  wait_out_captures(
      g, lock, [&] { return !g.working && g.work_waiting == 0; }, "a plan's load");
  --g.loads_waiting;
  ++g.loading;
  held_ = true;
  ++loads_here;
}

LoadingWork::~LoadingWork() {
  if (refused_) return;
  --loads_here;
  if (!held_) return;
  Gate& g = gate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    --g.loading;
  }
  g.cv.notify_all();
}

Status refused_under_capture(const std::string& what) {
  return failed_precondition(what +
                             " synchronizes the device, and this thread holds a kiln::CaptureGuard (a CUDA graph "
                             "capture): doing it would invalidate every capture in progress. Obtain plans before "
                             "the guard, or after it");
}

}  // namespace kiln
