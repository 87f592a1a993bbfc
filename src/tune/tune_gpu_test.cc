// Device tier: the tuner on a real graph. An injected wrong candidate is Incorrect and never chosen.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "gpu_test_util.h"
#include "kiln/core/log.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/tuner.h"
#include "kiln/tune/unfused.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

TEST(Tuner, InjectedWrongCandidateIsIncorrectAndNeverChosen) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  TuneOptions o;
  o.measure.stopping.time_budget_ms = 50;
  // First pass: find the fastest correct candidate.
  auto first = tune_graph(*g, o);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_TRUE(first->winner.has_value());
  EngineConfig victim = first->winner_config;
  // Second pass: corrupt that candidate's output on the device (one fp16 element set to 100); it must be
  // rejected by the device comparison.
  const int out = g->outputs[0];
  const int64_t span = HostTensor::zeros(g->dtype_of(out), g->tensors[static_cast<size_t>(out)].shape(),
                                         g->tensors[static_cast<size_t>(out)].strides)
                           .storage_span();
  ASSERT_EQ(g->dtype_of(out), DataType::kFloat16);
  o.output_hook = [&](const EngineConfig& c, const std::map<int, void*>& outs, cudaStream_t stream) -> Status {
    if (!(c == victim)) return Status::ok();
    const uint16_t hundred = fp16_from_double(100.0);
    char* p = static_cast<char*>(outs.at(out)) + (span / 2) * 2;
    return cuda_status(cudaMemcpyAsync(p, &hundred, 2, cudaMemcpyHostToDevice, stream), "inject");
  };
  auto second = tune_graph(*g, o);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  bool seen = false;
  for (const auto& c : second->candidates) {
    if (c.identity() != first->candidates[*first->winner].identity()) continue;
    seen = true;
    EXPECT_EQ(c.disposition, Disposition::kIncorrect) << c.message;
    EXPECT_FALSE(c.timed());
  }
  EXPECT_TRUE(seen);
  ASSERT_TRUE(second->winner.has_value());
  EXPECT_FALSE(second->winner_config == victim);
  EXPECT_EQ(second->candidates[*second->winner].disposition, Disposition::kPassed);
}

// --graph-replay (issue 13): every candidate that passes the gate is timed replayed from a CUDA graph, and
// one wins; the stream-launched run of the same graph is the comparison printed.
TEST(Tuner, GraphReplayTimesEveryPassedCandidate) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  TuneOptions o;
  o.measure.stopping.time_budget_ms = 20;
  auto launched = tune_graph(*g, o);
  ASSERT_TRUE(launched.is_ok()) << launched.status().to_string();
  o.graph_replay = true;
  auto replayed = tune_graph(*g, o);
  ASSERT_TRUE(replayed.is_ok()) << replayed.status().to_string();
  ASSERT_TRUE(replayed->winner.has_value());
  int passed = 0;
  for (const auto& c : replayed->candidates) {
    if (c.disposition != Disposition::kPassed) continue;
    ++passed;
    EXPECT_TRUE(c.timed()) << c.identity() << ": " << c.message;
  }
  EXPECT_GT(passed, 0);
  ASSERT_TRUE(launched->winner.has_value());
  std::printf(
      "[ tuner ] graph replay: winner %s %.4f ms; stream launches: winner %s %.4f ms\n",
      replayed->candidates[*replayed->winner].identity().c_str(), replayed->candidates[*replayed->winner].median_ms,
      launched->candidates[*launched->winner].identity().c_str(), launched->candidates[*launched->winner].median_ms);
}

// Build helpers (kiln/tune/build_helpers.h): the runtime-compiled candidates of an RMS norm built by two
// `kiln build-helper` processes come back as plans that the gate judges exactly as it judges the same
// candidates built in the tuner's process (a differential test), and the winner is Passed.
TEST(Tuner, BuildHelpersGiveTheSameVerdictsAsInProcessBuilds) {
  KILN_REQUIRE_GPU();
  // A bf16 RMS norm of the benchmark suite's kind, 16384 x 1024: cuDNN compiles its engines at run time.
  auto g = parse_spec_string(R"({"name": "rms_norm_16384x1024", "io_dtype": "bf16", "intermediate_dtype": "fp32",
    "compute_dtype": "fp32", "tensors": {"x": {"dims": [16384, 1024, 1, 1], "layout": "NCHW"},
    "gamma": {"dims": [1, 1024, 1, 1], "layout": "NCHW"}},
    "nodes": [{"name": "norm", "op": "rms_norm", "inputs": ["x", "gamma"], "outputs": ["y"], "epsilon": 1e-05}],
    "outputs": ["y"]})",
                             "rms_norm 16384x1024");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  TuneOptions o;
  o.measure.stopping.time_budget_ms = 20;
  o.budget.exhaustive = true;
  auto here = tune_graph(*g, o);
  ASSERT_TRUE(here.is_ok()) << here.status().to_string();
  o.build_helpers.executable = KILN_BINARY;
  o.build_helpers.args = {"build-helper"};
  o.build_helpers.processes = 2;
  o.build_helpers.write_spec = [](const Graph& graph) { return graph_to_spec_json(graph); };
  std::vector<std::string> logged;
  set_log_level(LogLevel::kInfo);
  set_log_sink([&](LogLevel, const std::string& m) { logged.push_back(m); });
  auto helped = tune_graph(*g, o);
  set_log_sink(nullptr);
  set_log_level(LogLevel::kWarn);
  ASSERT_TRUE(helped.is_ok()) << helped.status().to_string();
  std::string said;
  for (const auto& m : logged) said += m + "\n";
  std::printf("%s", said.c_str());
  EXPECT_NE(said.find("build helper processes"), std::string::npos) << said;
  EXPECT_EQ(said.find("build helpers off"), std::string::npos) << said;
  EXPECT_EQ(said.find(" 0 of "), std::string::npos) << said;  // the helpers built plans
  std::map<std::string, Disposition> verdicts;
  for (const auto& c : here->candidates) verdicts[c.identity()] = c.disposition;
  ASSERT_EQ(helped->candidates.size(), here->candidates.size());
  for (const auto& c : helped->candidates) {
    ASSERT_TRUE(verdicts.count(c.identity())) << c.identity();
    EXPECT_EQ(c.disposition, verdicts[c.identity()]) << c.identity() << ": " << c.message;
  }
  ASSERT_TRUE(helped->winner.has_value());
  EXPECT_EQ(helped->candidates[*helped->winner].disposition, Disposition::kPassed);
  EXPECT_FALSE(helped->winner_plan.empty());
}

TEST(Tuner, EnumeratesDistinctCandidatesAcrossModes) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok());
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  LowerTarget t;
  t.handle = handle->get();
  auto lg = LoweredGraph::create(*g, t);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  auto c = lg->list_candidates({HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  std::set<std::string> ids;
  for (auto& ci : *c) ids.insert(ci.config.identity());
  EXPECT_EQ(ids.size(), c->size());  // de-duplicated
  EXPECT_GT(c->size(), 1u);
  std::printf("[ candidates ] conv_bias_relu: %zu distinct\n", c->size());
}

// The unfused alternatives: each decomposition (each node alone, then cut after the first and after the second node)
// has its parts tuned, their winners chained through memory, checked against the fused graph's reference and timed
// as one unit; the fastest chain is the unfused side; the report carries every decomposition and a decision. With the
// fused winner's time given, a decomposition that cannot beat it is skipped before its parts are tuned.
TEST(Unfused, ChainOfPartWinnersIsCheckedTimedAndCompared) {
  KILN_REQUIRE_GPU();
  for (const char* name : {"conv_bias_relu", "matmul_bias_gelu"}) {
    auto g = parse_spec_file(kRoot + "/examples/small/" + name + ".json");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    TuneOptions o;
    o.measure.stopping.time_budget_ms = 50;
    auto fused = tune_graph(*g, o);
    ASSERT_TRUE(fused.is_ok()) << fused.status().to_string();
    ASSERT_TRUE(fused->winner.has_value());
    EXPECT_EQ(fused->reference_kind, ReferenceKind::kDevice);
    ASSERT_NE(fused->evaluation, nullptr);  // the fused graph's inputs and reference, kept on the device
    UnfusedOptions uo;
    uo.tune = o;
    uo.evaluation = fused->evaluation;  // the chain runs on them and is checked against them
    auto u = tune_unfused(*g, uo);
    ASSERT_TRUE(u.is_ok()) << u.status().to_string();
    EXPECT_TRUE(u->unavailable.empty()) << u->unavailable;
    EXPECT_EQ(u->reference_kind, ReferenceKind::kDevice);
    ASSERT_EQ(u->decompositions.size(), 3u);
    EXPECT_EQ(u->decompositions[0].name, "each node");
    double fastest = 1e30;
    for (const DecompositionResult& d : u->decompositions) {
      EXPECT_TRUE(d.unavailable.empty()) << d.name << ": " << d.unavailable;
      EXPECT_EQ(d.chain.disposition, Disposition::kPassed) << d.name << ": " << d.chain.message;
      if (d.chain.timed()) fastest = std::min(fastest, d.chain.median_ms);
    }
    EXPECT_EQ(u->chain.median_ms, fastest);
    EXPECT_EQ(u->parts.size(), u->identities.size());
    EXPECT_EQ(u->parts.size(), static_cast<size_t>(*std::max_element(u->groups.begin(), u->groups.end()) + 1));
    EXPECT_EQ(u->chain.disposition, Disposition::kPassed) << u->chain.message;
    EXPECT_TRUE(u->chain.timed());
    EXPECT_GT(u->intermediate_bytes, 0.0);
    const CandidateResult& fw = fused->candidates[*fused->winner];
    // Told the fused winner's time, the same tune skips what cannot beat it: each node alone is always timed.
    uo.fused_ms = fw.median_ms;
    auto pruned = tune_unfused(*g, uo);
    ASSERT_TRUE(pruned.is_ok()) << pruned.status().to_string();
    ASSERT_EQ(pruned->decompositions.size(), 3u);
    EXPECT_TRUE(pruned->decompositions[0].unavailable.empty()) << pruned->decompositions[0].unavailable;
    for (const DecompositionResult& d : pruned->decompositions) {
      if (!d.unavailable.empty()) {
        EXPECT_EQ(d.unavailable.rfind("skipped: ", 0), 0u) << d.name << ": " << d.unavailable;
      }
    }
    std::printf("[ unfused, told the fused time ] %s\n%s", name,
                format_fusion_report(&fw, *pruned, FusionPolicy::kFaster,
                                     decide_fusion(fused_side(fw), unfused_chain_side(*pruned), FusionPolicy::kFaster))
                    .c_str());
    auto d = decide_fusion(fused_side(fw), unfused_chain_side(*u), FusionPolicy::kFaster);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->use_fused, fw.median_ms <= u->chain.median_ms);
    std::printf("[ unfused ] %s\n%s", name, format_fusion_report(&fw, *u, FusionPolicy::kFaster, d).c_str());
  }
}

TEST(Unfused, SingleNodeGraphHasNoUnfusedAlternative) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/layer_norm.json");
  ASSERT_TRUE(g.is_ok());
  auto u = tune_unfused(*g, UnfusedOptions{});
  ASSERT_FALSE(u.is_ok());
  EXPECT_EQ(u.status().code(), StatusCode::kNotSupported);
}

// Found on the H200 (cuDNN 9.19): a standalone pointwise graph broadcasting b [1, 1, 64] over a [4, 16, 64]
// (and [64, 64] + [1, 64]) gets wrong outputs, some never written, from every engine configuration, the
// heuristic's first choice included, while [1, 16, 64] or [4, 1, 64] are right. Whatever cuDNN does, the
// tuner must never pick an Incorrect candidate: this pins the gate's guarantee on a real defect.
TEST(CudnnDefect, BroadcastOverTwoDimsIsNeverChosenWhenWrong) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(R"({"name": "pw_add_b11", "io_dtype": "fp32",
      "tensors": {"a": {"dims": [4, 16, 64]}, "b": {"dims": [1, 1, 64]}},
      "nodes": [{"name": "pw", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "pw_add_b11.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  TuneOptions o;
  o.measure.stopping.time_budget_ms = 20;
  auto r = tune_graph(*g, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  int incorrect = 0;
  for (const auto& c : r->candidates) incorrect += c.disposition == Disposition::kIncorrect;
  std::printf("[ cudnn defect ] pw_add_b11: %zu candidates, %d Incorrect, winner %s\n", r->candidates.size(), incorrect,
              r->winner ? r->candidates[*r->winner].identity().c_str() : "none");
  if (r->winner) {
    EXPECT_EQ(r->candidates[*r->winner].disposition, Disposition::kPassed);
  }
}

// Item 8: candidates gated on recorded inputs (here post-ReLU-like activations: every x >= 0, so partial
// sums grow with K instead of cancelling). The report names the inputs; correct plans still pass.
TEST(Tuner, RecordedInputsGateTheCandidates) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto in = make_random_inputs(*g, 5);
  ASSERT_TRUE(in.is_ok());
  const test::TempDir tmp("kiln_recorded");
  ASSERT_FALSE(tmp.path().empty()) << "mkdtemp failed";
  const std::string dir = tmp.path();
  for (auto& [t, h] : *in) {
    if (g->tensors[static_cast<size_t>(t)].name == "x")
      for (double& v : h.storage) v = std::fabs(v);
    ASSERT_TRUE(h.write_file(dir + "/" + g->tensors[static_cast<size_t>(t)].name + ".bin").is_ok());
  }
  TuneOptions o;
  o.measure.stopping.time_budget_ms = 20;
  o.inputs_dir = dir;
  auto r = tune_graph(*g, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->inputs, "files " + dir);
  EXPECT_EQ(r->reference_kind, ReferenceKind::kDevice);
  int incorrect = 0;
  for (const auto& c : r->candidates)
    if (c.disposition == Disposition::kIncorrect) {
      ++incorrect;
      std::printf("[ recorded inputs ] %s Incorrect: %s\n", c.identity().c_str(), c.message.c_str());
    }
  std::printf("[ recorded inputs ] %zu candidates, %d Incorrect, winner %s\n", r->candidates.size(), incorrect,
              r->winner ? r->candidates[*r->winner].identity().c_str() : "none");
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(r->candidates[*r->winner].disposition, Disposition::kPassed);
}

// Item 5 (SIGTERM) and the partial store, as a user sees them: kiln tune on a graph with many candidates,
// terminated after its first candidates; exit 130, the JSON report written, the best so far stored untuned.
// The whole tune takes under 2 s on the H200, so the signal comes from the test hook KILN_TEST_TERM_AFTER
// (the process raises SIGTERM itself once 5 candidates are settled): the same handler as a TERM from outside.
TEST(TuneCli, TerminatedTuneKeepsItsFinishedWorkAndStoresThePartialWinner) {
  KILN_REQUIRE_GPU();
  const test::TempDir dir("kiln_term");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::string store = dir.file("plans.db");
  test::CliOptions term;
  term.env = {{"KILN_TEST_TERM_AFTER", "5"}};
  const test::CliResult r =
      test::run_kiln("tune " + kRoot + "/examples/conv_bias_relu.json --json --no-unfused --store " + store, term);
  ASSERT_TRUE(r.code >= 0) << r.how_it_ended();
  ASSERT_EQ(r.code, 130) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.is_array() && !j.empty());
  EXPECT_EQ(j[0]["meta"]["cancelled"], true);
  EXPECT_EQ(j[0]["meta"]["partial"], true);
  EXPECT_NE(r.err.find("tune conv_bias_relu:"), std::string::npos) << r.err;  // progress on stderr with --json
  // Five settled candidates of conv_bias_relu (every one of its 41 passes on the H200): a winner exists.
  ASSERT_FALSE(j[0]["winner"].is_null()) << r.out << r.err;
  int settled = 0;
  for (const auto& c : j[0]["candidates"])
    settled += c["message"].get<std::string>().rfind("not run", 0) != 0;  // the rest: "not run: interrupted"
  EXPECT_GE(settled, 5) << r.out;
  EXPECT_LT(settled, 41) << r.out;
  // The store holds the partial winner, untuned.
  const test::CliResult ls = test::run_kiln("plans ls --json --store " + store);
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_NE(ls.out.find("\"tuned\": false"), std::string::npos) << ls.out;
}

// Item 6: a crashing candidate does not end the tune. The test hook KILN_TEST_CRASH=<identity>:<phase>
// makes kiln tune's worker process die by SIGSEGV when it builds or runs that candidate (the heuristic's
// first choice, so that the crash comes before most others). The tune goes on in a new worker, reports the
// candidate Failed with the signal, and stores the best of the rest.
TEST(TuneCli, InjectedCrashIsFailedWithTheSignalAndTheTuneGoesOn) {
  KILN_REQUIRE_GPU();
  const std::string spec = kRoot + "/examples/small/conv_bias_relu.json";
  const test::TempDir dir("kiln_crash");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const test::CliResult listed = test::run_kiln("tune " + spec + " --list --json");
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto list = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_FALSE(list.is_discarded());
  ASSERT_GE(list["candidates"].size(), 2u);
  for (const char* phase : {"run", "build"}) {
    SCOPED_TRACE(phase);
    const std::string victim = list["candidates"][0]["identity"].get<std::string>();
    const std::string store = dir.file(std::string(phase) + ".db");
    test::CliOptions crash;
    crash.env = {{"KILN_TEST_CRASH", victim + ":" + phase}};
    const test::CliResult r =
        test::run_kiln("tune " + spec + " --json --no-unfused --candidate-budget-ms 30 --store " + store, crash);
    ASSERT_TRUE(r.code >= 0) << r.how_it_ended();
    EXPECT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
    bool seen = false;
    size_t passed = 0;
    for (const auto& c : j[0]["candidates"]) {
      if (c["disposition"] == "Passed") ++passed;
      if (c["identity"] != victim) continue;
      seen = true;
      EXPECT_EQ(c["disposition"], "Failed");
      EXPECT_NE(c["message"].get<std::string>().find(std::string("crashed: signal 11 (SIGSEGV) while ") +
                                                     (std::string(phase) == "run" ? "running" : "building")),
                std::string::npos)
          << c["message"];
    }
    EXPECT_TRUE(seen) << "the crashed candidate is in the report";
    EXPECT_GT(passed, 0u);
    ASSERT_FALSE(j[0]["winner"].is_null());
    EXPECT_NE(j[0]["winner"], victim);
    std::printf("[ crash %s ] %s crashed; %zu candidates, %zu Passed, winner %s\n", phase, victim.c_str(),
                j[0]["candidates"].size(), passed, j[0]["winner"].get<std::string>().c_str());
  }
}

}  // namespace
}  // namespace kiln
