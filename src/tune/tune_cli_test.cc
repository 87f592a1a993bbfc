// `kiln tune` as a user runs it, where no GPU is needed: recorded inputs are checked before the GPU is
// touched (exit 2, naming the tensor and the file).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct CliRun {
  int code = -1;
  std::string err;
};

CliRun run_kiln(const std::string& args) {
  const std::string dir = ::testing::TempDir() + "/kiln_tune_cli_" + std::to_string(::getpid());
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string err = dir + "/err.txt";
  const std::string cmd = std::string("\"") + KILN_BINARY + "\" " + args + " >/dev/null 2>" + err;
  const int rc = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  r.err = s.str();
  return r;
}

TEST(TuneCli, RecordedInputsAreCheckedBeforeTheGpu) {
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json";
  CliRun r = run_kiln("tune " + spec + " --inputs /nonexistent/kiln_inputs");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--inputs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no file '/nonexistent/kiln_inputs/x.bin'"), std::string::npos) << r.err;
}

}  // namespace
