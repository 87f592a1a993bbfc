// The capture gate (kiln/cuda/capture_gate.h): one reader/writer lock for the process, captures the readers.
#include "kiln/cuda/capture_gate.h"

#include <chrono>
#include <shared_mutex>

#include "kiln/core/log.h"

namespace kiln {
namespace {

std::shared_timed_mutex& gate() {
  static std::shared_timed_mutex* g = new std::shared_timed_mutex;  // never destroyed: holds may end during exit
  return *g;
}

// How long synchronizing work waits for the captures in progress. A capture lasts as long as what it records
// is enqueued (microseconds to milliseconds); a wait this long means a capturing thread waits on this one
// (it obtains, under its capture, a plan this thread is building): the work goes on rather than deadlock,
// and may invalidate that capture.
constexpr auto kMaxWait = std::chrono::seconds(10);

// This thread's holds of the gate, of either kind: a nested hold (a capture inside a first-use check, a check
// started under a capture) neither locks again nor waits for itself.
thread_local int held_here = 0;

}  // namespace

CaptureGuard::CaptureGuard() : held_(held_here == 0) {
  if (held_) gate().lock_shared();
  ++held_here;
}

CaptureGuard::~CaptureGuard() {
  --held_here;
  if (held_) gate().unlock_shared();
}

SynchronizingWork::SynchronizingWork() : held_(held_here == 0) {
  if (held_ && !gate().try_lock_for(kMaxWait)) {
    held_ = false;
    KILN_LOG(kWarn, "device work went on after waiting 10 s for a CUDA graph capture in progress to end: that "
                    "capture may be invalidated");
  }
  ++held_here;
}

SynchronizingWork::~SynchronizingWork() {
  --held_here;
  if (held_) gate().unlock();
}

}  // namespace kiln
