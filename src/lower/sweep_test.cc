// Host tier of the differential sweep (issue 31): the seeded generator of random valid specs
// (tests/random_spec.h) through parsing and validation, canonicalization and deviceless lowering for the
// recorded H200 (profiles/h200.json, compiled in), and cuDNN's heuristics asked which engine configurations
// they offer. No GPU: what is checked is that every generated spec is valid, that no step crashes or fails
// with anything but a named NotSupported, and that a graph cuDNN offers nothing for is named by the engine
// coverage registry (lower/engine_coverage.h) rather than left as a bare "no engine configuration". The GPU
// tier runs the same specs through the Planner and the references (src/runtime/sweep_gpu_test.cc).
//
// KILN_SWEEP_REPORT=<file>: one JSON line per spec (name, family, outcome, reason) for a closer look.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "lower/canonicalize.h"
#include "lower/engine_coverage.h"
#include "random_spec.h"

namespace kiln {
namespace {

TEST(Sweep, GeneratedSpecsValidateCanonicalizeAndLowerWithoutAGpu) {
  auto profile = builtin_h200_profile();
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  LowerTarget target;
  target.profile = &*profile;
  const char* report_path = std::getenv("KILN_SWEEP_REPORT");
  std::ofstream report;
  if (report_path) report.open(report_path);

  constexpr int kSpecs = 600;
  const uint64_t seed = 1;
  // family -> outcome -> count
  std::map<std::string, std::map<std::string, int>> table;
  int unnamed = 0;
  for (int i = 0; i < kSpecs; ++i) {
    const testing::RandomSpec rs = testing::random_spec(seed, i);
    std::string outcome, reason;
    auto g = parse_spec_string(rs.json, rs.name + ".json");
    if (!g.is_ok()) {
      ADD_FAILURE() << rs.name << " does not validate: " << g.status().to_string() << "\n" << rs.json;
      outcome = "invalid";
      reason = g.status().message();
    } else {
      auto canon = lower_detail::rewrite_for_cudnn(*g);
      if (!canon.is_ok() && canon.status().code() != StatusCode::kNotSupported)
        ADD_FAILURE() << rs.name << ": canonicalization failed: " << canon.status().to_string() << "\n" << rs.json;
      auto lg = LoweredGraph::create(*g, target);
      if (!lg.is_ok()) {
        const std::string& m = lg.status().message();
        reason = m;
        if (lg.status().code() == StatusCode::kNotSupported) {
          outcome = "refused";
        } else if (m.find("driver version is insufficient") != std::string::npos ||
                   m.find("cudaGetDevice") != std::string::npos ||
                   m.find("cudaSuccess != cudaGetD") != std::string::npos) {
          outcome = "needs_gpu";  // the frontend asks the device while building the operation graph
        } else {
          outcome = "error";
          ADD_FAILURE() << rs.name << ": lowering failed: " << lg.status().to_string() << "\n" << rs.json;
        }
      } else {
        // The deviceless build: cuDNN's heuristics asked for the recorded H200. Engines that are compiled at
        // run time cannot be built without a CUDA driver, and some graphs make the frontend query the device:
        // both still mean cuDNN has engines for the graph (or cannot be asked here), not a refusal.
        const Status built = lg->build_heuristic();
        const std::string& m = built.message();
        if (built.is_ok()) {
          outcome = "built";
        } else if (m.find("RUNTIME_PREREQUISITE_MISSING") != std::string::npos) {
          outcome = "engines_need_gpu";
        } else if (m.find("driver version is insufficient") != std::string::npos ||
                   m.find("cudaGetDevice") != std::string::npos || m.find("stub library") != std::string::npos) {
          outcome = "needs_gpu";
        } else if (m.find("No valid engine configs") != std::string::npos) {
          const std::string named = lower_detail::name_engine_coverage_gap(*g);
          outcome = named.empty() ? "no_engine_unnamed" : "no_engine_named";
          reason = named;
          if (named.empty()) ++unnamed;
        } else {
          outcome = "error";
          reason = m;
        }
      }
    }
    ++table[rs.family][outcome];
    if (report.is_open())
      report << nlohmann::json{{"name", rs.name},
                               {"family", rs.family},
                               {"outcome", outcome},
                               {"reason", reason},
                               {"spec", nlohmann::json::parse(rs.json)}}
                    .dump()
             << "\n";
  }
  for (const auto& [family, outcomes] : table) {
    std::string line;
    for (const auto& [o, n] : outcomes) line += " " + o + "=" + std::to_string(n);
    std::printf("[ sweep ] %-12s%s\n", family.c_str(), line.c_str());
  }
  std::printf("[ sweep ] %d specs (seed %llu), %d refused by cuDNN's heuristics without a named reason\n", kSpecs,
              static_cast<unsigned long long>(seed), unnamed);
  EXPECT_EQ(unnamed, 0) << "graphs cuDNN offers nothing for, not named by the engine coverage registry "
                           "(KILN_SWEEP_REPORT=<file> lists them)";
}

// The regression specs the GPU sweep runs (tests/sweep/regressions/) stay valid specs.
TEST(Sweep, RegressionSpecsAreValid) {
  const std::filesystem::path dir = std::filesystem::path(KILN_SOURCE_DIR) / "tests" / "sweep" / "regressions";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    auto g = parse_spec_file(e.path().string());
    EXPECT_TRUE(g.is_ok()) << e.path() << ": " << g.status().to_string();
    ++n;
  }
  EXPECT_GE(n, 16) << dir;
}

}  // namespace
}  // namespace kiln
