// Device tier: two configurations of one graph re-run side by side (kiln/tools/plan_rerun.h, `kiln plans diff
// --rerun`): both built here, both checked against the reference, their outputs compared with each other and both
// timed; a configuration this cuDNN does not offer is reported as such, and the other side still runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gpu_test_util.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "kiln/tools/plan_rerun.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

// The first `n` configurations heuristic mode A offers for `g` that build here.
std::vector<EngineConfig> buildable(const Graph& g, cudnnHandle_t handle, size_t n) {
  LowerTarget t;
  t.handle = handle;
  auto lg = LoweredGraph::create(g, t);
  EXPECT_TRUE(lg.is_ok()) << lg.status().to_string();
  std::vector<EngineConfig> out;
  if (!lg.is_ok()) return out;
  auto cands = lg->list_candidates({HeuristicMode::kA});
  EXPECT_TRUE(cands.is_ok()) << cands.status().to_string();
  for (const CandidateInfo& c : cands.is_ok() ? *cands : std::vector<CandidateInfo>()) {
    auto probe = LoweredGraph::create(g, t);
    if (probe.is_ok() && probe->build_config(c.config).is_ok()) out.push_back(c.config);
    if (out.size() == n) break;
  }
  return out;
}

TEST(PlanRerun, TwoConfigurationsRunOnTheSameInputsAreCheckedComparedAndTimed) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/matmul_bias_gelu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  auto handle = make_cudnn_handle(stream->get());
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  std::vector<EngineConfig> configs = buildable(*g, handle->get(), 2);
  ASSERT_GE(configs.size(), 2u) << "the heuristic offers fewer than two buildable configurations";
  RerunOptions o;
  o.measure.stopping.time_budget_ms = 30;
  const RerunResult r = rerun_configs(*g, configs[0], configs[1], handle->get(), stream->get(), o);
  ASSERT_TRUE(r.both_ran()) << r.from.why << " | " << r.to.why;
  EXPECT_EQ(r.from.config, configs[0].identity());
  EXPECT_EQ(r.to.config, configs[1].identity());
  EXPECT_EQ(r.from.check.verdict, Disposition::kPassed) << r.from.check.message;
  EXPECT_EQ(r.to.check.verdict, Disposition::kPassed) << r.to.check.message;
  EXPECT_GT(r.from.median_ms, 0);
  EXPECT_GT(r.to.median_ms, 0);
  EXPECT_GE(r.from.samples, o.rounds);
  EXPECT_NEAR(r.time_ratio, r.to.median_ms / r.from.median_ms, 1e-12);
  // Two correct plans of one bf16 graph agree within a few bf16 ulps of the outputs' size, never exactly by luck of
  // a shared buffer: the outputs were read from two allocations.
  EXPECT_TRUE(std::isfinite(r.max_abs_between));
  EXPECT_LT(r.nmse_between, 1e-3);
  std::printf("[ rerun ] %s %.4f ms vs %s %.4f ms (x%.3f); max |to-from| %.3g, nmse %.3g\n", r.from.config.c_str(),
              r.from.median_ms, r.to.config.c_str(), r.to.median_ms, r.time_ratio, r.max_abs_between, r.nmse_between);

  // A configuration this cuDNN does not offer (an old version's engine): that side says so; the other still runs.
  const RerunResult gone = rerun_configs(*g, EngineConfig{9999, {}}, configs[0], handle->get(), stream->get(), o);
  EXPECT_FALSE(gone.from.ran);
  EXPECT_NE(gone.from.why.find("not offered by this cuDNN"), std::string::npos) << gone.from.why;
  EXPECT_TRUE(gone.to.ran) << gone.to.why;
  EXPECT_EQ(gone.to.check.verdict, Disposition::kPassed) << gone.to.check.message;
  EXPECT_FALSE(gone.both_ran());
  EXPECT_EQ(gone.time_ratio, 0);
}

}  // namespace
}  // namespace kiln
