// GPU tier of the differential sweep (issue 31): seeded random valid specs over every op family
// (tests/random_spec.h) run through the Planner as `kiln run --verify` runs them (run_graph: the Planner's
// plan, first-use verification on, then the outputs checked against the host reference where it is cheap,
// else the device reference). Each spec ends one of three ways:
//   passed   the plan ran and every output is within the dtype's tolerance
//   refused  NotSupported naming why: a canonical rule or known defect that cannot be worked around, a cuDNN
//            limit, or an engine coverage gap (src/lower/engine_coverage.h); never a bare "no engine
//            configuration"
//   caught   the plan the Planner built computed it wrong and first-use verification refused to serve it
//            (CheckFailed naming the plan and its errors): never served, so not wrong, but counted apart and
//            reported, since a user gets an error where a correct plan exists (`kiln tune` finds one)
//   wrong    anything else: an output outside tolerance, a plan the first-use check refused, a refusal
//            without a named reason, an error. Each fails the test, and its spec is written to
//            $KILN_SWEEP_FAILURES (a folder) when set, to be kept in tests/sweep/regressions/.
// KILN_SWEEP_SEED (default 1) and KILN_SWEEP_SPECS (default 600) choose the specs, KILN_SWEEP_FAMILY (e.g. "sdpa")
// runs only that family's among them; KILN_SWEEP_REPORT=<file>
// writes one JSON line per spec (name, family, outcome, message, milliseconds).
//
// tests/sweep/regressions/*.json: specs a sweep (or a user) found wrong once; each must pass or be refused
// with a named reason, as above.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"
#include "random_spec.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// A refusal names its reason when it is not cuDNN's bare "no engine configuration" (lowering appends the
// engine coverage gap to that one when the registry knows the graph).
bool named_refusal(const Status& s) {
  if (s.code() != StatusCode::kNotSupported) return false;
  const std::string& m = s.message();
  if (m.find("no engine configuration") == std::string::npos) return true;
  return m.find("engine coverage gap ") != std::string::npos;
}

struct Outcome {
  std::string kind;  // "passed", "refused", "wrong"
  std::string message;
};

Outcome run_one(const std::string& json, const std::string& name, uint64_t seed) {
  auto g = parse_spec_string(json, name + ".json");
  if (!g.is_ok()) return {"wrong", "does not validate: " + g.status().to_string()};
  RunOptions run;
  run.verify = true;
  run.reference = ReferenceChoice::kAuto;
  run.seed = seed;
  auto rep = run_graph(*g, run);
  if (!rep.is_ok()) {
    if (named_refusal(rep.status())) return {"refused", rep.status().message()};
    // cuDNN's plan computed it wrong and first-use verification kept it from the caller: never served, named
    // ("failed first-use verification ... `kiln tune` finds a configuration that passes"); counted apart.
    if (rep.status().message().find("failed first-use verification") != std::string::npos)
      return {"caught", rep.status().message()};
    return {"wrong", rep.status().to_string()};
  }
  if (rep->verdict() == Disposition::kPassed) return {"passed", ""};
  return {"wrong", std::string(disposition_name(rep->verdict())) + ": " +
                       (rep->check ? rep->check->summary() : std::string("no check"))};
}

void save_failure(const std::string& name, const std::string& json) {
  const std::string dir = env_or("KILN_SWEEP_FAILURES", "");
  if (dir.empty()) return;
  fs::create_directories(dir);
  std::ofstream(dir + "/" + name + ".json") << json << "\n";
}

TEST(Sweep, RandomValidSpecsPassOrAreRefusedWithANamedReason) {
  KILN_REQUIRE_GPU();
  const uint64_t seed = std::stoull(env_or("KILN_SWEEP_SEED", "1"));
  const int count = std::stoi(env_or("KILN_SWEEP_SPECS", "600"));
  std::ofstream report;
  if (const char* p = std::getenv("KILN_SWEEP_REPORT")) report.open(p);
  std::map<std::string, std::map<std::string, int>> table;
  int wrong = 0;
  const std::string family = env_or("KILN_SWEEP_FAMILY", "");
  for (int i = 0; i < count; ++i) {
    const testing::RandomSpec rs = testing::random_spec(seed, i);
    if (!family.empty() && rs.family != family) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const Outcome o = run_one(rs.json, rs.name, static_cast<uint64_t>(i) + 1);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++table[rs.family][o.kind];
    if (o.kind == "wrong") {
      ++wrong;
      ADD_FAILURE() << rs.name << ": " << o.message << "\n" << rs.json;
      save_failure(rs.name, rs.json);
    }
    if (report.is_open()) {
      report << nlohmann::json{{"name", rs.name}, {"family", rs.family},  {"outcome", o.kind},
                               {"ms", ms},        {"message", o.message}, {"spec", nlohmann::json::parse(rs.json)}}
                    .dump()
             << "\n";
      report.flush();
    }
    // A kernel that faults (a misaligned or illegal address) ends the process's CUDA context: every later
    // spec would fail for it. Read from the CUDA error's name in a failure, not from words: a refusal may name
    // the fault it avoids ("faulted on the H200 (misaligned address ...)").
    if (o.kind == "wrong" && (o.message.find("cudaErrorMisalignedAddress") != std::string::npos ||
                              o.message.find("cudaErrorIllegalAddress") != std::string::npos ||
                              o.message.find("cudaErrorLaunchFailure") != std::string::npos)) {
      ADD_FAILURE() << "the CUDA context is lost at or before " << rs.name << ": stopping the sweep";
      break;
    }
  }
  int passed = 0, refused = 0, caught = 0;
  for (const auto& [family, outcomes] : table) {
    std::string line;
    for (const auto& [k, n] : outcomes) line += " " + k + "=" + std::to_string(n);
    std::printf("[ sweep ] %-12s%s\n", family.c_str(), line.c_str());
    auto at = [&](const char* k) { return outcomes.count(k) ? outcomes.at(k) : 0; };
    passed += at("passed");
    refused += at("refused");
    caught += at("caught");
  }
  std::printf("[ sweep ] seed %llu: %d specs run, %d passed, %d refused with a named reason, %d caught by first-use "
              "verification, %d wrong\n",
              static_cast<unsigned long long>(seed), passed + refused + caught + wrong, passed, refused, caught, wrong);
  EXPECT_GE(passed + refused + caught + wrong, std::min(count, 500)) << "the sweep stopped early";
  EXPECT_EQ(wrong, 0);
}

TEST(Sweep, RegressionSpecsPassOrAreRefusedWithANamedReason) {
  KILN_REQUIRE_GPU();
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests" / "sweep" / "regressions";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Outcome o = run_one(json, e.path().stem().string(), 7);
    EXPECT_NE(o.kind, "wrong") << e.path() << ": " << o.message;
    std::printf("[ regression ] %-40s %s %s\n", e.path().stem().c_str(), o.kind.c_str(),
                o.message.substr(0, 160).c_str());
    ++n;
  }
  EXPECT_GT(n, 0) << "no regression specs in " << dir;
}

}  // namespace
}  // namespace kiln
