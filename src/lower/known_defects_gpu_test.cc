// Device tier: every known cuDNN defect (src/lower/known_defects.h) and every canonical rule
// (src/lower/canonicalize.h) holds on this GPU: its example graph is right through `kiln run`'s path
// (heuristics, checked against the host reference) and in every engine configuration `kiln tune` tries.
// Each case also reports whether this cuDNN still needs it when the graph is lowered as written, so that a
// new cuDNN can be checked against the tables and an entry no longer needed dropped. CanonicalShapes runs
// more shapes of the kinds the canonical rules rewrite.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/tune/tuner.h"
#include "kiln/validate/reference.h"
#include "lower/canonicalize.h"
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

void check_worked_around(const lower_detail::KnownDefect& d) {
  auto g = parse_spec_string(d.example_spec, d.id);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();

  RunOptions run;
  run.verify = true;
  run.reference = ReferenceChoice::kHost;
  run.seed = 3;
  if (!d.rewrite(*g, "example").is_ok()) {
    // A rule that refuses (its example faulted on the GPU): kiln run refuses it before cuDNN runs anything, and
    // it is never run as written here (a fault would end this process's CUDA context).
    auto refused = run_graph(*g, run);
    ASSERT_FALSE(refused.is_ok()) << d.id << ": ran";
    EXPECT_EQ(refused.status().code(), StatusCode::kNotSupported) << refused.status().to_string();
    std::printf("[ defect ] %s on cuDNN %zu: refused before cuDNN: %s\n", d.id, cudnnGetVersion(),
                refused.status().message().c_str());
    return;
  }
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
  const std::string as_written =
      wrong < 0 || built == 0 ? "as written it does not lower or build (no configuration to run)"
                              : "as written " + std::to_string(wrong) + " of " + std::to_string(built) + " were wrong";
  std::printf("[ defect ] %s on cuDNN %zu: with the workaround %d of %zu configurations passed; %s%s\n", d.id,
              cudnnGetVersion(), passed, tr->candidates.size(), as_written.c_str(),
              wrong == 0 && built > 0 ? " (the defect no longer shows here: check the other supported cuDNN versions "
                                        "and drop it from the table)"
                                      : "");
}

std::vector<const lower_detail::KnownDefect*> entries(const std::vector<lower_detail::KnownDefect>& table) {
  std::vector<const lower_detail::KnownDefect*> v;
  for (const auto& d : table) v.push_back(&d);
  return v;
}
std::string entry_name(const ::testing::TestParamInfo<const lower_detail::KnownDefect*>& info) {
  return info.param->id;
}

class KnownDefects : public ::testing::TestWithParam<const lower_detail::KnownDefect*> {};
TEST_P(KnownDefects, WorkedAroundOnThisGpu) {
  KILN_REQUIRE_GPU();
  check_worked_around(*GetParam());
}
INSTANTIATE_TEST_SUITE_P(Table, KnownDefects, ::testing::ValuesIn(entries(known_defects())), entry_name);

class CanonicalRules : public ::testing::TestWithParam<const lower_detail::KnownDefect*> {};
TEST_P(CanonicalRules, WorkedAroundOnThisGpu) {
  KILN_REQUIRE_GPU();
  check_worked_around(*GetParam());
}
INSTANTIATE_TEST_SUITE_P(Table, CanonicalRules, ::testing::ValuesIn(entries(lower_detail::canonical_rules())),
                         entry_name);

// A pointwise chain of `n` ops over [rows, cols] fp16: relu, add of a second input, tanh, mul, repeated.
std::string pointwise_chain(int n, int rows, int cols) {
  std::string nodes;
  std::string prev = "x";
  const char* ops[] = {"relu", "add", "tanh", "mul"};
  for (int i = 0; i < n; ++i) {
    const std::string op = ops[i % 4];
    const std::string out = i + 1 == n ? "y" : "t" + std::to_string(i);
    const bool binary = op == "add" || op == "mul";
    nodes += std::string(i ? ", " : "") + R"({"name": "n)" + std::to_string(i) + R"(", "op": ")" + op +
             R"(", "inputs": [")" + prev + (binary ? R"(", "b"])" : R"("])") + R"(, "outputs": [")" + out + R"("]})";
    prev = out;
  }
  const std::string d = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  return R"({"name": "chain", "io_dtype": "fp16", "compute_dtype": "fp32", "tensors": {"x": {"dims": )" + d +
         R"(}, "b": {"dims": )" + d + R"(}}, "nodes": [)" + nodes + R"(], "outputs": ["y"]})";
}

// Shapes of the kinds the canonical rules rewrite, each through `kiln run --verify`'s path against the
// host reference: every one must pass (before the rules: wrong past the first row, or refused).
TEST(CanonicalShapes, EachRunsRightThroughKilnRun) {
  KILN_REQUIRE_GPU();
  auto pw = [](const std::string& dtype, const std::string& op, const std::string& x, const std::string& b) {
    return R"({"name": "pw", "io_dtype": ")" + dtype + R"(", "compute_dtype": "fp32", "tensors": {"x": {"dims": )" + x +
           "}" + (b.empty() ? "" : R"(, "b": {"dims": )" + b + "}") + R"(}, "nodes": [{"name": "n", "op": ")" + op +
           R"(", "inputs": )" + (b.empty() ? R"(["x"])" : R"(["x", "b"])") +
           R"(, "outputs": ["y"]}], "outputs": ["y"]})";
  };
  auto mm = [](const std::string& dtype, const std::string& a, const std::string& w, const std::string& bias) {
    std::string t = R"("a": {"dims": )" + a + R"(}, "w": {"dims": )" + w + "}";
    std::string nodes = R"({"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": [")" +
                        std::string(bias.empty() ? "y" : "c") + R"("]})";
    if (!bias.empty()) {
      t += R"(, "bias": {"dims": )" + bias + "}";
      nodes += R"(, {"name": "bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["y"]})";
    }
    return R"({"name": "mm", "io_dtype": ")" + dtype +
           R"(", "intermediate_dtype": "fp32", "compute_dtype": "fp32", "tensors": {)" + t + R"(}, "nodes": [)" +
           nodes + R"(], "outputs": ["y"]})";
  };
  const std::vector<std::string> specs = {
      pw("fp32", "relu", "[4, 4]", ""),
      pw("fp16", "relu", "[256, 4096]", ""),
      pw("fp32", "relu", "[256, 4096]", ""),
      pw("fp16", "add", "[256, 4096]", "[256, 4096]"),
      pw("bf16", "gelu_erf", "[33, 517]", ""),
      pw("fp32", "sigmoid", "[1000]", ""),
      pw("fp16", "add", "[4096]", "[4096]"),
      pw("fp32", "add", "[4, 16, 64]", "[64]"),
      pw("fp32", "mul", "[64, 64]", "[1, 64]"),
      pointwise_chain(2, 256, 4096),
      pointwise_chain(24, 64, 128),
      pointwise_chain(120, 16, 64),
      mm("bf16", "[16, 64]", "[64, 64]", ""),
      mm("fp16", "[128, 256]", "[256, 512]", "[1, 512]"),
      mm("bf16", "[3, 8, 16]", "[16, 32]", ""),
  };
  int passed = 0;
  for (const std::string& text : specs) {
    auto g = parse_spec_string(text, "canonical shape");
    ASSERT_TRUE(g.is_ok()) << text << ": " << g.status().to_string();
    RunOptions run;
    run.verify = true;
    run.reference = ReferenceChoice::kHost;
    run.seed = 5;
    auto rep = run_graph(*g, run);
    if (!rep.is_ok()) {
      ADD_FAILURE() << text << ": " << rep.status().to_string();
      continue;
    }
    const bool ok = rep->verdict() == Disposition::kPassed;
    EXPECT_TRUE(ok) << text << ": " << (rep->check ? rep->check->summary() : std::string("no check"));
    passed += ok ? 1 : 0;
  }
  std::printf("[ canonical ] %d of %zu shapes passed through kiln run --verify on cuDNN %zu\n", passed, specs.size(),
              cudnnGetVersion());
}

}  // namespace
}  // namespace kiln
