// kiln/cuda/capture_gate.h: keeps Kiln's own device-synchronizing work apart from CUDA graph captures in
// one process. A call that synchronizes the whole device (cudaDeviceSynchronize, cudaFree) while another
// thread captures a stream ends that capture as invalidated (cudaErrorStreamCaptureInvalidated at
// cudaStreamEndCapture), whatever the capture's mode. Kiln's work of that kind (first-use checks, plan
// builds and warm-ups, on the caller's thread or a Planner's background thread) holds the gate alone
// (SynchronizingWork); every capture Kiln makes (capture_graph, so CapturedSequence and the tuner's graph
// timing) holds it shared, and so can an application's own capture (CaptureGuard). Each side waits for the
// other's holds to end, never for a hold of its own thread (a nested hold is a no-op).
#pragma once

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

 private:
  bool held_;  // false: this thread held the gate already
};

// Held by Kiln around device work that may synchronize the whole device. One at a time, and never while a
// capture holds the gate. RAII; not movable.
class SynchronizingWork {
 public:
  SynchronizingWork();
  ~SynchronizingWork();
  SynchronizingWork(const SynchronizingWork&) = delete;
  SynchronizingWork& operator=(const SynchronizingWork&) = delete;

 private:
  bool held_;  // false: this thread held the gate already
};

}  // namespace kiln
