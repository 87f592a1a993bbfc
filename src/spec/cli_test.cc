// `kiln validate` and `kiln signature` run as a user runs them: exit codes and messages.
#include <sys/stat.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

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

// A folder of this test process's own: CTest runs test cases in parallel processes, and fixed names
// in the shared temp folder let one case read another's output (seen in CI as flaky Cli cases).
std::string test_dir() {
  static const std::string dir = [] {
    std::string d = ::testing::TempDir() + "/kiln_cli_" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

CliRun run_kiln(const std::string& args) {
  std::string dir = test_dir();
  std::string out = dir + "/kiln_cli_out.txt", err = dir + "/kiln_cli_err.txt";
  std::string cmd = std::string("\"") + KILN_BINARY + "\" " + args + " >" + out + " 2>" + err;
  int st = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string ex(const std::string& rel) { return std::string(KILN_SOURCE_DIR) + "/examples/" + rel; }

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = test_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, ValidateGoodSpecs) {
  CliRun r = run_kiln("validate " + ex("conv_bias_relu.json") + " " + ex("small/sdpa_fwd.json"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("OK"), std::string::npos);
  EXPECT_NE(r.out.find("conv_fprop"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch=32"), std::string::npos) << r.out;
}

TEST(Cli, ValidateBadSpecExits2WithNamedError) {
  std::string bad = write_temp("bad_rank.json", R"({"tensors": {"x": {"dims": [2, 8, 9, 9]}, "w": {"dims": [16, 8, 3]}},
    "nodes": [{"name": "conv1", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]})");
  CliRun r = run_kiln("validate " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad_rank.json: node 'conv1' (conv_fprop): input 'w': rank 3, expected 4"), std::string::npos)
      << r.err;
}

// Bad fused-vs-unfused options are bad usage, named, before any GPU work (so also on a machine without one).
TEST(Cli, TuneNamesABadFusionPolicyOrMaterializeDtype) {
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/matmul_bias_gelu.json";
  CliRun r = run_kiln("tune " + spec + " --fusion-policy bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown fusion policy 'bogus' (expected faster, always_fused or always_unfused)"), std::string::npos) << r.err;
  r = run_kiln("tune " + spec + " --materialize fp64");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--materialize: unknown dtype 'fp64'"), std::string::npos) << r.err;
}

TEST(Cli, ValidateMalformedAndMissing) {
  std::string bad = write_temp("malformed.json", "{\"tensors\": [\n");
  CliRun r = run_kiln("validate " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("malformed.json: malformed JSON at byte"), std::string::npos) << r.err;
  r = run_kiln("validate /nonexistent/x.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/x.json: cannot open spec file"), std::string::npos) << r.err;
  r = run_kiln("validate");
  EXPECT_EQ(r.code, 2);  // usage
}

TEST(Cli, ValidateSeveralReportsEachFailure) {
  std::string bad = write_temp("unknown_op.json", R"({"tensors": {"x": {"dims": [2]}},
    "nodes": [{"name": "n", "op": "nope", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  CliRun r = run_kiln("validate " + ex("matmul_amax.json") + " " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("OK"), std::string::npos);
  EXPECT_NE(r.err.find("FAIL "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown_op.json: node 'n': unknown op 'nope'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 of 2 specs are invalid"), std::string::npos) << r.err;
}

TEST(Cli, ValidateTargetSm) {
  CliRun r = run_kiln("validate --target-sm 75 " + ex("small/sdpa_fwd.json"));
  EXPECT_EQ(r.code, 5);  // not supported on the target
  EXPECT_NE(r.err.find("node 'attn' (sdpa): sdpa needs SM 8.0"), std::string::npos) << r.err;
}

TEST(Cli, Signature) {
  CliRun r = run_kiln("signature " + ex("conv_bias_relu.json"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("structure  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shape_key  batch=32"), std::string::npos) << r.out;
  CliRun small = run_kiln("signature --json --canonical " + ex("small/conv_bias_relu.json"));
  EXPECT_EQ(small.code, 0) << small.err;
  EXPECT_NE(small.out.find("\"shape_key\": \"batch=2\""), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("\"canonical\": \"kiln-graph 1"), std::string::npos) << small.out;
  // Same structure, other batch: the structure hash is the same.
  std::string line = r.out.substr(0, r.out.find('\n'));
  std::string hash = line.substr(line.rfind(' ') + 1);
  EXPECT_EQ(hash.size(), 32u);
  CliRun bad = run_kiln("signature /nonexistent/x.json");
  EXPECT_EQ(bad.code, 2);
}

}  // namespace
