// kiln/core/fingerprint.h: the environment a plan is built for and keyed on. `kiln doctor` prints it;
// the plan store records it beside every plan and checks it (with per-field policies) on load. Collecting
// it (which asks cuDNN and the device) is the lower layer's: kiln/lower/environment.h.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct EnvFingerprint {
  std::string gpu_name;                // "NVIDIA H200"
  int sm_version = 0;                  // compute capability * 10 (90 for the H200)
  int sm_count = 0;                    // 132 for the H200 SXM
  std::string device_uuid;             // identifies one card; informational, never a match criterion
  int driver_version = 0;              // CUDA driver API version (cudaDriverGetVersion), e.g. 13000
  std::string driver_release;          // the kernel driver's release ("580.159.04") where NVML answers
  int cuda_runtime_version = 0;        // cudaRuntimeGetVersion, e.g. 13000
  int64_t cudnn_version = 0;           // cudnnGetVersion() of the library actually loaded, e.g. 91900
  int64_t cudnn_header_version = 0;    // CUDNN_VERSION Kiln was compiled against
  std::string cudnn_library_path;      // where the loaded libcudnn came from (informational)
  int64_t cudnn_frontend_version = 0;  // CUDNN_FRONTEND_VERSION, e.g. 12300
  std::string kiln_version;            // "0.1.0"
  std::string kiln_git_revision;       // short SHA of the build
  bool has_device = false;             // false for a fingerprint made from a recorded device profile alone

  // "9.19.0" from 91900.
  static std::string cudnn_version_string(int64_t v);
  // "13.0" from 13000.
  static std::string cuda_version_string(int v);
};

}  // namespace kiln
