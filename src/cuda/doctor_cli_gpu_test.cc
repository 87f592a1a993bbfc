// `kiln doctor` as a user runs it on a machine with a GPU: every fingerprint field filled and exit 0 (the host
// tier hides the GPU from kiln; cuda.DoctorCli covers a machine without one).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "gpu_test_util.h"
#include "kiln/core/exit_codes.h"

namespace kiln {
namespace {

using test::CliResult;
using test::run_kiln;

TEST(DoctorCliWithAGpu, HumanOutput) {
  KILN_REQUIRE_GPU();
  CliResult r = run_kiln("doctor");
  EXPECT_NE(r.output().find("cuDNN (loaded)"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("cuDNN Frontend       1.32.0"), std::string::npos) << r.output();
  EXPECT_EQ(r.code, kExitOk) << r.output();
}

TEST(DoctorCliWithAGpu, JsonHasEveryField) {
  KILN_REQUIRE_GPU();
  CliResult r = run_kiln("doctor --json");
  const std::string text = r.output();
  auto brace = text.find('{');
  ASSERT_NE(brace, std::string::npos) << text;
  auto end = text.rfind('}');
  auto j = nlohmann::json::parse(text.substr(brace, end - brace + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  for (const char* key :
       {"gpu_name", "compute_capability", "sm_count", "device_uuid", "driver_version", "cuda_runtime_version",
        "cudnn_version", "cudnn_frontend_version", "kiln_version", "kiln_git_revision"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["cudnn_frontend_version"], 13200);  // the pin in scripts/setup.sh
  EXPECT_GT(j["cudnn_version"].get<int>(), 90000);
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_FALSE(j["gpu_name"].get<std::string>().empty());
  EXPECT_GT(j["sm_count"].get<int>(), 0);
  EXPECT_EQ(j["device_uuid"].get<std::string>().rfind("GPU-", 0), 0u);
}

}  // namespace
}  // namespace kiln
