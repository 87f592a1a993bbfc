// `kiln compile` as a user runs it on a machine with a GPU: every example compiles (the host tier hides the
// GPU from kiln; lower.CompileCli covers a machine without one).
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"
#include "gpu_test_util.h"
#include "kiln/core/exit_codes.h"

namespace kiln {
namespace {

using test::CliResult;
using test::run_kiln;

const std::string kRoot = KILN_SOURCE_DIR;

TEST(CompileCliWithAGpu, EveryGraphCompiles) {
  KILN_REQUIRE_GPU();
  test::TempDir dir("kiln_compile_cli");
  CliResult r =
      run_kiln("compile " + kRoot + "/examples/conv_bias_relu.json " + kRoot + "/examples/layer_norm.json " + kRoot +
               "/examples/sdpa_fwd.json --target " + kRoot + "/profiles/h200.json --store " + dir.file("plans.db"));
  // The precompiled conv engine builds anywhere: stored, untuned.
  EXPECT_NE(r.out.find("conv_bias_relu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("untuned"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_NE(r.out.find("compiled 3 of 3"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
