// `kiln run --reference both` as a user runs it, on the GPU: every reference reported (the host tier hides the
// GPU from kiln; runtime.RunCli covers what is decided before the GPU is touched).
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"
#include "gpu_test_util.h"  // a skip for want of a GPU fails where one is expected (KILN_EXPECT_GPU)

namespace {

using kiln::test::CliResult;
using kiln::test::run_kiln;

std::string ex(const std::string& rel) { return std::string(KILN_SOURCE_DIR) + "/examples/" + rel; }

// Accepted options go on to the GPU: exit 0 with a GPU (every reference reported), 3 without one; never 2.
TEST(RunCli, BothReferencesAreReported) {
  CliResult r = run_kiln("run " + ex("small/matmul_amax.json") + " --reference both");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) KILN_SKIP_WITHOUT_GPU("no GPU: " + r.err);
  EXPECT_NE(r.out.find("verify against the host reference:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

TEST(RunCli, BothWithTheHostOverItsCapReportsItNotSupported) {
  CliResult r = run_kiln("run " + ex("small/matmul_amax.json") + " --reference both --host-max-macs 100");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) KILN_SKIP_WITHOUT_GPU("no GPU: " + r.err);
  EXPECT_NE(r.out.find("host reference: NotSupported: graph 'matmul_amax_small' needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

}  // namespace
