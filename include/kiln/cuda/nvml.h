// kiln/cuda/nvml.h: the one NVML loader. NVML is part of the driver: Kiln does not link against it, but
// loads it at most once per process with dlopen("libnvidia-ml.so.1") and keeps it initialised for the
// life of the process. When it is absent or fails to initialise, every clock reading has known == false
// and the driver release is "": never an error, so a machine without it (containers, CI) runs everything.
// Users: the timer (kiln/measure/measure.h, clocks while sampling) and the environment fingerprint
// (kiln/lower/environment.h, the kernel driver's release).
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

// NVML clock-event ("throttle") reason bits, as NVML defines them.
inline constexpr uint64_t kClockReasonGpuIdle = 0x1;
inline constexpr uint64_t kClockReasonAppClocksSetting = 0x2;
inline constexpr uint64_t kClockReasonSwPowerCap = 0x4;
inline constexpr uint64_t kClockReasonHwSlowdown = 0x8;
inline constexpr uint64_t kClockReasonSyncBoost = 0x10;
inline constexpr uint64_t kClockReasonSwThermal = 0x20;
inline constexpr uint64_t kClockReasonHwThermal = 0x40;
inline constexpr uint64_t kClockReasonHwPowerBrake = 0x80;
inline constexpr uint64_t kClockReasonDisplayClock = 0x100;
// The reasons that mean the GPU was capped by power or temperature (as opposed to idle or app clocks).
inline constexpr uint64_t kClockReasonsCapping = kClockReasonSwPowerCap | kClockReasonHwSlowdown |
                                                 kClockReasonSwThermal | kClockReasonHwThermal |
                                                 kClockReasonHwPowerBrake;

// "sw_power_cap,hw_thermal"; empty for 0.
std::string clock_reason_names(uint64_t reasons);

struct ClockReading {
  bool known = false;          // false: NVML missing or the query failed
  unsigned sm_mhz = 0;         // current SM clock
  unsigned max_sm_mhz = 0;     // maximum SM clock (0 when unknown)
  bool reasons_known = false;  // the reasons query succeeded
  uint64_t reasons = 0;        // NVML clock-event reason bits
};

// Reads the SM clock of the CUDA device `cuda_ordinal` (matched to NVML by UUID, falling back to index).
ClockReading read_sm_clock(int cuda_ordinal);
// Whether NVML could be loaded and initialised, and if not, why (for `kiln doctor` and the meta block).
bool nvml_available();
std::string nvml_unavailable_reason();
// The kernel driver's release ("580.159.04", nvmlSystemGetDriverVersion); "" where NVML does not answer.
std::string nvml_driver_release();

// The kernel driver's release ("580.159.04") without loading NVML: read from /proc/driver/nvidia/version,
// which the driver writes (NVML's first use costs 10-12 ms on the H200 host, 2026-12-03: most of what a
// Planner's environment fingerprint cost); NVML's answer where that file is absent or does not parse.
std::string driver_release();
// The release in the text of /proc/driver/nvidia/version: the first word after "Kernel Module" made of
// digits and dots ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...", or the open modules'
// "... Open Kernel Module for x86_64  580.159.04 ..."); "" when there is none.
std::string driver_release_from_proc_text(const std::string& text);

}  // namespace kiln
