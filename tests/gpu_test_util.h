// Helpers for the `gpu` test tier.
//
// Without a GPU a GPU test skips (reported as SKIPPED by CTest, never as passed), so the host tier and CI
// stay green on CPU-only machines. Where a GPU is expected, a skip would hide a broken environment (a
// driver mismatch makes every CUDA call fail, and "100% tests passed" with everything skipped): with the
// environment variable KILN_EXPECT_GPU set (to anything but "" or "0"; scripts/gpu-tier.sh sets it), every
// would-be skip for want of a GPU is a test failure that names the reason.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/cuda/device.h"

namespace kiln::gpu_tier {

// True when KILN_EXPECT_GPU asks for a GPU: a missing or unusable one is then a failure, not a skip.
inline bool gpu_expected() {
  const char* v = std::getenv("KILN_EXPECT_GPU");
  return v && *v && std::strcmp(v, "0") != 0;
}

// Why no CUDA device is usable here ("no usable CUDA device: <the CUDA error>"), or "" when one is.
inline std::string why_no_gpu() {
  auto n = ::kiln::device_count();
  if (!n.is_ok()) return n.status().message();
  if (*n == 0) return "no usable CUDA device: 0 devices";
  return "";
}

}  // namespace kiln::gpu_tier

// Skips the current test when a GPU is not usable for `reason`, or fails it when KILN_EXPECT_GPU is set.
// Must be used in the test body (like GTEST_SKIP and FAIL, it returns from the current function).
#define KILN_SKIP_WITHOUT_GPU(reason)                                                   \
  do {                                                                                  \
    if (::kiln::gpu_tier::gpu_expected())                                               \
      FAIL() << "KILN_EXPECT_GPU is set, so this test may not skip, but: " << (reason); \
    GTEST_SKIP() << (reason);                                                           \
  } while (0)

// Skips the current test when no CUDA device is usable (or fails it when KILN_EXPECT_GPU is set).
#define KILN_REQUIRE_GPU()                                    \
  do {                                                        \
    std::string kiln_why_ = ::kiln::gpu_tier::why_no_gpu();   \
    if (!kiln_why_.empty()) KILN_SKIP_WITHOUT_GPU(kiln_why_); \
  } while (0)
