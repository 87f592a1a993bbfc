// `kiln run --reference/--host-max-macs` as a user runs them: parsing, errors and the host reference's
// cost cap are decided before the GPU is touched, so these hold on a machine without one. Where a case
// needs the GPU to go further, it accepts exit 3 (no GPU) and checks the output only when it ran.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A folder of this test process's own (CTest runs cases in parallel processes).
std::string test_dir() {
  static const std::string dir = [] {
    std::string d = ::testing::TempDir() + "/kiln_run_cli_" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

CliRun run_kiln(const std::string& args) {
  const std::string out = test_dir() + "/out.txt", err = test_dir() + "/err.txt";
  const std::string cmd = std::string("\"") + KILN_BINARY + "\" " + args + " >" + out + " 2>" + err;
  const int st = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string ex(const std::string& rel) { return std::string(KILN_SOURCE_DIR) + "/examples/" + rel; }

TEST(RunCli, HelpListsTheReferenceOptions) {
  CliRun r = run_kiln("run --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("--reference"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("both"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--host-max-macs"), std::string::npos) << r.out;
}

TEST(RunCli, UnknownReferenceIsBadInput) {
  CliRun r = run_kiln("run " + ex("small/conv_wgrad.json") + " --reference hots");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("reference 'hots': expected one of auto, host, device, both"), std::string::npos) << r.err;
  r = run_kiln("run " + ex("small/conv_wgrad.json") + " --reference");
  EXPECT_EQ(r.code, 2) << r.out << r.err;  // the option needs a value
}

TEST(RunCli, HostCapMustBeAPositiveNumber) {
  for (const char* bad : {"0", "-5", "lots"}) {
    CliRun r = run_kiln("run " + ex("small/conv_wgrad.json") + " --verify --host-max-macs " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(std::string("--host-max-macs: expected a positive number of multiply-accumulates (e.g. 1e10), "
                                     "got '") + bad + "'"),
              std::string::npos)
        << bad << ": " << r.err;
  }
}

// examples/conv_wgrad.json needs 32*64*56*56*64*9 = 3.7e9 multiply-accumulates, over the default cap 2e9:
// --reference host is refused with exit 5 (not supported) before any GPU work, naming the way out.
TEST(RunCli, HostReferenceOverItsCapIsNotSupported) {
  CliRun r = run_kiln("run " + ex("conv_wgrad.json") + " --reference host");
  EXPECT_EQ(r.code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("--reference host: graph 'conv_wgrad' needs 3.7e+09 multiply-accumulates, over the host "
                       "reference cap of 2e+09 (raise the cap with --host-max-macs, or use the device reference)"),
            std::string::npos)
      << r.err;
  // A cap below a small graph's cost is refused the same way.
  r = run_kiln("run " + ex("small/conv_wgrad.json") + " --reference host --host-max-macs 1000");
  EXPECT_EQ(r.code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("over the host reference cap of 1e+03"), std::string::npos) << r.err;
}

// Accepted options go on to the GPU: exit 0 with a GPU (every reference reported), 3 without one; never 2.
TEST(RunCli, BothReferencesAreReported) {
  CliRun r = run_kiln("run " + ex("small/matmul_amax.json") + " --reference both");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) GTEST_SKIP() << "no GPU: " << r.err;
  EXPECT_NE(r.out.find("verify against the host reference:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

TEST(RunCli, BothWithTheHostOverItsCapReportsItNotSupported) {
  CliRun r = run_kiln("run " + ex("small/matmul_amax.json") + " --reference both --host-max-macs 100");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) GTEST_SKIP() << "no GPU: " << r.err;
  EXPECT_NE(r.out.find("host reference: NotSupported: graph 'matmul_amax_small' needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

}  // namespace
