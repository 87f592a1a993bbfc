// kiln/cuda/capture_gate.h: keeps Kiln's own device-synchronizing work apart from CUDA graph captures in
// one process. A call that synchronizes the whole device (cudaDeviceSynchronize, cudaFree) while another
// thread captures a stream ends that capture as invalidated (cudaErrorStreamCaptureInvalidated at
// cudaStreamEndCapture), whatever the capture's mode. Kiln's work of that kind (first-use checks, plan
// builds and warm-ups, on the caller's thread or a Planner's background thread) holds the gate alone
// (SynchronizingWork); every capture Kiln makes (capture_graph, so CapturedSequence and the tuner's graph
// timing) holds it shared, and so can an application's own capture (CaptureGuard). Each side waits for the
// other's holds to end: work waits for the captures in progress (at most 10 s, then goes on, logging it), a
// capture waits while work runs or waits (so captures cannot starve it). Loads of stored plans (LoadingWork) are a
// third kind: they exclude captures and work as work does, but not one another. Holds nest on one thread: a capture in
// this thread's work does not wait for it; work started while this thread holds a CaptureGuard is refused
// (SynchronizingWork::refused(): its caller fails, naming the guard) since it would invalidate every capture in
// progress. All three are scoped locals: not movable, not made with new.
#pragma once

#include <cstddef>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

// Held around a stream capture: Kiln's synchronizing work waits until it ends, and a capture waits for
// such work in progress to finish first (a build or a first-use check: milliseconds, at most a
// runtime-compiled engine's compile). Captures on several threads hold it together. RAII; not movable.
class CaptureGuard {
 public:
  CaptureGuard();
  ~CaptureGuard();
  CaptureGuard(const CaptureGuard&) = delete;
  CaptureGuard& operator=(const CaptureGuard&) = delete;
  static void* operator new(std::size_t) = delete;  // a scoped local: released on the thread that took it

 private:
  bool held_;  // false: this thread held the gate already
};

// Held by Kiln around device work that may synchronize the whole device. One at a time, and never while a
// capture or a load holds the gate (but work a thread starts inside its own load runs beside other threads' loads,
// which neither capture nor mind a synchronization). RAII; not movable.
class SynchronizingWork {
 public:
  SynchronizingWork();
  ~SynchronizingWork();
  SynchronizingWork(const SynchronizingWork&) = delete;
  SynchronizingWork& operator=(const SynchronizingWork&) = delete;
  static void* operator new(std::size_t) = delete;

  // True when this thread holds a CaptureGuard: the work must not run (it would invalidate the captures).
  bool refused() const { return refused_; }

 private:
  bool held_ = false;  // this object took the gate (false: nested in this thread's work, or refused)
  bool refused_ = false;
};

// Held by Kiln around loading a stored plan that neither captures nor synchronizes the device (cuDNN's deserialize
// without the Frontend's warmup capture: it loads the plan's modules, which must not happen during a capture):
// loads hold it together, side by side, and exclude captures and SynchronizingWork as SynchronizingWork does (a
// capture or a work waits for the loads in progress; a load waits for work in progress or waiting, and for
// captures in progress, at most 10 s like work). Synchronizing work this thread starts inside its own load does
// not wait for itself: it runs, since no capture can be in progress. Nothing may capture inside a load (a
// CaptureGuard there takes nothing, and other threads' loads go on beside it). RAII; not movable.
class LoadingWork {
 public:
  LoadingWork();
  ~LoadingWork();
  LoadingWork(const LoadingWork&) = delete;
  LoadingWork& operator=(const LoadingWork&) = delete;
  static void* operator new(std::size_t) = delete;

  // True when this thread holds a CaptureGuard: the load must not run (loading modules during a capture).
  bool refused() const { return refused_; }

 private:
  bool held_ = false;  // this object took the gate (false: nested in this thread's load or work, or refused)
  bool refused_ = false;
};

// The error a caller returns when its SynchronizingWork is refused: FailedPrecondition naming `what` and the guard.
Status refused_under_capture(const std::string& what);

}  // namespace kiln
