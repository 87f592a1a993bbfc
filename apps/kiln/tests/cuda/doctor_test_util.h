// Shared by `kiln doctor`'s CLI tests with and without a GPU (doctor_cli_test.cc, doctor_cli_gpu_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kiln::test {

// The JSON object `kiln doctor --json` printed (discarded when there is none), and the fields it always has,
// whether or not there is a GPU.
inline nlohmann::json doctor_json(const CliResult& r) {
  const std::string text = r.output();
  const size_t brace = text.find('{'), end = text.rfind('}');
  if (brace == std::string::npos || end == std::string::npos || end < brace)
    return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.substr(brace, end - brace + 1), nullptr, false);
}

inline void expect_doctor_fields(const nlohmann::json& j) {
  for (const char* key :
       {"gpu_name", "compute_capability", "sm_count", "device_uuid", "driver_version", "cuda_runtime_version",
        "cudnn_version", "cudnn_frontend_version", "kiln_version", "kiln_git_revision"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["cudnn_frontend_version"], 13200);  // the pin in scripts/setup.sh
  EXPECT_GT(j["cudnn_version"].get<int>(), 90000);
}

}  // namespace kiln::test
