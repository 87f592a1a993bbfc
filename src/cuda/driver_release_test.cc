// The kernel driver's release read from /proc/driver/nvidia/version's text (kiln/cuda/nvml.h), as the
// proprietary and the open kernel modules write it.
#include <gtest/gtest.h>

#include "kiln/cuda/nvml.h"

namespace kiln {
namespace {

TEST(DriverRelease, ReadFromTheProprietaryModulesLine) {
  EXPECT_EQ(driver_release_from_proc_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 "
                                          "20:02:41 UTC 2025"),
            "580.159.04");
}

TEST(DriverRelease, ReadFromTheOpenModulesLine) {
  EXPECT_EQ(driver_release_from_proc_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  "
                                          "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 2025"),
            "570.86.15");
}

TEST(DriverRelease, NothingWhereTheTextHasNoRelease) {
  EXPECT_EQ(driver_release_from_proc_text(""), "");
  EXPECT_EQ(driver_release_from_proc_text("NVRM version: something else 580.1"), "");
  EXPECT_EQ(driver_release_from_proc_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  unknown"), "");
  EXPECT_EQ(driver_release_from_proc_text("Kernel Module 580"), "");  // no dot: not a release
}

// On this machine: /proc's answer where the driver is loaded, NVML's otherwise (none here without a GPU).
TEST(DriverRelease, AgreesWithNvmlWhereBothAnswer) {
  const std::string nvml = nvml_driver_release();
  const std::string release = driver_release();
  if (nvml.empty()) GTEST_SKIP() << "NVML does not answer here (no driver): /proc gave '" << release << "'";
  EXPECT_EQ(release, nvml);
}

}  // namespace
}  // namespace kiln
