// CUDA and cuDNN failures in words (issue 10 case 7): the message says what failed, never the call's C++ text,
// which stays in the trace. No GPU needed: the error values are made up, only their wording is under test.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "cuda/error_words.h"
#include "kiln/core/log.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"

namespace kiln {
namespace {

// The same test of "reads like source" the CLI tests use, written independently of the code under test.
bool has_source_text(const std::string& m) {
  for (const char* token : {"&", "!=", "==", "::", "->", "?"})
    if (m.find(token) != std::string::npos) return true;
  for (size_t i = 1; i < m.size(); ++i)
    if (m[i] == '(' && (std::isalnum(static_cast<unsigned char>(m[i - 1])) || m[i - 1] == '_')) return true;
  return false;
}

TEST(CudaWords, NoDeviceIsSaidPlainlyAndTheCallKeptInTheTrace) {
  Status s = cuda_status(cudaErrorInsufficientDriver,
                         "cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "no usable CUDA device: the driver is missing or older than the CUDA runtime "
                         "(cudaErrorInsufficientDriver); `kiln doctor` says more");
  EXPECT_FALSE(has_source_text(s.message())) << s.message();
  EXPECT_NE(s.trace().find("cudaStreamCreateWithFlags(&s, non_blocking"), std::string::npos) << s.trace();

  s = cuda_status(cudaErrorNoDevice, "cudaGetDeviceCount(&n)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("no usable CUDA device: no GPU was found (cudaErrorNoDevice)", 0), 0u) << s.message();
}

TEST(CudaWords, OtherErrorsNameTheApiNotTheCall) {
  Status s =
      cuda_status(cudaErrorIllegalAddress, "cudaMemcpyAsync(dst, data(), bytes, cudaMemcpyDeviceToHost, stream)");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message().rfind("CUDA call cudaMemcpyAsync failed: ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("(cudaErrorIllegalAddress)"), std::string::npos) << s.message();
  EXPECT_FALSE(has_source_text(s.message())) << s.message();
  s = cuda_status(cudaErrorMemoryAllocation, "cudaMalloc(&p, bytes)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "out of GPU memory (cudaErrorMemoryAllocation)");
}

TEST(CudaWords, CudnnFailuresInWords) {
  // Without a device, cudnnCreate's NOT_INITIALIZED is said as CUDA says why; with one, as cuDNN's own.
  Status s = cudnn_status(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate(&h)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(has_source_text(s.message())) << s.message();
  EXPECT_NE(s.message().find("`kiln doctor` says more"), std::string::npos) << s.message();
  StatusOr<int> n = device_count();
  if (!n.is_ok()) {
    EXPECT_EQ(s.message().rfind("no usable CUDA device: ", 0), 0u) << s.message();
  }
  EXPECT_NE(s.trace().find("cudnnCreate(&h)"), std::string::npos) << s.trace();

  s = cudnn_status(CUDNN_STATUS_NOT_SUPPORTED, "cudnnSetStream(h, stream)");
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_EQ(s.message().rfind("cuDNN call cudnnSetStream failed: CUDNN_STATUS_NOT_SUPPORTED", 0), 0u) << s.message();
  EXPECT_FALSE(has_source_text(s.message())) << s.message();
}

TEST(CudaWords, AFailedReleaseLogsWords) {
  std::vector<std::string> logged;
  set_log_sink([&](LogLevel, const std::string& m) { logged.push_back(m); });
  cuda_call_noexcept(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(s)");
  set_log_sink(nullptr);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("releasing a CUDA resource (cudaStreamDestroy) failed: "), std::string::npos) << logged[0];
  EXPECT_FALSE(has_source_text(logged[0])) << logged[0];
}

TEST(CudaWords, SourceTextIsRecognised) {
  using cuda_detail::looks_like_source_text;
  EXPECT_TRUE(looks_like_source_text("cudaGetDeviceCount(&count) != cudaSuccess"));
  EXPECT_TRUE(looks_like_source_text("cudnnCreate(h)"));
  EXPECT_FALSE(looks_like_source_text("CUDNN_BACKEND_ENGINE_DESCRIPTOR: cudnnFinalize Descriptor Failed"));
  EXPECT_FALSE(looks_like_source_text("the driver is missing (cudaErrorInsufficientDriver)"));
  EXPECT_EQ(cuda_detail::call_name("cudaEventRecord(start)"), "cudaEventRecord");
  EXPECT_EQ(cuda_detail::call_name("kernel launch"), "kernel launch");
}

}  // namespace
}  // namespace kiln
