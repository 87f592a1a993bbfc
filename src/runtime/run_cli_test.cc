// `kiln run --reference/--host-max-macs` as a user runs them: parsing, errors and the host reference's
// cost cap are decided before the GPU is touched, so these hold on a machine without one. Where a case
// needs the GPU to go further, it accepts exit 3 (no GPU) and checks the output only when it ran.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gpu_test_util.h"  // a skip for want of a GPU fails where one is expected (KILN_EXPECT_GPU)
#include "kiln/cuda/device.h"

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
                                     "got '") +
                         bad + "'"),
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
  if (r.code == 3) KILN_SKIP_WITHOUT_GPU("no GPU: " + r.err);
  EXPECT_NE(r.out.find("verify against the host reference:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

TEST(RunCli, BothWithTheHostOverItsCapReportsItNotSupported) {
  CliRun r = run_kiln("run " + ex("small/matmul_amax.json") + " --reference both --host-max-macs 100");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) KILN_SKIP_WITHOUT_GPU("no GPU: " + r.err);
  EXPECT_NE(r.out.find("host reference: NotSupported: graph 'matmul_amax_small' needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify against the device reference:"), std::string::npos) << r.out;
}

// ---- without a GPU (issue 10 case 7): one plain line, exit 3, no C++ source text ---------------------------

bool has_gpu() {
  kiln::StatusOr<int> n = kiln::device_count();
  return n.is_ok() && *n > 0;
}

// What C++ source looks like in a message: a call "name(", an address-of "&", a comparison or a scope.
std::string source_text_in(const std::string& msg) {
  for (const char* token : {"&", "!=", "==", "::", "->", "?"})
    if (msg.find(token) != std::string::npos) return token;
  for (size_t i = 1; i < msg.size(); ++i)
    if (msg[i] == '(' && (std::isalnum(static_cast<unsigned char>(msg[i - 1])) || msg[i - 1] == '_'))
      return msg.substr(i < 30 ? 0 : i - 30, 31);
  return "";
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// `start`: how the one line on stderr starts.
void expect_plain_no_gpu_line(const CliRun& r, const std::string& what,
                              const std::string& start = "kiln: Unavailable: no usable CUDA device: ") {
  EXPECT_EQ(r.code, 3) << what << ": " << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1u) << what << ": " << r.err;
  EXPECT_EQ(r.err.rfind(start, 0), 0u) << what << ": " << r.err;
  EXPECT_NE(r.err.find("the driver is missing or older than the CUDA runtime (cudaErrorInsufficientDriver)"),
            std::string::npos)
      << what << ": " << r.err;
  EXPECT_EQ(source_text_in(r.err), "") << what << ": " << r.err;
}

TEST(RunCli, RunWithoutAGpuSaysSoPlainly) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  CliRun r = run_kiln("run " + ex("small/conv_bias_relu.json"));
  expect_plain_no_gpu_line(r, "run");
  EXPECT_NE(r.err.find("`kiln doctor` says more"), std::string::npos) << r.err;
}

TEST(RunCli, TuneWithoutAGpuSaysSoPlainly) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  CliRun r = run_kiln("tune " + ex("small/conv_bias_relu.json") + " --store " + test_dir() + "/t.db");
  expect_plain_no_gpu_line(r, "tune");
  EXPECT_NE(r.err.find("`kiln doctor` says more"), std::string::npos) << r.err;
}

// -v keeps the path the error travelled, C++ and all, apart from the message.
TEST(RunCli, VerboseKeepsTheFailedCallInTheTrace) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  CliRun r = run_kiln("-v run " + ex("small/conv_bias_relu.json"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("trace:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cudaStreamCreateWithFlags(&s"), std::string::npos) << r.err;
}

// ---- files a run writes (issue 10 case 4) -----------------------------------------------------------------

// An existing output file is refused before the GPU is asked, so this holds on any machine.
TEST(RunCli, SaveOutputsRefusesAnExistingFileBeforeRunning) {
  const std::string dir = test_dir() + "/outputs";
  ::mkdir(dir.c_str(), 0755);
  const std::string y = dir + "/y.bin";
  std::ofstream(y) << "earlier outputs";
  CliRun r = run_kiln("run " + ex("small/conv_bias_relu.json") + " --save-outputs " + dir);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("output file " + y + " already exists (pass --force to write over it)"), std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(y), "earlier outputs");
  r = run_kiln("run " + ex("small/conv_bias_relu.json") + " --save-outputs " + dir + " --force");
  ASSERT_TRUE(r.code == 0 || r.code == 3) << r.code << "\n" << r.out << r.err;
  if (r.code == 3) {
    EXPECT_EQ(slurp(y), "earlier outputs");  // no GPU: nothing ran, nothing written
  }
}

TEST(RunCli, ProfileRecordRefusesAnExistingFileBeforeAskingTheGpu) {
  const std::string out = test_dir() + "/device.json";
  std::ofstream(out) << "{}";
  CliRun r = run_kiln("profile record --out " + out);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("device profile " + out + " already exists (pass --force to write over it)"), std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(out), "{}");
  if (has_gpu()) return;
  // Without a GPU a new file is not created, and the message is plain.
  const std::string fresh = test_dir() + "/fresh_device.json";
  std::remove(fresh.c_str());
  r = run_kiln("profile record --out " + fresh);
  expect_plain_no_gpu_line(r, "profile record",
                           "kiln: Unavailable: profile record reads this machine's GPU: no usable CUDA device: ");
  struct stat st {};
  EXPECT_NE(::stat(fresh.c_str(), &st), 0);
}

}  // namespace
