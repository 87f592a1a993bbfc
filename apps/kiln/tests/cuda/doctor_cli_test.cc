// `kiln doctor` as a user runs it without a GPU: one clear line and exit code 3 (environment). The host tier
// hides the GPU from kiln (tests/cli_test_util.h), so this holds on any machine; with one, every fingerprint
// field filled and exit 0 (cuda.gpu.DoctorCliWithAGpu).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "doctor_test_util.h"
#include "kiln/core/exit_codes.h"

namespace kiln {
namespace {

using test::CliResult;
using test::run_kiln;

TEST(DoctorCli, HumanOutput) {
  CliResult r = run_kiln("doctor");
  EXPECT_NE(r.output().find("cuDNN (loaded)"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("cuDNN Frontend       1.32.0"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("cuBLASLt (loaded)    "), std::string::npos) << r.output();
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  // Exactly one error line, and it says what is wrong.
  size_t first = r.output().find("kiln: Unavailable: no GPU");
  ASSERT_NE(first, std::string::npos) << r.output();
  EXPECT_EQ(r.output().find("kiln: ", first + 1), std::string::npos) << r.output();
}

TEST(DoctorCli, JsonHasEveryField) {
  CliResult r = run_kiln("doctor --json");
  const nlohmann::json j = test::doctor_json(r);
  ASSERT_FALSE(j.is_discarded()) << r.output();
  test::expect_doctor_fields(j);
  EXPECT_EQ(r.code, kExitEnvironment);
  EXPECT_FALSE(j["device_ok"].get<bool>());
  EXPECT_TRUE(j.contains("device_error"));
  // The cuBLASLt of the process (docs/measure.md, cuBLASLt's candidates): linked, so loaded, with or without a GPU.
  ASSERT_TRUE(j.contains("cublaslt_version")) << r.output();
  EXPECT_GE(j["cublaslt_version"].get<int64_t>(), 120000) << r.output();
  EXPECT_NE(j["cublaslt_library_path"].get<std::string>().find("libcublasLt.so"), std::string::npos) << r.output();
}

// The order in which a Planner asks its plan sources, as kiln/runtime/source_chain.h writes it.
TEST(DoctorCli, JsonListsThePlanSourceChain) {
  CliResult r = run_kiln("doctor --json");
  const nlohmann::json j = test::doctor_json(r);
  ASSERT_TRUE(j.contains("source_chain")) << r.output();
  const nlohmann::json& order = j["source_chain"]["order"];
  ASSERT_EQ(order.size(), 9u) << r.output();
  EXPECT_EQ(order[0]["name"], "memory");
  EXPECT_EQ(order[2]["name"], "store");
  EXPECT_EQ(order[8]["name"], "heuristics");
  EXPECT_EQ(j["source_chain"]["asked_for"].size(), 2u);
  CliResult text = run_kiln("doctor");
  EXPECT_NE(text.output().find("plan sources         memory > segments > store > split > padded"), std::string::npos)
      << text.output();
}

TEST(DoctorCli, BadFlagIsUsageError) {
  CliResult r = run_kiln("doctor --no-such-flag");
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("no-such-flag"), std::string::npos) << r.output();
}

}  // namespace
}  // namespace kiln
