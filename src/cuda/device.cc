#include "kiln/cuda/device.h"

#include <cudnn.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "cuda/error_words.h"
#include "kiln/cuda/cuda_handles.h"

namespace kiln {

StatusOr<int> device_count() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    const std::string words = cuda_detail::cuda_error_words(err);
    return unavailable(cuda_detail::is_no_device_error(err) ? words : "no usable CUDA device: " + words);
  }
  return n;
}

int cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

int cuda_driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

StatusOr<DeviceInfo> query_device(int ordinal) {
  KILN_ASSIGN_OR_RETURN(int n, device_count());
  if (n == 0) return unavailable("no CUDA device present");
  if (ordinal < 0 || ordinal >= n)
    return invalid_argument("device ordinal " + std::to_string(ordinal) + " out of range (" + std::to_string(n) +
                            " devices)");
  cudaDeviceProp p{};
  KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, ordinal));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.global_memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.l2_cache_bytes = p.l2CacheSize;
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.uuid = uuid;
  d.driver_version = cuda_driver_version();
  d.runtime_version = cuda_runtime_version();
  return d;
}

int preload_cudnn_libraries() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) || !info.dli_fname) return 0;
  std::string dir = info.dli_fname;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string major = std::to_string(CUDNN_MAJOR);
  int loaded = 0;
  for (const char* name :
       {"libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled"}) {
    // Kept loaded for the life of the process, as cuDNN keeps them (cuDNN's own dlopen by soname finds them).
    if (dlopen((dir + "/" + name + ".so." + major).c_str(), RTLD_LAZY | RTLD_GLOBAL)) ++loaded;
  }
  return loaded;
}

}  // namespace kiln
