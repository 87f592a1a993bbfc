// Helpers for the `gpu` test tier.
#pragma once

#include <gtest/gtest.h>

#include "kiln/device.h"

// Skips the current test (reported as SKIPPED by CTest, never as passed) when no CUDA device is usable.
#define KILN_REQUIRE_GPU()                                                          \
  do {                                                                              \
    auto kiln_dev_ = ::kiln::device_count();                                        \
    if (!kiln_dev_.is_ok() || *kiln_dev_ == 0)                                      \
      GTEST_SKIP() << "no CUDA device: " << (kiln_dev_.is_ok() ? std::string("0 devices") \
                                                               : kiln_dev_.status().message()); \
  } while (0)
