// kiln/measure/measure.h: the GPU timer shared by the autotuner and the benchmarks.
//
// Method (docs/measure.md has the reasoning):
//   1. warm-up: at least `warmup_runs` launches and at least `warmup_ms` of wall time (capped);
//   2. before every sample, unless `hot_cache`, the L2 is flushed by writing a scratch buffer twice the
//      device's L2 size (cudaMemsetAsync, alternating the byte value), and the GPU then idles `settle_us`
//      before the start event (the flush's write-backs drain, as in PyTorch's peer harness);
//   3. each sample is the cudaEvent time around the launch only; with `block_launch` a one-thread kernel
//      holds the stream while the host enqueues start event, launch and stop event, so host-side launch
//      cost does not leak into the sample;
//   4. sampling continues until the StoppingRule stops it (converged, time budget, or max samples);
//   5. the SM clock and throttle reasons are read through NVML (dlopen'ed, optional) before, during and
//      after; `throttled` is set when the clock dropped or NVML reports thermal/power capping.
// Nothing here exits or aborts; every failure is a Status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/nvml.h"
#include "kiln/measure/measure_stats.h"

namespace kiln {

// Clocks (ClockReading, read_sm_clock) come from NVML: kiln/cuda/nvml.h.

// ---------------------------------------------------------------------------------------------------
// The timer
// ---------------------------------------------------------------------------------------------------

// Enqueues the work to time on `stream`. Must not synchronise the stream or the device (with block_launch
// that would stall until the blocking kernel's timeout; the timer then falls back, see below).
using LaunchFn = std::function<Status(cudaStream_t stream)>;

struct MeasureOptions {
  // Stream to launch on; nullptr makes the timer use its own non-blocking stream.
  cudaStream_t stream = nullptr;
  // Warm-up: at least warmup_runs launches and at least warmup_ms of wall time, never more than
  // max_warmup_runs launches.
  int warmup_runs = 3;
  double warmup_ms = 10.0;
  int max_warmup_runs = 1000;
  // true: no L2 flush between samples (measures the warm-cache case).
  bool hot_cache = false;
  // After each flush, the GPU idles at least this long before the sample's start event (the blocking kernel
  // holds that long, or a spinning kernel runs where there is none). Without it the sample also paid for the
  // flush's own write-backs to memory: on an H100 a norm that ran 179.8 us under Nsight Compute (caches
  // flushed clean) timed 185.8 us here, while the PyTorch peer's harness, which sleeps >= 100 us after its
  // flush, timed its kernel below its Nsight Compute time (docs/measure.md "Settling after the flush").
  double settle_us = 100.0;
  // Hold the stream with a spinning one-thread kernel while the sample is enqueued (nvbench's
  // "blocking kernel"). If the kernel hits block_timeout_ms (the launch synchronised, or enqueueing is
  // very slow) the measurement logs a warning, sets Measurement::block_launch_fell_back and times the
  // remaining samples without it.
  bool block_launch = true;
  double block_timeout_ms = 1000.0;
  StoppingRule stopping;
  // Keep every sample in Measurement::samples_ms (in arrival order).
  bool keep_samples = true;
  // Read clocks through NVML. A drop of more than clock_drop_fraction from the clock at the start of
  // sampling (or any capping reason) marks the measurement throttled.
  bool read_clocks = true;
  double clock_drop_fraction = 0.05;
  // Minimum wall time between NVML polls during sampling.
  double clock_poll_ms = 50.0;
};

struct Measurement {
  SampleSummary stats;  // median_ms, min_ms, max_ms, mean_ms, stddev_ms, mad_ms, rel_error, samples
  StopReason stop_reason = StopReason::kNotStopped;
  std::vector<double> samples_ms;  // arrival order (empty unless keep_samples)
  int warmup_runs = 0;             // warm-up launches actually made
  double warmup_ms = 0.0;          // wall time they took
  double elapsed_ms = 0.0;         // wall time spent sampling (flushes and syncs included)
  bool hot_cache = false;
  size_t flush_bytes = 0;     // 0 with hot_cache
  double settle_us = 0.0;     // the idle time after each flush (0 with hot_cache)
  bool block_launch = false;  // the blocking kernel was used (for at least the first sample)
  bool block_launch_fell_back = false;

  int device_ordinal = 0;
  std::string device_name;
  ClockReading clock_before;  // at the start of sampling (after warm-up)
  ClockReading clock_after;   // at the end of sampling
  unsigned min_sm_mhz = 0;    // lowest SM clock seen while sampling (0 when unknown)
  uint64_t reasons_seen = 0;  // OR of the reason bits seen while sampling
  bool throttled = false;
  std::string throttle_note;  // why `throttled` is set, empty otherwise

  double median_ms() const { return stats.median_ms; }
  double rel_error() const { return stats.rel_error; }
  // {"device": {"ordinal", "name"}, "clocks": {"known", "sm_mhz_before", "sm_mhz_after", "min_sm_mhz",
  //  "max_sm_mhz", "reasons", "throttled", "note"}}
  nlohmann::json meta() const;
  // Everything above, including the meta block and (if kept) the samples.
  nlohmann::json to_json() const;
};

// Reusable timer state for one device: a stream, events, the L2 flush buffer and the blocking kernel's
// host flag. Create once and measure many candidates with it (the tuner does).
class Timer {
 public:
  // `device_ordinal` < 0 means the current device. Allocates the flush buffer (2x L2).
  static StatusOr<Timer> create(int device_ordinal = -1);

  Timer(Timer&&) noexcept;
  Timer& operator=(Timer&&) noexcept;
  ~Timer();

  // Times `launch` as described at the top of this file. InvalidArgument for bad options (message names
  // the field), the launch's own Status (with context) when a launch fails, a CUDA Status otherwise.
  StatusOr<Measurement> measure(const LaunchFn& launch, const MeasureOptions& options = {});

  int device_ordinal() const;
  size_t flush_bytes() const;

 private:
  struct State;
  explicit Timer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// One-shot convenience: creates a Timer on the current device and measures once.
StatusOr<Measurement> measure(const LaunchFn& launch, const MeasureOptions& options = {});

// The environment block that every JSON report carries: argv, Kiln version and git revision, CUDA
// runtime/driver versions, cuDNN version, device (name, uuid, cc, sm count, L2) and NVML status. Never
// fails: what cannot be queried is reported as null with a "*_error" string.
nlohmann::json environment_meta(const std::vector<std::string>& argv = {}, int device_ordinal = 0);

}  // namespace kiln
