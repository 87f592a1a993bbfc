// Device tier: every known cuDNN defect (src/lower/known_defects.h) is worked around on this GPU: its
// example graph is right through `kiln run`'s path (heuristics, checked against the host reference) and
// in every engine configuration `kiln tune` tries. Each case also reports whether this cuDNN still shows
// the defect when the graph is lowered as written, so that a new cuDNN can be checked against the table
// and a fixed defect dropped.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/runner.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/device_io.h"
#include "kiln/tune/tuner.h"
#include "kiln/validate/reference.h"
#include "lower/known_defects.h"

namespace kiln {
namespace {

using lower_detail::known_defects;

// Engine configurations that compute `g` wrong when it is lowered as written: {wrong, built}.
std::pair<int, int> wrong_without_workaround(const Graph& g) {
  auto handle = make_cudnn_handle();
  if (!handle.is_ok()) return {-1, 0};
  LowerTarget raw;
  raw.handle = handle->get();
  raw.work_around_known_defects = false;
  auto lg = LoweredGraph::create(g, raw);
  if (!lg.is_ok()) return {-1, 0};
  auto cands = lg->list_candidates({HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback});
  auto inputs = make_random_inputs(g, 9);
  if (!cands.is_ok() || !inputs.is_ok()) return {-1, 0};
  auto ref = run_host_reference(g, *inputs);
  if (!ref.is_ok()) return {-1, 0};
  int wrong = 0, built = 0;
  for (const CandidateInfo& c : *cands) {
    auto one = LoweredGraph::create(g, raw);
    if (!one.is_ok() || !one->build_config(c.config).is_ok()) continue;
    ++built;
    auto buffers = allocate_graph_buffers(g, *inputs, one->workspace_size());
    if (!buffers.is_ok() || !one->execute(handle->get(), buffers->pointers(), buffers->workspace.data()).is_ok()) {
      ++wrong;
      continue;
    }
    auto outs = download_outputs(g, *buffers);
    auto check = outs.is_ok() ? check_outputs(g, *outs, *ref) : StatusOr<CheckReport>(outs.status());
    if (!check.is_ok() || check->verdict != Disposition::kPassed) ++wrong;
  }
  return {wrong, built};
}

class KnownDefects : public ::testing::TestWithParam<size_t> {};

TEST_P(KnownDefects, WorkedAroundOnThisGpu) {
  KILN_REQUIRE_GPU();
  const lower_detail::KnownDefect& d = known_defects()[GetParam()];
  auto g = parse_spec_string(d.example_spec, d.id);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();

  RunOptions run;
  run.verify = true;
  run.reference = ReferenceChoice::kHost;
  run.seed = 3;
  auto rep = run_graph(*g, run);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->verdict(), Disposition::kPassed) << (rep->check ? rep->check->summary() : std::string("no check"));
  bool said = false;
  for (const std::string& r : rep->reasons) said = said || r.find(d.id) != std::string::npos;
  EXPECT_TRUE(said) << "kiln run did not report the workaround";

  TuneOptions tune;
  tune.measure.stopping.time_budget_ms = 20;
  tune.measure.stopping.min_samples = 3;
  auto tr = tune_graph(*g, tune);
  ASSERT_TRUE(tr.is_ok()) << tr.status().to_string();
  int passed = 0;
  for (const CandidateResult& c : tr->candidates) {
    EXPECT_NE(c.disposition, Disposition::kIncorrect) << c.identity() << ": " << c.message;
    passed += c.disposition == Disposition::kPassed ? 1 : 0;
  }
  EXPECT_GT(passed, 0);

  auto [wrong, built] = wrong_without_workaround(*g);
  std::printf("[ defect ] %s on cuDNN %zu: with the workaround %d of %zu configurations passed; as written %d of %d "
              "were wrong%s\n",
              d.id, cudnnGetVersion(), passed, tr->candidates.size(), wrong, built,
              wrong == 0 && built > 0 ? " (the defect no longer shows here: check the other supported cuDNN versions "
                                        "and drop it from the table)"
                                      : "");
}

INSTANTIATE_TEST_SUITE_P(Table, KnownDefects, ::testing::Range<size_t>(0, known_defects().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(known_defects()[info.param].id);
                         });

}  // namespace
}  // namespace kiln
