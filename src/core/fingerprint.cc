#include "kiln/core/fingerprint.h"

namespace kiln {

std::string EnvFingerprint::cudnn_version_string(int64_t v) {
  // cuDNN 9 (and the frontend) encode major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string EnvFingerprint::cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace kiln
