// kiln/cuda/device.h: CUDA device and driver queries. Never aborts: a machine without a GPU or driver
// yields Unavailable with one clear message.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-..."
  int64_t global_memory_bytes = 0;
  int l2_cache_bytes = 0;
  int driver_version = 0;   // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int sm_version() const { return cc_major * 10 + cc_minor; }
};

// Number of usable CUDA devices; Unavailable (with the CUDA error text) where there is no driver or device.
StatusOr<int> device_count();
// Properties of one device.
StatusOr<DeviceInfo> query_device(int ordinal = 0);
// CUDA runtime version compiled in (works without a GPU).
int cuda_runtime_version();
// Installed driver's CUDA version, 0 when no driver is present (works without a GPU).
int cuda_driver_version();

// Loads cuDNN's sub-libraries (graph, heuristic, engines) from the folder of the libcudnn that is loaded,
// as cuDNN would on first use. cuDNN loads them lazily, so the first plan a process deserializes pays for
// it (about 90 ms on the H200); a caller can do it ahead, e.g. on a thread while the CUDA context is made.
// Returns how many were loaded; a library that is absent is skipped (cuDNN then says so itself).
int preload_cudnn_libraries();

}  // namespace kiln
