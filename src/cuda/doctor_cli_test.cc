// `kiln doctor` as a user runs it: without a GPU one clear line and exit code 3 (environment); with one,
// every fingerprint field filled and exit 0.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "kiln/core/exit_codes.h"
#include "kiln/cuda/device.h"

namespace kiln {
namespace {

struct Result {
  int code = -1;
  std::string out;
};

Result run(const std::string& args) {
  Result r;
  std::string cmd = std::string(KILN_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has_gpu() {
  auto n = device_count();
  return n.is_ok() && *n > 0;
}

TEST(DoctorCli, HumanOutput) {
  Result r = run("doctor");
  EXPECT_NE(r.out.find("cuDNN (loaded)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuDNN Frontend       1.32.0"), std::string::npos) << r.out;
  if (has_gpu()) {
    EXPECT_EQ(r.code, kExitOk) << r.out;
  } else {
    EXPECT_EQ(r.code, kExitEnvironment) << r.out;
    // Exactly one error line, and it says what is wrong.
    size_t first = r.out.find("kiln: Unavailable: no GPU");
    ASSERT_NE(first, std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("kiln: ", first + 1), std::string::npos) << r.out;
  }
}

TEST(DoctorCli, JsonHasEveryField) {
  Result r = run("doctor --json");
  auto brace = r.out.find('{');
  ASSERT_NE(brace, std::string::npos) << r.out;
  auto end = r.out.rfind('}');
  auto j = nlohmann::json::parse(r.out.substr(brace, end - brace + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  for (const char* key :
       {"gpu_name", "compute_capability", "sm_count", "device_uuid", "driver_version", "cuda_runtime_version",
        "cudnn_version", "cudnn_frontend_version", "kiln_version", "kiln_git_revision"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["cudnn_frontend_version"], 13200);  // the pin in scripts/setup.sh
  EXPECT_GT(j["cudnn_version"].get<int>(), 90000);
  if (has_gpu()) {
    EXPECT_EQ(r.code, kExitOk);
    EXPECT_FALSE(j["gpu_name"].get<std::string>().empty());
    EXPECT_GT(j["sm_count"].get<int>(), 0);
    EXPECT_EQ(j["device_uuid"].get<std::string>().rfind("GPU-", 0), 0u);
  } else {
    EXPECT_EQ(r.code, kExitEnvironment);
    EXPECT_FALSE(j["device_ok"].get<bool>());
    EXPECT_TRUE(j.contains("device_error"));
  }
}

TEST(DoctorCli, BadFlagIsUsageError) {
  Result r = run("doctor --no-such-flag");
  EXPECT_EQ(r.code, kExitBadInput) << r.out;
  EXPECT_NE(r.out.find("no-such-flag"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
