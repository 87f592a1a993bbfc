// The NVML loader and the queries through it (kiln/cuda/nvml.h).
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln/core/log.h"
#include "kiln/cuda/device.h"
#include "kiln/cuda/nvml.h"

namespace kiln {
namespace {

// Minimal declarations of the few NVML entry points used (ABI as documented in nvml.h).
using nvmlReturn_t = int;  // NVML_SUCCESS == 0
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

using InitFn = nvmlReturn_t (*)();
using HandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using HandleByUuidFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using ClockFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using ReasonsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using DriverVersionFn = nvmlReturn_t (*)(char*, unsigned int);

struct Nvml {
  bool initialized = false;  // nvmlInit_v2 succeeded
  bool ok = false;           // initialized, and the clock and device-handle queries are there
  std::string why;           // set when !ok
  HandleByIndexFn by_index = nullptr;
  HandleByUuidFn by_uuid = nullptr;
  ClockFn clock = nullptr;
  ClockFn max_clock = nullptr;
  ReasonsFn reasons = nullptr;
  DriverVersionFn driver_version = nullptr;
};

template <typename F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

// Loaded once, never unloaded (NVML's own reference count is held for the life of the process).
const Nvml& nvml() {
  static const Nvml instance = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      n.why = std::string("dlopen(libnvidia-ml.so.1) failed: ") + (e ? e : "unknown error");
      return n;
    }
    auto init = sym<InitFn>(lib, "nvmlInit_v2");
    auto err_str = sym<ErrorStringFn>(lib, "nvmlErrorString");
    n.by_index = sym<HandleByIndexFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
    n.by_uuid = sym<HandleByUuidFn>(lib, "nvmlDeviceGetHandleByUUID");
    n.clock = sym<ClockFn>(lib, "nvmlDeviceGetClockInfo");
    n.max_clock = sym<ClockFn>(lib, "nvmlDeviceGetMaxClockInfo");
    // The newer name first; the older one is deprecated but present in older drivers.
    n.reasons = sym<ReasonsFn>(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!n.reasons) n.reasons = sym<ReasonsFn>(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    n.driver_version = sym<DriverVersionFn>(lib, "nvmlSystemGetDriverVersion");
    if (!init) {
      n.why = "libnvidia-ml.so.1 lacks nvmlInit_v2";
      return n;
    }
    nvmlReturn_t r = init();
    if (r != 0) {
      n.why = "nvmlInit_v2 failed: " + (err_str ? std::string(err_str(r)) : "NVML error " + std::to_string(r));
      return n;
    }
    n.initialized = true;
    if (!n.clock || (!n.by_index && !n.by_uuid)) {
      n.why = "libnvidia-ml.so.1 lacks nvmlDeviceGetClockInfo or a device-handle query";
      return n;
    }
    n.ok = true;
    return n;
  }();
  return instance;
}

struct HandleCache {
  std::mutex mu;
  int ordinal = -1;
  nvmlDevice_t handle = nullptr;
};

nvmlDevice_t handle_for(int cuda_ordinal) {
  static HandleCache cache;
  const Nvml& n = nvml();
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.ordinal == cuda_ordinal && cache.handle) return cache.handle;
  nvmlDevice_t h = nullptr;
  // CUDA and NVML may number devices differently (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER): match by UUID.
  if (n.by_uuid) {
    auto info = query_device(cuda_ordinal);
    if (info.is_ok() && n.by_uuid(info->uuid.c_str(), &h) != 0) h = nullptr;
  }
  if (!h && n.by_index && n.by_index(static_cast<unsigned>(cuda_ordinal), &h) != 0) h = nullptr;
  if (h) {
    cache.ordinal = cuda_ordinal;
    cache.handle = h;
  }
  return h;
}

}  // namespace

std::string clock_reason_names(uint64_t reasons) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {kClockReasonGpuIdle, "gpu_idle"},           {kClockReasonAppClocksSetting, "app_clocks"},
      {kClockReasonSwPowerCap, "sw_power_cap"},    {kClockReasonHwSlowdown, "hw_slowdown"},
      {kClockReasonSyncBoost, "sync_boost"},       {kClockReasonSwThermal, "sw_thermal"},
      {kClockReasonHwThermal, "hw_thermal"},       {kClockReasonHwPowerBrake, "hw_power_brake"},
      {kClockReasonDisplayClock, "display_clock"},
  };
  std::string out;
  uint64_t rest = reasons;
  for (const auto& e : kNames) {
    if (reasons & e.bit) {
      if (!out.empty()) out += ",";
      out += e.name;
      rest &= ~e.bit;
    }
  }
  if (rest) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(rest));
    if (!out.empty()) out += ",";
    out += buf;
  }
  return out;
}

bool nvml_available() { return nvml().ok; }

std::string nvml_driver_release() {
  const Nvml& n = nvml();
  if (!n.initialized || !n.driver_version) return "";
  char buf[96] = {0};
  return n.driver_version(buf, sizeof buf) == 0 ? std::string(buf) : std::string();
}
std::string driver_release_from_proc_text(const std::string& text) {
  const size_t at = text.find("Kernel Module");
  if (at == std::string::npos) return "";
  std::istringstream words(text.substr(at + std::strlen("Kernel Module")));
  std::string w;
  while (words >> w) {
    const bool digits_and_dots = std::isdigit(static_cast<unsigned char>(w[0])) &&
                                 w.find_first_not_of("0123456789.") == std::string::npos &&
                                 w.find('.') != std::string::npos;
    if (digits_and_dots) return w;
  }
  return "";
}

std::string driver_release() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string first_line;
  if (f && std::getline(f, first_line)) {
    std::string r = driver_release_from_proc_text(first_line);
    if (!r.empty()) return r;
  }
  return nvml_driver_release();
}

std::string nvml_unavailable_reason() { return nvml().ok ? std::string() : nvml().why; }

ClockReading read_sm_clock(int cuda_ordinal) {
  ClockReading r;
  const Nvml& n = nvml();
  if (!n.ok) return r;
  nvmlDevice_t h = handle_for(cuda_ordinal);
  if (!h) return r;
  unsigned int mhz = 0;
  if (n.clock(h, kNvmlClockSm, &mhz) != 0) return r;
  r.known = true;
  r.sm_mhz = mhz;
  unsigned int max_mhz = 0;
  if (n.max_clock && n.max_clock(h, kNvmlClockSm, &max_mhz) == 0) r.max_sm_mhz = max_mhz;
  unsigned long long reasons = 0;
  if (n.reasons && n.reasons(h, &reasons) == 0) {
    r.reasons_known = true;
    r.reasons = reasons;
  }
  return r;
}

}  // namespace kiln
