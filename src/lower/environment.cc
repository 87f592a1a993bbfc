// Environment fingerprint: versions of what is loaded, not just what was compiled against.
#include <link.h>

#include <cstring>

#include "kiln/core/build_identity.h"
#include "kiln/cuda/device.h"
#include "kiln/cuda/nvml.h"
#include "kiln/lower/environment.h"
#include "lower/frontend.h"

#include <cublasLt.h>

namespace kiln {
namespace {

// Path of the first loaded object whose name contains `needle` ("libcudnn.so"), found by walking the loaded objects.
std::string loaded_library_path(const char* needle) {
  struct Search {
    const char* needle;
    std::string found;
  } search{needle, {}};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        const char* name = info->dlpi_name;
        if (name && std::strstr(name, s->needle)) {
          s->found = name;
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

}  // namespace

EnvReport collect_environment(int ordinal) {
  EnvReport r;
  EnvFingerprint& f = r.fingerprint;
  f.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
  f.cudnn_header_version = CUDNN_VERSION;
  f.cudnn_library_path = loaded_library_path("libcudnn.so");
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

LibraryInfo cublaslt_library() {
  LibraryInfo info;
  info.version = static_cast<int64_t>(cublasLtGetVersion());
  info.path = loaded_library_path("libcublasLt.so");
  return info;
}

}  // namespace kiln
