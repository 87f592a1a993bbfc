#include "cuda/error_words.h"

#include <cctype>

namespace kiln::cuda_detail {

bool is_no_device_error(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorStubLibrary: return true;
    default: return false;
  }
}

std::string cuda_error_words(cudaError_t err) {
  const std::string name = cudaGetErrorName(err);
  switch (err) {
    case cudaErrorInsufficientDriver:
      return "no usable CUDA device: the driver is missing or older than the CUDA runtime (" + name + ")";
    case cudaErrorNoDevice: return "no usable CUDA device: no GPU was found (" + name + ")";
    case cudaErrorStubLibrary:
      return "no usable CUDA device: only the CUDA driver's stub library is installed, not the driver (" + name + ")";
    case cudaErrorMemoryAllocation: return "out of GPU memory (" + name + ")";
    default: break;
  }
  std::string words = std::string(cudaGetErrorString(err)) + " (" + name + ")";
  if (is_no_device_error(err)) return "no usable CUDA device: " + words;
  return words;
}

bool looks_like_source_text(std::string_view t) {
  for (const char* token : {"&", "!=", "==", "::", "->", "#"})
    if (t.find(token) != std::string_view::npos) return true;
  // An identifier followed directly by '(' is a call: "cudnnCreate(".
  for (size_t i = 1; i < t.size(); ++i)
    if (t[i] == '(' && (std::isalnum(static_cast<unsigned char>(t[i - 1])) || t[i - 1] == '_')) return true;
  return false;
}

std::string call_name(std::string_view what) {
  size_t end = what.find('(');
  std::string_view name = what.substr(0, end);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.remove_suffix(1);
  return std::string(name);
}

}  // namespace kiln::cuda_detail
