#include "kiln/measure/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kiln/core/build_identity.h"
#include "kiln/core/log.h"
#include "kiln/cuda/device.h"
#include "kiln/cuda/blocking_kernel.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct HostFree {
  void operator()(int32_t* p) const noexcept {
    if (p) KILN_CUDA_CALL_NOEXCEPT(cudaFreeHost(p));
  }
};
using PinnedFlags = std::unique_ptr<int32_t, HostFree>;

// Makes the timer's device current for the duration of a call and restores the caller's afterwards.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  Status enter(int ordinal) {
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != ordinal) {
      KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
      restore_ = true;
    }
    return Status::ok();
  }
  ~DeviceGuard() {
    if (restore_) KILN_CUDA_CALL_NOEXCEPT(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

Status validate_options(const MeasureOptions& o) {
  KILN_RETURN_IF_ERROR(o.stopping.validate());
  if (o.warmup_runs < 0) return invalid_argument("measure options: warmup_runs must be >= 0");
  if (o.max_warmup_runs < o.warmup_runs)
    return invalid_argument("measure options: max_warmup_runs (" + std::to_string(o.max_warmup_runs) +
                            ") is below warmup_runs (" + std::to_string(o.warmup_runs) + ")");
  if (!(o.warmup_ms >= 0.0)) return invalid_argument("measure options: warmup_ms must be >= 0");
  if (o.block_launch && !(o.block_timeout_ms > 0.0))
    return invalid_argument("measure options: block_timeout_ms must be > 0 with block_launch");
  if (!(o.clock_drop_fraction >= 0.0 && o.clock_drop_fraction < 1.0))
    return invalid_argument("measure options: clock_drop_fraction must be in [0, 1)");
  if (!(o.settle_us >= 0.0 && o.settle_us <= 1e6))
    return invalid_argument("measure options: settle_us must be in [0, 1e6]");
  if (o.block_launch && o.settle_us * 1e-3 >= o.block_timeout_ms)
    return invalid_argument("measure options: settle_us must be below block_timeout_ms");
  return Status::ok();
}

nlohmann::json clock_json(const ClockReading& c) {
  if (!c.known) return nullptr;
  nlohmann::json j = {{"sm_mhz", c.sm_mhz}, {"max_sm_mhz", c.max_sm_mhz}};
  if (c.reasons_known) {
    j["reasons"] = c.reasons;
    j["reason_names"] = clock_reason_names(c.reasons);
  }
  return j;
}

}  // namespace

struct Timer::State {
  int ordinal = 0;
  DeviceInfo info;
  UniqueStream stream;
  UniqueEvent start;
  UniqueEvent stop;
  DeviceBuffer flush;
  int flush_value = 0;
  // [0] release flag, [1] timed-out flag; host-mapped. Null when pinned mapped memory is unavailable.
  PinnedFlags flags;
  int32_t* device_flags = nullptr;
};

Timer::Timer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Timer::Timer(Timer&&) noexcept = default;
Timer& Timer::operator=(Timer&&) noexcept = default;
Timer::~Timer() = default;

int Timer::device_ordinal() const { return state_->ordinal; }
size_t Timer::flush_bytes() const { return state_->flush.size(); }

StatusOr<Timer> Timer::create(int device_ordinal) {
  if (device_ordinal < 0) KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device_ordinal));
  auto state = std::make_unique<State>();
  state->ordinal = device_ordinal;
  KILN_ASSIGN_OR_RETURN(state->info, query_device(device_ordinal));
  DeviceGuard guard;
  KILN_RETURN_IF_ERROR(guard.enter(device_ordinal));
  KILN_ASSIGN_OR_RETURN(state->stream, make_stream(/*non_blocking=*/true));
  KILN_ASSIGN_OR_RETURN(state->start, make_event(/*timing=*/true));
  KILN_ASSIGN_OR_RETURN(state->stop, make_event(/*timing=*/true));
  // Twice the L2 so that every line the workload could hit is evicted; at least 1 MiB if L2 is unreported.
  const size_t l2 = state->info.l2_cache_bytes > 0 ? static_cast<size_t>(state->info.l2_cache_bytes) : 0;
  const size_t flush_bytes = std::max<size_t>(2 * l2, size_t{1} << 20);
  KILN_ASSIGN_OR_RETURN(state->flush, DeviceBuffer::allocate(flush_bytes));

  void* host = nullptr;
  cudaError_t err = cudaHostAlloc(&host, 2 * sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable);
  if (err == cudaSuccess) {
    state->flags.reset(static_cast<int32_t*>(host));
    void* dev = nullptr;
    err = cudaHostGetDevicePointer(&dev, host, 0);
    if (err == cudaSuccess) state->device_flags = static_cast<int32_t*>(dev);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so the caller's next check starts clean
    KILN_LOG(kInfo, "measure: no host-mapped memory (" << cudaGetErrorString(err)
                                                       << "); samples are timed without the blocking kernel");
    state->flags.reset();
    state->device_flags = nullptr;
  }
  return Timer(std::move(state));
}

namespace {
// Why a measurement counts as throttled ("" when it does not): the SM clock fell by more than
// clock_drop_fraction below its reading before the samples, or NVML reported a capping reason.
std::string describe_throttling(const ClockReading& before, unsigned min_mhz, uint64_t reasons_seen,
                                double clock_drop_fraction) {
  std::string note;
  if (before.known && min_mhz > 0 &&
      static_cast<double>(min_mhz) < static_cast<double>(before.sm_mhz) * (1.0 - clock_drop_fraction)) {
    note = "SM clock dropped from " + std::to_string(before.sm_mhz) + " to " + std::to_string(min_mhz) + " MHz";
  }
  if (reasons_seen & kClockReasonsCapping) {
    if (!note.empty()) note += "; ";
    note += "NVML reports " + clock_reason_names(reasons_seen & kClockReasonsCapping);
  }
  return note;
}
// Holds `stream` before a sample: the blocking kernel (`blocking`; flags in host-mapped memory, device pointer
// `device_flags`) until the host releases it and at least `settle_ns` after it starts, else a spin of `settle_ns`.
// Returns whether the blocking kernel holds the stream: false without one, or after its launch failed (logged;
// the sample is then held by the spin alone, and a spin that does not launch is logged and left out).
bool hold_stream(cudaStream_t stream, bool blocking, int32_t* device_flags, uint64_t timeout_ns, uint64_t settle_ns) {
  if (blocking) {
    const cudaError_t err = launch_blocking_kernel(stream, device_flags, device_flags + 1, timeout_ns, settle_ns);
    if (err == cudaSuccess) return true;
    KILN_LOG(kWarn, "measure: blocking kernel did not launch (" << cudaGetErrorString(err) << "); timing without it");
  }
  if (settle_ns > 0) {
    const cudaError_t err = launch_spin_kernel(stream, settle_ns);
    if (err != cudaSuccess) {  // timing goes on without the settle time, as without the blocking kernel
      cudaGetLastError();
      KILN_LOG(kWarn, "measure: settle kernel did not launch (" << cudaGetErrorString(err) << "); timing without it");
    }
  }
  return false;
}
}  // namespace

StatusOr<Measurement> Timer::measure(const LaunchFn& launch, const MeasureOptions& options) {
  if (!launch) return invalid_argument("measure: launch function is empty");
  KILN_RETURN_IF_ERROR(validate_options(options));
  State& s = *state_;
  DeviceGuard guard;
  KILN_RETURN_IF_ERROR(guard.enter(s.ordinal));
  cudaStream_t stream = options.stream ? options.stream : s.stream.get();

  Measurement m;
  m.device_ordinal = s.ordinal;
  m.device_name = s.info.name;
  m.hot_cache = options.hot_cache;
  m.flush_bytes = options.hot_cache ? 0 : s.flush.size();
  m.settle_us = options.hot_cache ? 0.0 : options.settle_us;
  const auto settle_ns = static_cast<uint64_t>(m.settle_us * 1e3);

  auto flush_l2 = [&]() -> Status {
    if (options.hot_cache) return Status::ok();
    s.flush_value ^= 1;  // alternate the value so that no level can skip an identical rewrite
    KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.flush.data(), s.flush_value, s.flush.size(), stream));
    return Status::ok();
  };
  // After a failed launch, drain what was queued so the next user of the stream starts clean.
  auto drain = [&]() { KILN_CUDA_CALL_NOEXCEPT(cudaStreamSynchronize(stream)); };

  // Warm-up: module loading, lazy allocation, clocks ramping up. Flushes too, so the flush path is warm.
  const Clock::time_point warm0 = Clock::now();
  for (int i = 0; i < options.max_warmup_runs && (i < options.warmup_runs || ms_since(warm0) < options.warmup_ms);
       ++i) {
    KILN_RETURN_IF_ERROR(flush_l2());
    Status st = launch(stream);
    if (!st.is_ok()) {
      drain();
      return st.with_context("measure: warm-up launch " + std::to_string(i) + " failed");
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    m.warmup_runs = i + 1;
  }
  m.warmup_ms = ms_since(warm0);

  if (options.read_clocks) m.clock_before = read_sm_clock(s.ordinal);
  unsigned min_mhz = m.clock_before.known ? m.clock_before.sm_mhz : 0;
  uint64_t reasons_seen = m.clock_before.reasons_known ? m.clock_before.reasons : 0;
  auto note_clock = [&](const ClockReading& c) {
    if (!c.known) return;
    min_mhz = min_mhz == 0 ? c.sm_mhz : std::min(min_mhz, c.sm_mhz);
    if (c.reasons_known) reasons_seen |= c.reasons;
  };

  bool blocking = options.block_launch && s.device_flags != nullptr;
  m.block_launch = blocking;
  volatile int32_t* host_release = s.flags ? s.flags.get() : nullptr;
  volatile int32_t* host_timed_out = s.flags ? s.flags.get() + 1 : nullptr;
  const uint64_t timeout_ns = static_cast<uint64_t>(options.block_timeout_ms * 1e6);

  SampleSet samples;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last_poll = t0;
  for (;;) {
    KILN_RETURN_IF_ERROR(flush_l2());
    if (blocking) {
      *host_release = 0;
      *host_timed_out = 0;
    }
    blocking = hold_stream(stream, blocking, s.device_flags, timeout_ns, settle_ns);
    if (options.block_launch && s.device_flags && !blocking) m.block_launch_fell_back = true;
    cudaError_t rec = cudaEventRecord(s.start.get(), stream);
    Status st = rec == cudaSuccess ? launch(stream) : cuda_status(rec, "cudaEventRecord(start)");
    if (st.is_ok()) st = cuda_status(cudaEventRecord(s.stop.get(), stream), "cudaEventRecord(stop)");
    if (blocking) *host_release = 1;  // always release, also on failure, or the stream stays held
    if (!st.is_ok()) {
      drain();
      return st.with_context("measure: launch failed at sample " + std::to_string(samples.size()));
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.stop.get()));
    if (blocking && *host_timed_out) {
      // The kernel gave up before the host released it: the launch synchronised or enqueueing took longer
      // than the timeout. This sample includes host time; drop it and time the rest without the kernel.
      KILN_LOG(kWarn, "measure: blocking kernel timed out after " << options.block_timeout_ms
                                                                  << " ms (does the launch synchronise?); "
                                                                     "timing without it");
      blocking = false;
      m.block_launch_fell_back = true;
      continue;
    }
    float ms = 0.0f;
    KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s.start.get(), s.stop.get()));
    samples.add(static_cast<double>(ms));

    const double elapsed = ms_since(t0);
    if (options.read_clocks && m.clock_before.known &&
        std::chrono::duration<double, std::milli>(Clock::now() - last_poll).count() >= options.clock_poll_ms) {
      note_clock(read_sm_clock(s.ordinal));
      last_poll = Clock::now();
    }
    m.stop_reason = options.stopping.evaluate(samples, elapsed);
    if (m.stop_reason != StopReason::kNotStopped) {
      m.elapsed_ms = elapsed;
      break;
    }
  }

  m.stats = summarize(samples);
  if (options.keep_samples) m.samples_ms = samples.in_order();
  if (options.read_clocks) {
    m.clock_after = read_sm_clock(s.ordinal);
    note_clock(m.clock_after);
  }
  m.min_sm_mhz = min_mhz;
  m.reasons_seen = reasons_seen;
  m.throttle_note = describe_throttling(m.clock_before, min_mhz, reasons_seen, options.clock_drop_fraction);
  m.throttled = !m.throttle_note.empty();
  if (m.throttled) KILN_LOG(kInfo, "measure: throttled: " << m.throttle_note);
  return m;
}

StatusOr<Measurement> measure(const LaunchFn& launch, const MeasureOptions& options) {
  KILN_ASSIGN_OR_RETURN(Timer timer, Timer::create(-1));
  return timer.measure(launch, options);
}

nlohmann::json Measurement::meta() const {
  nlohmann::json clocks = {
      {"known", clock_before.known || clock_after.known},
      {"before", clock_json(clock_before)},
      {"after", clock_json(clock_after)},
      {"min_sm_mhz", min_sm_mhz},
      {"reasons_seen", reasons_seen},
      {"reason_names", clock_reason_names(reasons_seen)},
      {"throttled", throttled},
      {"note", throttle_note},
  };
  return {{"device", {{"ordinal", device_ordinal}, {"name", device_name}}}, {"clocks", clocks}};
}

nlohmann::json Measurement::to_json() const {
  nlohmann::json j = {
      {"median_ms", stats.median_ms},
      {"min_ms", stats.min_ms},
      {"max_ms", stats.max_ms},
      {"mean_ms", stats.mean_ms},
      {"stddev_ms", stats.stddev_ms},
      {"mad_ms", stats.mad_ms},
      {"rel_error", stats.rel_error},
      {"samples", stats.samples},
      {"stop_reason", stop_reason_name(stop_reason)},
      {"warmup_runs", warmup_runs},
      {"warmup_ms", warmup_ms},
      {"elapsed_ms", elapsed_ms},
      {"hot_cache", hot_cache},
      {"flush_bytes", flush_bytes},
      {"settle_us", settle_us},
      {"block_launch", block_launch},
      {"block_launch_fell_back", block_launch_fell_back},
      {"meta", meta()},
  };
  if (!samples_ms.empty()) j["samples_ms"] = samples_ms;
  return j;
}

nlohmann::json environment_meta(const std::vector<std::string>& argv, int device_ordinal) {
  nlohmann::json j;
  j["argv"] = argv;
  j["kiln_version"] = kiln_version_string();
  j["git_revision"] = kiln_git_revision();
  j["cuda_architectures"] = kiln_cuda_architectures();
  j["cuda_runtime_version"] = cuda_runtime_version();
  j["cuda_driver_version"] = cuda_driver_version();
  j["cudnn_version"] = static_cast<int64_t>(cudnnGetVersion());
  auto dev = query_device(device_ordinal);
  if (dev.is_ok()) {
    j["device"] = {{"ordinal", dev->ordinal},
                   {"name", dev->name},
                   {"uuid", dev->uuid},
                   {"sm_version", dev->sm_version()},
                   {"sm_count", dev->sm_count},
                   {"l2_cache_bytes", dev->l2_cache_bytes},
                   {"global_memory_bytes", dev->global_memory_bytes}};
  } else {
    j["device"] = nullptr;
    j["device_error"] = dev.status().message();
  }
  if (nvml_available()) {
    j["nvml"] = true;
    if (dev.is_ok()) j["clock"] = clock_json(read_sm_clock(device_ordinal));
  } else {
    j["nvml"] = false;
    j["nvml_error"] = nvml_unavailable_reason();
  }
  return j;
}

}  // namespace kiln
