// Environment fingerprint: versions of what is loaded, not just what was compiled against.
#include <link.h>

#include <cstring>

#include "kiln/core/build_identity.h"
#include "kiln/cuda/device.h"
#include "kiln/cuda/nvml.h"
#include "kiln/lower/environment.h"
#include "lower/frontend.h"

namespace kiln {
namespace {

// Path of the loaded libcudnn.so.N, found by walking the loaded objects.
std::string loaded_cudnn_path() {
  std::string found;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        const char* name = info->dlpi_name;
        if (name && std::strstr(name, "libcudnn.so")) {
          *static_cast<std::string*>(data) = name;
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

}  // namespace

EnvReport collect_environment(int ordinal) {
  EnvReport r;
  EnvFingerprint& f = r.fingerprint;
  f.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
  f.cudnn_header_version = CUDNN_VERSION;
  f.cudnn_library_path = loaded_cudnn_path();
  f.cudnn_frontend_version = CUDNN_FRONTEND_VERSION;
  f.kiln_version = kiln_version_string();
  f.kiln_git_revision = kiln_git_revision();
  f.cuda_runtime_version = cuda_runtime_version();
  f.driver_version = cuda_driver_version();
  auto dev = query_device(ordinal);
  if (!dev.is_ok()) {
    r.device_status = dev.status();
    return r;
  }
  f.has_device = true;
  f.gpu_name = dev->name;
  f.sm_version = dev->sm_version();
  f.sm_count = dev->sm_count;
  f.device_uuid = dev->uuid;
  f.driver_release = driver_release();  // /proc first: no NVML load on the start path
  return r;
}

}  // namespace kiln
