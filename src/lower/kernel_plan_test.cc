// Host tier: which graphs Kiln's own kernels are offered for (src/lower/kernel_plan.h), their configurations, and
// bytes and identities they refuse without a device. The GPU tier (kernel_plan_gpu_test.cc) runs them.
#include <gtest/gtest.h>

#include <string>

#include "kiln/spec/spec.h"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

// reduce_amax of x (a JSON tensor object) over `axes` into an fp32 "amax" of `out_dims`.
Graph amax_graph(const std::string& x, const std::string& axes, const std::string& out_dims) {
  const std::string spec = R"({"name": "amax", "io_dtype": "bf16", "tensors": {"x": )" + x + R"(, "amax": {"dims": )" +
                           out_dims + R"(, "dtype": "fp32"}}, "nodes": [{"name": "r",
                           "op": "reduce_amax", "inputs": ["x"], "outputs": ["amax"], "axes": )" +
                           axes + R"(}], "outputs": ["amax"]})";
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

TEST(KilnKernelMatch, TheWholeAmaxOfADenseTensor) {
  Graph g = amax_graph(R"({"dims": [1, 8192, 8192]})", "[0, 1, 2]", "[1, 1, 1]");
  std::string why;
  auto p = match_whole_amax(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->input, g.find_tensor("x"));
  EXPECT_EQ(p->output, g.find_tensor("amax"));
  EXPECT_EQ(p->dtype, DataType::kBFloat16);
  EXPECT_EQ(p->count, int64_t{8192} * 8192);
  // Axes of extent 1 may be left out.
  Graph h = amax_graph(R"({"dims": [1, 64, 32]})", "[1, 2]", "[1, 1, 1]");
  EXPECT_TRUE(match_whole_amax(h, &why)) << why;
}

TEST(KilnKernelMatch, OtherReductionsSayWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  } cases[] = {
      {"rows", amax_graph(R"({"dims": [1, 64, 32]})", "[2]", "[1, 64, 1]"), "keeps axis 1"},
      {"strided", amax_graph(R"({"dims": [1, 64, 32], "strides": [4096, 64, 1]})", "[0, 1, 2]", "[1, 1, 1]"),
       "not densely packed"},
      {"fp8", amax_graph(R"({"dims": [1, 64, 32], "dtype": "fp8_e4m3"})", "[0, 1, 2]", "[1, 1, 1]"), "is fp8_e4m3"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_whole_amax(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
}

TEST(KilnKernelPlan, SixLaunchConfigurationsAndNoOthers) {
  Graph g = amax_graph(R"({"dims": [1, 64, 32]})", "[0, 1, 2]", "[1, 1, 1]");
  auto p = match_whole_amax(g, nullptr);
  ASSERT_TRUE(p);
  auto c = KernelPlan::candidates(*p);
  ASSERT_TRUE(c.is_ok());
  ASSERT_EQ(c->size(), 6u);
  EXPECT_EQ(c->front().identity(), "knl1_blocks=2_threads=256");
  EXPECT_EQ(c->back().identity(), "knl1_blocks=8_threads=512");
  // Refused before any device is asked: another kernel, a knob it lacks, values out of range.
  for (const char* bad : {"knl2_blocks=2_threads=256", "knl1_blocks=2", "knl1_blocks=2_threads=100",
                          "knl1_blocks=0_threads=256", "knl1_blocks=2_threads=256_tile=1"}) {
    auto built = KernelPlan::build(*p, *EngineConfig::parse(bad));
    ASSERT_FALSE(built.is_ok()) << bad;
    EXPECT_EQ(built.status().code(), StatusCode::kNotSupported) << bad;
    EXPECT_NE(built.status().message().find(bad), std::string::npos) << built.status().message();
  }
  for (const std::string& junk : {std::string("KILNKRN1\n"), std::string("KILNKRN1\nblt66"), std::string("eng1")}) {
    auto back = KernelPlan::deserialize(*p, std::vector<uint8_t>(junk.begin(), junk.end()));
    ASSERT_FALSE(back.is_ok()) << junk;
    EXPECT_EQ(back.status().code(), StatusCode::kCorruption) << junk;
  }
}

}  // namespace
}  // namespace kiln::lower_detail
