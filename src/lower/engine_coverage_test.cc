// Host tier: the engine coverage registry (lower/engine_coverage.h). Each entry is complete, its example is
// valid and named by it, and graphs cuDNN runs are named by none.
#include <gtest/gtest.h>

#include <set>

#include "kiln/spec/spec.h"
#include "lower/engine_coverage.h"

namespace kiln {
namespace {

using lower_detail::engine_coverage_gaps;
using lower_detail::name_engine_coverage_gap;

const std::string kRoot = KILN_SOURCE_DIR;

TEST(EngineCoverage, EntriesAreCompleteAndNameTheirExamples) {
  std::set<std::string> ids;
  for (const auto& gap : engine_coverage_gaps()) {
    EXPECT_TRUE(ids.insert(gap.id).second) << gap.id << " listed twice";
    EXPECT_FALSE(gap.seen_on.empty()) << gap.id;
    EXPECT_NE(std::string(gap.evidence).find("H200"), std::string::npos) << gap.id;
    auto g = parse_spec_string(gap.example_spec, gap.id);
    ASSERT_TRUE(g.is_ok()) << gap.id << ": " << g.status().to_string();
    EXPECT_FALSE(gap.find(*g).empty()) << gap.id << ": its example does not match it";
    const std::string named = name_engine_coverage_gap(*g);
    EXPECT_EQ(named.rfind(std::string(gap.id) + ": ", 0), 0u) << named;
    EXPECT_NE(named.find("(seen on cuDNN 91900)"), std::string::npos) << named;
  }
}

// Graphs the H200 runs (the examples, a packed fp32 reduction) are in no gap.
TEST(EngineCoverage, GraphsCuDnnRunsAreNamedByNone) {
  for (const char* f : {"conv_bias_relu", "matmul_bias_gelu", "layer_norm", "rms_norm", "sdpa_fwd", "matmul_amax"}) {
    auto g = parse_spec_file(kRoot + "/examples/small/" + f + ".json");
    ASSERT_TRUE(g.is_ok()) << f << ": " << g.status().to_string();
    EXPECT_EQ(name_engine_coverage_gap(*g), "") << f;
  }
  auto red = parse_spec_string(R"({"name": "r", "io_dtype": "fp16", "tensors": {"x": {"dims": [64, 128]},
    "y": {"dtype": "fp32"}}, "nodes": [{"name": "r", "op": "reduce_sum", "inputs": ["x"], "outputs": ["y"],
    "axes": [1]}], "outputs": ["y"]})",
                               "r.json");
  ASSERT_TRUE(red.is_ok()) << red.status().to_string();
  EXPECT_EQ(name_engine_coverage_gap(*red), "");
}

// An fp16 reduction output is named with the fix (declare it fp32).
TEST(EngineCoverage, AReductionWritingFp16SaysToDeclareFp32) {
  auto g = parse_spec_string(engine_coverage_gaps()[0].example_spec, "t.json");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(name_engine_coverage_gap(*g),
            "reduction_output_not_fp32: node 'r' (reduce_sum) writes 'y' as fp16 (declare it \"dtype\": \"fp32\", and "
            "cast after it if needed): cuDNN offers no standalone reduction engine that writes fp16 or bf16 (it does "
            "for an fp32 output) (seen on cuDNN 91900)");
}

}  // namespace
}  // namespace kiln
