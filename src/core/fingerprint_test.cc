// EnvFingerprint's version texts (kiln/core/fingerprint.h): what `kiln doctor`, `kiln plans ls` and every
// stale-plan message print for a recorded version, so a wrong digit misleads a user about why a plan is stale.
#include <gtest/gtest.h>

#include "kiln/core/fingerprint.h"

namespace kiln {
namespace {

// cuDNN 9 and the frontend encode major*10000 + minor*100 + patch.
TEST(EnvFingerprint, CudnnVersionText) {
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(92000), "9.20.0");
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(90102), "9.1.2");
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(91011), "9.10.11");
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(12300), "1.23.0");  // the frontend's 1.23.0
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(13200), "1.32.0");
  EXPECT_EQ(EnvFingerprint::cudnn_version_string(0), "0.0.0");  // not recorded
}

// CUDA encodes major*1000 + minor*10.
TEST(EnvFingerprint, CudaVersionText) {
  EXPECT_EQ(EnvFingerprint::cuda_version_string(13000), "13.0");
  EXPECT_EQ(EnvFingerprint::cuda_version_string(12080), "12.8");
  EXPECT_EQ(EnvFingerprint::cuda_version_string(12090), "12.9");
  EXPECT_EQ(EnvFingerprint::cuda_version_string(11020), "11.2");
  EXPECT_EQ(EnvFingerprint::cuda_version_string(0), "0.0");
}

TEST(EnvFingerprint, ADefaultFingerprintIsEmptyAndDeviceless) {
  const EnvFingerprint f;
  EXPECT_TRUE(f.gpu_name.empty());
  EXPECT_EQ(f.sm_version, 0);
  EXPECT_EQ(f.cudnn_version, 0);
  EXPECT_FALSE(f.has_device);
}

}  // namespace
}  // namespace kiln
