// The dynamic shared memory past 48 KiB that Kiln's staged kernels (skinny_gemm_kernel.cu, decode_staged_kernel.cu)
// must be allowed before they launch, once on each device: a kernel's grant, held per device, set again after a
// failed launch (a reset device or a new context loses it) and never left as the thread's last CUDA error when it
// fails. Host code; for src/lower/.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "kiln/core/status.h"

namespace kiln::lower_detail {

// The current device's opt-in shared memory a block, -1 where there is no device to ask (a host without a GPU offers
// and builds every form; the launch says what does not fit).
inline int64_t device_smem_optin() {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return optin;
}

class DynamicSmemGrant {
 public:
  // Allows `kernel` `bytes` on the current device: NotSupported where the device's opt-in limit is lower (an sm_86 or
  // sm_89 card takes 99 KiB a block), Internal where CUDA refuses otherwise.
  Status allow(const void* kernel, int bytes, const std::string& what) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) {
      cudaGetLastError();
      return internal_error(what + ": no current CUDA device (or one past the 64th)");
    }
    if (allowed_[device].load(std::memory_order_acquire)) return Status::ok();
    const int64_t optin = device_smem_optin();
    if (optin >= 0 && bytes > optin)
      return not_supported(what + " needs " + std::to_string(bytes) + " bytes of shared memory a block; this device " +
                           "allows " + std::to_string(optin));
    const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (attr != cudaSuccess) {
      cudaGetLastError();  // not the next launch's error
      return internal_error(what + "'s shared memory: " + cudaGetErrorString(attr));
    }
    allowed_[device].store(true, std::memory_order_release);
    return Status::ok();
  }
  // After a failed launch on the current device: the next one sets the grant again.
  void forget() {
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < kDevices)
      allowed_[device].store(false, std::memory_order_release);
  }

 private:
  static constexpr int kDevices = 64;
  std::atomic<bool> allowed_[kDevices] = {};
};

}  // namespace kiln::lower_detail
