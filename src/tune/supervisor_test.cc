// A crashing candidate does not end the tune (issue 11, item 6), on the host: the worker is a forked child
// running the tuner over the fake backend, whose scripted candidates die by SIGSEGV while building or
// running. The supervisor reports the crashed candidate Failed with the signal, goes on in a new worker,
// and chooses the winner from everything that finished, as an in-process tune would.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/core/exit_codes.h"
#include "kiln/tune/tune_supervisor.h"
#include "tune/fake_backend.h"

namespace kiln {
namespace {

using namespace testing_fake;

// Spawns a worker: a forked child with its own fake backend (the script is the same in every worker).
struct ForkSpawner {
  std::vector<Script> script;
  TuneOptions options;
  std::vector<WorkerRequest> requests;  // what each worker was asked

  StatusOr<WorkerProcess> operator()(const WorkerRequest& req) {
    requests.push_back(req);
    int p[2];
    if (::pipe(p) != 0) return internal_error("pipe");
    const pid_t pid = ::fork();
    if (pid < 0) return internal_error("fork");
    if (pid == 0) {
      ::close(p[0]);
      FakeBackend fake(script);
      Status st = run_tune_worker(fake, "fake", options, req, p[1]);
      ::_exit(exit_code_for(st));
    }
    ::close(p[1]);
    return WorkerProcess{pid, p[0]};
  }
};

TEST(TuneSupervisor, CrashWhileRunningIsFailedWithTheSignalAndTheTuneGoesOn) {
  ForkSpawner spawner{{{Kind::kCorrect, 1.0}, {Kind::kSegfaultInRun, 0.1}, {Kind::kWrong, 0.2}, {Kind::kCorrect, 0.5}},
                      TuneOptions{},
                      {}};
  spawner.options.build_threads = 2;
  std::vector<std::pair<size_t, size_t>> progress;
  TuneOptions o;
  o.progress = [&](size_t done, size_t total, const std::string&) { progress.emplace_back(done, total); };
  auto r = tune_supervised(std::ref(spawner), "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->candidates.size(), 4u);
  EXPECT_EQ(r->candidates[0].disposition, Disposition::kPassed);
  EXPECT_EQ(r->candidates[1].disposition, Disposition::kFailed);
  EXPECT_NE(r->candidates[1].message.find("crashed: signal 11 (SIGSEGV) while running"), std::string::npos)
      << r->candidates[1].message;
  EXPECT_EQ(r->candidates[2].disposition, Disposition::kIncorrect);
  EXPECT_EQ(r->candidates[3].disposition, Disposition::kPassed);
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 3u);
  // The winner's plan comes from the worker that timed it: the last one, which skipped eng0 and eng1
  // (settled before), so eng3 was its candidate 1 (the fake's plan is its index).
  EXPECT_EQ(r->winner_plan, std::vector<uint8_t>{1});
  EXPECT_EQ(r->reference_kind, ReferenceKind::kHost);
  // From the workers' build events, first start to last end (0 before it was carried: `kiln tune` said "built in 0 ms").
  EXPECT_GT(r->build_wall_ms, 0);
  EXPECT_LT(r->build_wall_ms, 60000);
  // A second worker (a third when builds were in flight at the crash: the serial one names eng1).
  ASSERT_GE(spawner.requests.size(), 2u);
  ASSERT_LE(spawner.requests.size(), 3u);
  EXPECT_TRUE(spawner.requests[0].skip.empty());
  EXPECT_EQ(spawner.requests.back().skip, (std::vector<std::string>{"eng0", "eng1"}));
  EXPECT_EQ(progress.back(), (std::pair<size_t, size_t>{4, 4}));
}

TEST(TuneSupervisor, CrashInAParallelBuildIsNarrowedDownByASerialWorker) {
  // Builds run two at a time: when the worker dies while several builds are in flight, the next worker
  // builds and runs one candidate at a time, so that the crash names one candidate.
  std::vector<Script> s(6, Script{Kind::kCorrect, 1.0});
  s[4].kind = Kind::kSegfaultInBuild;
  s[2].median_ms = 0.3;
  ForkSpawner spawner{s, TuneOptions{}, {}};
  spawner.options.build_threads = 3;
  auto r = tune_supervised(std::ref(spawner), "fake", TuneOptions{});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->candidates.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    if (i == 4) {
      EXPECT_EQ(r->candidates[i].disposition, Disposition::kFailed);
      EXPECT_NE(r->candidates[i].message.find("while building"), std::string::npos) << r->candidates[i].message;
    } else {
      EXPECT_EQ(r->candidates[i].disposition, Disposition::kPassed) << i << ": " << r->candidates[i].message;
    }
  }
  EXPECT_EQ(*r->winner, 2u);
  EXPECT_GE(spawner.requests.size(), 2u);
  EXPECT_LE(spawner.requests.size(), 3u);
  EXPECT_TRUE(spawner.requests.back().serial || spawner.requests.size() == 2u);
}

TEST(TuneSupervisor, EveryCandidateCrashingEndsWithNoWinnerNotAnEndlessLoop) {
  ForkSpawner spawner{
      {{Kind::kSegfaultInRun, 1.0}, {Kind::kSegfaultInRun, 0.5}, {Kind::kSegfaultInRun, 0.2}}, TuneOptions{}, {}};
  spawner.options.build_threads = 1;
  auto r = tune_supervised(std::ref(spawner), "fake", TuneOptions{}, /*max_restarts=*/8);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  for (const auto& c : r->candidates) EXPECT_EQ(c.disposition, Disposition::kFailed) << c.message;
  EXPECT_FALSE(r->winner.has_value());
  // One worker per crash, plus one when a build was in flight at the first crash (then all is serial).
  EXPECT_GE(spawner.requests.size(), 3u);
  EXPECT_LE(spawner.requests.size(), 4u);
}

TEST(TuneSupervisor, AWorkerErrorBeforeAnyCandidateIsTheTunesError) {
  // No candidate at all after the filters: the worker's NotSupported is the supervised tune's too.
  ForkSpawner spawner{{{Kind::kCorrect, 1.0}}, TuneOptions{}, {}};
  spawner.options.exclude = {"eng0"};
  auto r = tune_supervised(std::ref(spawner), "fake", TuneOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no engine configuration left"), std::string::npos) << r.status().message();
}

// Every kind's name (the table private to supervisor.cc) reads back to that kind.
TEST(TuneEvents, EveryKindRoundTrips) {
  for (TuneEvent::Kind kind : {TuneEvent::Kind::kCandidates, TuneEvent::Kind::kPrepared, TuneEvent::Kind::kBuildStart,
                               TuneEvent::Kind::kBuildEnd, TuneEvent::Kind::kRunStart, TuneEvent::Kind::kCandidate}) {
    TuneEvent e;
    e.kind = kind;
    const std::string line = tune_event_to_json(e);
    auto back = tune_event_from_json(line);
    ASSERT_TRUE(back.is_ok()) << line << ": " << back.status().to_string();
    EXPECT_EQ(back->kind, kind) << line;
  }
}

TEST(TuneEvents, RoundTripThroughJson) {
  TuneEvent e;
  e.kind = TuneEvent::Kind::kCandidate;
  e.identity = "eng7_k2=3";
  e.result.config = EngineConfig{7, {{"k2", 3}}};
  e.result.disposition = Disposition::kPassed;
  e.result.median_ms = 0.125;
  e.result.samples = 42;
  e.result.check_ms = 1.5;
  e.check = "y: Passed max_abs=...";
  e.plan = {0x00, 0x7f, 0xff, 0x10};
  auto back = tune_event_from_json(tune_event_to_json(e));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kind, TuneEvent::Kind::kCandidate);
  EXPECT_EQ(back->identity, e.identity);
  EXPECT_EQ(back->result.identity(), e.result.identity());
  EXPECT_EQ(back->result.median_ms, 0.125);
  EXPECT_EQ(back->result.samples, 42u);
  EXPECT_EQ(back->result.check_ms, 1.5);
  EXPECT_EQ(back->check, e.check);
  EXPECT_EQ(back->plan, e.plan);
  EXPECT_EQ(tune_event_from_json("{\"kind\": \"nope\"}").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(tune_event_from_json("not json").status().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// What a tune worker's request carries of the options survives the trip; a request missing a field is
// InvalidArgument naming it, not an exception.
TEST(TuneWorkerOptions, RoundTripAndAMissingFieldIsNamed) {
  TuneOptions o;
  o.modes = {HeuristicMode::kB, HeuristicMode::kFallback};
  o.top_k = 7;
  o.max_workspace_bytes = 12345;
  o.exclude = {"eng3", "eng4_k2=1"};
  o.pin = EngineConfig{12, {}};
  o.build_threads = 3;
  o.measure.hot_cache = true;
  o.measure.settle_us = 37.5;
  o.graph_replay = true;
  o.measure.stopping.time_budget_ms = 42;
  o.measure.stopping.target_rel_error = 0.25;
  o.seed = 99;
  o.verify = false;
  o.host_reference = true;
  o.inputs_dir = "/data/in";
  o.check.allow_tf32 = true;
  o.check.tolerance_scale = 2.5;
  o.budget.first = 6;
  o.budget.patience = 3;
  o.budget.prior = {"eng4_k24=2", "eng6"};
  o.build_helpers.executable = "/opt/kiln/bin/kiln";
  o.build_helpers.args = {"build-helper"};
  o.build_helpers.processes = 5;
  o.build_helpers.write_spec = [](const Graph&) -> StatusOr<std::string> { return std::string("{}"); };
  auto back = tune_worker_options_from_json(tune_worker_options_to_json(o));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->modes, o.modes);
  EXPECT_EQ(back->top_k, 7);
  EXPECT_EQ(back->max_workspace_bytes, 12345);
  EXPECT_EQ(back->exclude, o.exclude);
  ASSERT_TRUE(back->pin.has_value());
  EXPECT_EQ(back->pin->identity(), "eng12");
  EXPECT_EQ(back->build_threads, 3);
  // The build helpers' executable and count travel; the spec writer does not (the worker sets its own).
  EXPECT_EQ(back->build_helpers.executable, "/opt/kiln/bin/kiln");
  EXPECT_EQ(back->build_helpers.args, (std::vector<std::string>{"build-helper"}));
  EXPECT_EQ(back->build_helpers.processes, 5);
  EXPECT_FALSE(back->build_helpers.write_spec);
  EXPECT_TRUE(back->measure.hot_cache);
  EXPECT_DOUBLE_EQ(back->measure.settle_us, 37.5);
  EXPECT_TRUE(back->graph_replay);
  EXPECT_DOUBLE_EQ(back->measure.stopping.time_budget_ms, 42);
  EXPECT_DOUBLE_EQ(back->measure.stopping.target_rel_error, 0.25);
  EXPECT_EQ(back->seed, 99u);
  EXPECT_FALSE(back->verify);
  EXPECT_TRUE(back->host_reference);
  EXPECT_EQ(back->inputs_dir, "/data/in");
  EXPECT_TRUE(back->check.allow_tf32);
  EXPECT_DOUBLE_EQ(back->check.tolerance_scale, 2.5);
  EXPECT_FALSE(back->budget.exhaustive);
  EXPECT_EQ(back->budget.first, 6);
  EXPECT_EQ(back->budget.patience, 3);
  EXPECT_EQ(back->budget.prior, o.budget.prior);
  // Options written by a Kiln without the candidate budget: every candidate, as that Kiln tuned.
  nlohmann::json old = nlohmann::json::parse(tune_worker_options_to_json(o));
  old.erase("budget");
  old.erase("settle_us");
  auto older = tune_worker_options_from_json(old.dump());
  ASSERT_TRUE(older.is_ok()) << older.status().to_string();
  EXPECT_TRUE(older->budget.exhaustive);
  EXPECT_DOUBLE_EQ(older->measure.settle_us, MeasureOptions{}.settle_us) << "no settle_us: this Kiln's default";

  auto missing = tune_worker_options_from_json(R"({"modes": ["A"]})");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("top_k"), std::string::npos) << missing.status().message();
  EXPECT_FALSE(tune_worker_options_from_json("not json").is_ok());
}

}  // namespace
}  // namespace kiln
