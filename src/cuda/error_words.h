// CUDA and cuDNN errors in words, for messages people read. The call that failed is kept in the Status's
// trace (kiln -v prints it), never in the message. Private to the cuda layer.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

namespace kiln::cuda_detail {

// Whether `err` means there is no usable device (no GPU, no driver, a driver older than the runtime, ...).
bool is_no_device_error(cudaError_t err);

// "no usable CUDA device: the driver is missing or older than the CUDA runtime (cudaErrorInsufficientDriver)";
// for other errors "<CUDA's description> (<error name>)".
std::string cuda_error_words(cudaError_t err);

// Whether text reads like source code rather than words: a call "f(", "&x", "!=", "::", "->". cuDNN's own
// last-error text sometimes is ("cudaGetDeviceCount(&count) != cudaSuccess"); such text goes to the trace.
bool looks_like_source_text(std::string_view text);

// The API name of a call text: "cudaStreamCreateWithFlags" for "cudaStreamCreateWithFlags(&s, ...)".
std::string call_name(std::string_view what);

}  // namespace kiln::cuda_detail
