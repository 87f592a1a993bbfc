// `kiln doctor` as a user runs it on a machine with a GPU: every fingerprint field filled and exit 0 (the host
// tier hides the GPU from kiln; cuda.DoctorCli covers a machine without one).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "doctor_test_util.h"
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
  const nlohmann::json j = test::doctor_json(r);
  ASSERT_FALSE(j.is_discarded()) << r.output();
  test::expect_doctor_fields(j);
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_FALSE(j["gpu_name"].get<std::string>().empty());
  EXPECT_GT(j["sm_count"].get<int>(), 0);
  EXPECT_EQ(j["device_uuid"].get<std::string>().rfind("GPU-", 0), 0u);
}

}  // namespace
}  // namespace kiln
