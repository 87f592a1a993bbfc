// The tuner's decisions on the host (issue 11, item 9): a fake backend stands in for cuDNN and the GPU, and
// produces, per candidate, what a kernel would — correct results, wrong ones (a 4-ulp scaling of a bf16
// output, which only the gate can see), builds refused or failing, runs that fail or crash (throw), timing
// that fails. The real numerics gate (check_outputs) judges the outputs. A wrong candidate is never
// chosen however fast; a crashing or failing one is reported Failed and the tune goes on; the progress
// counter, the budget and an interrupt behave as kiln/tune/tuner.h says.
#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "kiln/tune/tuner.h"
#include "kiln/validate/reference.h"
#include "tune/fake_backend.h"

namespace kiln {
namespace {

using namespace testing_fake;

TuneOptions quiet() {
  TuneOptions o;
  o.build_threads = 2;
  return o;
}

TEST(TunerDecisions, WrongCandidateIsNeverChosenHoweverFast) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kWrong, 0.3}, {Kind::kCorrect, 0.8}, {Kind::kWrong, 0.1}});
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->candidates.size(), 4u);
  EXPECT_EQ(r->candidates[0].disposition, Disposition::kPassed);
  EXPECT_EQ(r->candidates[1].disposition, Disposition::kIncorrect) << r->candidates[1].message;
  EXPECT_EQ(r->candidates[2].disposition, Disposition::kPassed);
  EXPECT_EQ(r->candidates[3].disposition, Disposition::kIncorrect);
  // The gate's own words: every element within its band, the bias test caught the scaling.
  EXPECT_EQ(r->candidates[1].message.find("mismatches="), std::string::npos) << r->candidates[1].message;
  // (the bias's limits print as "OVER(-toward..away)")
  EXPECT_NE(r->candidates[1].message.find(" OVER(-"), std::string::npos) << r->candidates[1].message;
  // Incorrect candidates are never timed, never chosen.
  EXPECT_EQ(fake.timed_, (std::set<size_t>{0, 2}));
  EXPECT_FALSE(r->candidates[1].timed());
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 2u);
  EXPECT_EQ(r->winner_config.engine_id, 2);
  EXPECT_EQ(r->winner_plan, std::vector<uint8_t>{2});
  EXPECT_EQ(r->reference_kind, ReferenceKind::kHost);
}

TEST(TunerDecisions, CrashingAndFailingCandidatesAreFailedAndTheTuneGoesOn) {
  FakeBackend fake({{Kind::kCrashes, 0.1},
                    {Kind::kRunFails, 0.2},
                    {Kind::kBuildFails, 0.3},
                    {Kind::kBuildNotSupported, 0.4},
                    {Kind::kTimingFails, 0.5},
                    {Kind::kCorrect, 2.0}});
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->candidates.size(), 6u);
  const auto& c = r->candidates;
  EXPECT_EQ(c[0].disposition, Disposition::kFailed);
  EXPECT_NE(c[0].message.find("threw: segmentation fault"), std::string::npos) << c[0].message;
  EXPECT_EQ(c[1].disposition, Disposition::kFailed);
  EXPECT_NE(c[1].message.find("illegal memory access"), std::string::npos) << c[1].message;
  EXPECT_EQ(c[2].disposition, Disposition::kFailed);
  EXPECT_NE(c[2].message.find("plan build failed"), std::string::npos) << c[2].message;
  EXPECT_EQ(c[3].disposition, Disposition::kNotSupported);
  EXPECT_EQ(c[4].disposition, Disposition::kFailed);
  EXPECT_NE(c[4].message.find("timing failed"), std::string::npos) << c[4].message;
  EXPECT_EQ(c[5].disposition, Disposition::kPassed);
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(c[i].timed()) << i;
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 5u);
}

// The backend hears that builds are over (TuneBackend::end_builds: the cuDNN one ends its build helpers there)
// when the last build settles, before the loop times that candidate; and again, harmlessly, at the end.
TEST(TunerDecisions, TheBackendHearsTheBuildsAreOverBeforeTheLastCandidateIsTimed) {
  for (bool pipeline : {true, false}) {
    FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.8}, {Kind::kCorrect, 0.9}, {Kind::kCorrect, 0.7}});
    TuneOptions o;
    o.pipeline = pipeline;
    auto r = tune_with_backend(fake, "g", o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_GE(fake.end_builds_calls_, 1);
    EXPECT_GE(fake.timed_at_end_builds_, 0);
    EXPECT_LE(fake.timed_at_end_builds_, 3) << "pipeline " << pipeline;  // the 4th was timed after it
    EXPECT_EQ(fake.timed_.size(), 4u);
  }
}

TEST(TunerDecisions, NothingCorrectMeansNoWinner) {
  FakeBackend fake({{Kind::kWrong, 0.1}, {Kind::kCrashes, 0.2}});
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(r->winner.has_value());
  EXPECT_TRUE(r->winner_plan.empty());
}

TEST(TunerDecisions, ProgressCountsEveryCandidateAfterTheFilters) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.9}, {Kind::kWrong, 0.8}, {Kind::kCorrect, 0.7}});
  TuneOptions o = quiet();
  o.exclude = {"eng1"};
  std::vector<std::pair<size_t, size_t>> seen;
  std::vector<std::string> ids;
  o.progress = [&](size_t done, size_t total, const std::string& id) {
    seen.emplace_back(done, total);
    ids.push_back(id);
  };
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, size_t>>{{1, 3}, {2, 3}, {3, 3}}));
  EXPECT_EQ(ids, (std::vector<std::string>{"eng0", "eng2", "eng3"}));
  EXPECT_EQ(fake.built_.count(1), 0u);  // excluded: never built
  EXPECT_EQ(r->winner_config.engine_id, 3);
}

// Where the heuristics rank no candidate (found on the H200 for conv wgrad: `kiln worker --top-k 8` and 32 had
// "no engine configuration left after filters"), top_k takes the first k of the enumeration instead.
TEST(TunerDecisions, TopKTakesTheEnumerationsFirstWhenTheHeuristicsRankNone) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.5}, {Kind::kCorrect, 0.1}});
  fake.ranked_ = false;
  TuneOptions o = quiet();
  o.top_k = 2;
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(r->winner_config.engine_id, 1);  // the faster of the first two; the third is left out
  EXPECT_EQ(fake.built_.count(2), 0u);
}

TEST(TunerDecisions, BuildsRunOnWorkerThreadsAheadOfTheLoop) {
  std::vector<Script> s(8, Script{Kind::kCorrect, 1.0});
  FakeBackend fake(s);
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(fake.build_threads_.count(std::this_thread::get_id()), 0u);  // never on the loop's thread
  EXPECT_LE(fake.workers_.size(), 2u);
  for (size_t w : fake.workers_) EXPECT_LT(w, 2u);
  EXPECT_EQ(fake.built_.size(), 8u);
}

TEST(TunerDecisions, AnInterruptKeepsFinishedCandidatesAndTheBestOfThem) {
  std::vector<Script> s = {
      {Kind::kCorrect, 2.0}, {Kind::kCorrect, 1.5}, {Kind::kWrong, 0.1}, {Kind::kCorrect, 0.5}, {Kind::kCorrect, 0.2}};
  FakeBackend fake(s);
  std::atomic<bool> cancel{false};
  fake.on_time = [&](size_t i) {
    if (i == 1) cancel = true;  // Ctrl-C while candidate 1 is timed
  };
  TuneOptions o = quiet();
  o.cancel = &cancel;
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->cancelled);
  ASSERT_EQ(r->candidates.size(), 5u);
  EXPECT_EQ(r->candidates[1].disposition, Disposition::kPassed);  // the one in progress finishes
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(r->candidates[i].disposition, Disposition::kNotVerified) << i;
    EXPECT_NE(r->candidates[i].message.find("interrupted"), std::string::npos) << r->candidates[i].message;
  }
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 1u);  // the best verified so far
}

TEST(TunerDecisions, TheBudgetBoundsTheWholeTune) {
  std::vector<Script> s(30, Script{Kind::kCorrect, 1.0});
  for (size_t i = 0; i < s.size(); ++i) s[i].median_ms = 1.0 + 0.01 * static_cast<double>(i);
  FakeBackend fake(s);
  fake.on_time = [](size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(40)); };
  TuneOptions o = quiet();
  o.time_budget_s = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tune_with_backend(fake, "fake", o);
  const double s_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->budget_exhausted);
  size_t reached = 0, skipped = 0;
  for (const auto& c : r->candidates) {
    if (c.disposition == Disposition::kPassed) ++reached;
    if (c.disposition == Disposition::kNotVerified) {
      ++skipped;
      EXPECT_NE(c.message.find("time budget reached"), std::string::npos) << c.message;
    }
  }
  EXPECT_GE(reached, 1u);
  EXPECT_GE(skipped, 10u);
  EXPECT_EQ(reached + skipped, 30u);
  EXPECT_LT(s_taken, 0.2 + 0.5);  // at most one candidate past the budget (plus a loaded machine's slack)
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 0u);  // the fastest of those reached
}

TEST(TunerDecisions, WithoutAReferenceCandidatesAreNotVerifiedAndTheFastestTimedWins) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kWrong, 0.5}, {Kind::kRunFails, 0.1}}, /*has_reference=*/false);
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->reference_kind, ReferenceKind::kNone);
  EXPECT_EQ(r->candidates[0].disposition, Disposition::kNotVerified);
  EXPECT_EQ(r->candidates[1].disposition, Disposition::kNotVerified);  // nobody can tell it is wrong
  EXPECT_EQ(r->candidates[2].disposition, Disposition::kFailed);
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 1u);
}

// The incumbent rule inside a tune: a challenger within noise keeps the incumbent as the winner, but only
// when the incumbent passed in this run; a wrong incumbent is never kept, whatever its earlier timing.
TEST(TunerDecisions, AnIncumbentIsKeptWithinNoiseOnlyWhenItPassesAgain) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kWrong, 0.99}, {Kind::kCorrect, 0.995}});
  TuneOptions o = quiet();
  o.incumbent = Incumbent{"eng0", 1.0, 0.001};
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->fastest && r->winner && r->incumbent_decision);
  EXPECT_EQ(*r->fastest, 2u);
  EXPECT_FALSE(r->incumbent_decision->replace) << r->incumbent_decision->explanation;
  EXPECT_EQ(*r->winner, 0u);
  EXPECT_EQ(r->winner_plan, std::vector<uint8_t>{0});

  FakeBackend again({{Kind::kCorrect, 1.0}, {Kind::kWrong, 0.99}, {Kind::kCorrect, 0.995}});
  o.incumbent = Incumbent{"eng1", 1.0, 0.001};  // the earlier winner, wrong now
  r = tune_with_backend(again, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->winner && r->incumbent_decision);
  EXPECT_EQ(r->candidates[1].disposition, Disposition::kIncorrect);
  // Within noise of the recorded timing, but the incumbent is wrong now: the fastest correct wins, and the decision
  // says the incumbent did not pass (it used to say "kept" while the challenger was stored).
  EXPECT_TRUE(r->incumbent_decision->replace);
  EXPECT_NE(r->incumbent_decision->explanation.find("incumbent eng1 did not pass in this tune"), std::string::npos)
      << r->incumbent_decision->explanation;
  EXPECT_EQ(*r->winner, 2u);
  EXPECT_EQ(r->winner_plan, std::vector<uint8_t>{2});
}

// A stored incumbent time from an older harness (or another day) is not what the challenger is compared with: the
// incumbent timed again in this tune is. Stored 3% slower than it runs now, it would have lost to a challenger
// 0.5% faster; at this tune's time the challenger is within noise and the incumbent stays.
TEST(TunerDecisions, AnIncumbentTimedAgainIsComparedAtItsNewTime) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.995}});
  TuneOptions o = quiet();
  o.incumbent = Incumbent{"eng0", 1.03, 0.001};
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->fastest && r->winner && r->incumbent_decision);
  EXPECT_EQ(*r->fastest, 1u);
  EXPECT_FALSE(r->incumbent_decision->replace) << r->incumbent_decision->explanation;
  EXPECT_EQ(*r->winner, 0u);
  EXPECT_NEAR(r->incumbent_decision->speedup, 1.0 / 0.995, 1e-3) << "this tune's 1.0 ms, not the stored 1.03";

  // Not timed in this tune (not offered): it is compared at its stored time, and not kept on it.
  FakeBackend other({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.995}});
  o.incumbent = Incumbent{"eng7", 0.5, 0.001};
  r = tune_with_backend(other, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->winner && r->incumbent_decision);
  EXPECT_NEAR(r->incumbent_decision->speedup, 0.5 / 0.995, 1e-3) << "the stored 0.5 ms";
  EXPECT_TRUE(r->incumbent_decision->replace);
  EXPECT_EQ(*r->winner, 1u);
}

TEST(TunerDecisions, PhasesAreReportedPerCandidate) {
  FakeBackend fake({{Kind::kCorrect, 1.0}});
  fake.on_time = [](size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(5)); };
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  const CandidateResult& c = r->candidates[0];
  EXPECT_GT(c.check_ms, 0.0);
  EXPECT_GE(c.measure_ms, 5.0);
  EXPECT_GE(c.build_ms, 0.0);
  EXPECT_GE(r->total_wall_ms, c.measure_ms);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

using namespace testing_fake;

// ---- The candidate budget (kiln/tune/tune_policy.h): runtime-compiled candidates compiled in rank order, the rest
// left once the last two timed did not beat the best by more than the noise.

std::vector<Script> compiled(const std::vector<double>& medians) {
  std::vector<Script> s;
  for (double m : medians) s.push_back(Script{Kind::kCorrect, m, 0, /*runtime_compiled=*/true});
  return s;
}

size_t left_by_budget(const TuneResult& r) {
  size_t n = 0;
  for (const CandidateResult& c : r.candidates)
    n += c.disposition == Disposition::kNotVerified && c.message.find("not run: candidate budget") == 0;
  return n;
}

TEST(TunerCandidateBudget, StopsWhenTheRankingStopsPayingAndExhaustiveTriesEveryOne) {
  // In rank order: the second is best among the first four; the last two of those did not beat it; a faster one
  // waits at rank 5, which only --exhaustive reaches.
  const std::vector<double> medians = {1.0, 0.9, 0.95, 0.95, 0.93, 0.5, 0.97, 0.99, 1.1, 1.2};
  FakeBackend fake(compiled(medians));
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(fake.built_.size(), 4u);
  EXPECT_EQ(left_by_budget(*r), 6u);
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 1);
  EXPECT_NE(r->candidates.back().message.find("none of the last 2 of 4"), std::string::npos)
      << r->candidates.back().message;

  FakeBackend all(compiled(medians));
  TuneOptions o = quiet();
  o.budget.exhaustive = true;
  auto e = tune_with_backend(all, "fake", o);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(all.built_.size(), medians.size());
  EXPECT_EQ(left_by_budget(*e), 0u);
  EXPECT_EQ(e->candidates[*e->winner].config.engine_id, 5);
}

// With build helpers the budget compiles its first `first` per build lane (the helpers and the tuner's own
// process): 3 lanes x 4 here, and then the rule as before: the 11th (0.5) beat the best, so a 13th is compiled,
// and neither of the last two beat it.
TEST(TunerCandidateBudget, TheFirstAreCompiledPerBuildLane) {
  const std::vector<double> medians = {1.0, 0.9, 0.95, 0.95, 0.93, 0.94, 0.97, 0.99, 1.1, 1.2, 0.5, 1.3, 1.4, 0.96};
  FakeBackend fake(compiled(medians));
  fake.lanes_ = 3;
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(fake.built_.size(), 13u);
  EXPECT_EQ(left_by_budget(*r), 1u);
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 10);  // at rank 10: one lane's first 4 would not reach it
  EXPECT_NE(r->candidates.back().message.find("none of the last 2 of 13"), std::string::npos)
      << r->candidates.back().message;
  FakeBackend one(compiled(medians));  // one lane: the first 4, as before
  auto r1 = tune_with_backend(one, "fake", quiet());
  ASSERT_TRUE(r1.is_ok());
  EXPECT_EQ(one.built_.size(), 4u);
  EXPECT_EQ(r1->candidates[*r1->winner].config.engine_id, 1);
}

// Build helpers that turn out unable to start (they answer their hello after the budget was sized) take their
// lanes with them: the budget falls back to one lane's first 4 instead of compiling 3 lanes' worth on one.
TEST(TunerCandidateBudget, WhenTheLanesFallTheBudgetFallsWithThem) {
  const std::vector<double> medians = {1.0, 0.9, 0.95, 0.95, 0.93, 0.94, 0.97, 0.99, 1.1, 1.2, 0.5, 1.3, 1.4, 0.96};
  FakeBackend fake(compiled(medians));
  fake.lanes_ = 3;
  fake.on_time = [&fake](size_t) { fake.lanes_ = 1; };  // the helpers are off by the first timing
  TuneOptions o = quiet();
  o.pipeline = false;  // builds on the loop's thread, so the count below does not race with the threads
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(fake.built_.size(), 4u);
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 1);
}

// The backend hears which runtime-compiled candidates may be built after the tuner's filters (the cuDNN backend
// sizes its build helpers by it): --exclude and --top-k leave theirs out, a pinned tune names none.
TEST(TunerCandidateBudget, TheBackendHearsWhichRuntimeCompiledCandidatesAreLeftToBuild) {
  std::vector<Script> script = compiled({1.0, 0.9, 0.95, 0.8});
  script.insert(script.begin(), Script{Kind::kCorrect, 2.0});  // eng0: precompiled
  FakeBackend fake(script);
  TuneOptions o = quiet();
  o.exclude = {"eng2"};
  ASSERT_TRUE(tune_with_backend(fake, "fake", o).is_ok());
  std::vector<int64_t> told = fake.will_build_;
  std::sort(told.begin(), told.end());
  EXPECT_EQ(told, (std::vector<int64_t>{1, 3, 4}));
  FakeBackend top(script);
  o = quiet();
  o.top_k = 2;
  ASSERT_TRUE(tune_with_backend(top, "fake", o).is_ok());
  EXPECT_EQ(top.will_build_, (std::vector<int64_t>{1}));
  FakeBackend pinned(script);
  o = quiet();
  o.pin = EngineConfig{3, {}};
  ASSERT_TRUE(tune_with_backend(pinned, "fake", o).is_ok());
  EXPECT_TRUE(pinned.will_build_.empty());
}

TEST(TunerCandidateBudget, ImprovementsWithinTheLastTwoKeepItCompiling) {
  // 0.8 and 0.7 improve, so a fifth; 0.6 improves, so a sixth; 0.65 does not, but 0.6 is within the last two: a
  // seventh; 0.66 and 0.65 do not: stop after seven. 0.3 at rank 7 is left.
  FakeBackend fake(compiled({1.0, 0.9, 0.8, 0.7, 0.6, 0.65, 0.66, 0.3, 0.2}));
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(fake.built_.size(), 7u);
  EXPECT_EQ(left_by_budget(*r), 2u);
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 4);
}

TEST(TunerCandidateBudget, AnImprovementWithinTheNoiseIsNone) {
  // 0.995 and 0.992 are under 1% faster than 1.0 (the noise floor): no improvement, stop after four.
  FakeBackend fake(compiled({1.0, 1.01, 0.995, 0.992, 0.5}));
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(fake.built_.size(), 4u);
  EXPECT_EQ(left_by_budget(*r), 1u);
}

TEST(TunerCandidateBudget, PriorWinnersFirstThenRankAndEveryPrecompiledCandidateIsTimed) {
  // Engines 0-2 are precompiled (all built and timed, first); 3-9 are runtime-compiled, ranked 9-3 (reverse), and
  // the store saw engine 6 win elsewhere.
  std::vector<Script> s = {Script{Kind::kCorrect, 2.0}, Script{Kind::kCorrect, 2.1}, Script{Kind::kCorrect, 2.2}};
  for (int e = 3; e < 10; ++e) s.push_back(Script{Kind::kCorrect, 3.0, 0, true, 12 - e});
  FakeBackend fake(s);
  TuneOptions o = quiet();
  o.budget.prior = {"eng6", "eng_not_offered"};
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok());
  std::vector<int64_t> order;
  for (const CandidateResult& c : r->candidates) order.push_back(c.config.engine_id);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 6, 9, 8, 7, 5, 4, 3}));
  // None of the runtime-compiled ones beats the precompiled 2.0: four compiled, three left.
  EXPECT_EQ(fake.built_.size(), 7u);
  EXPECT_EQ(left_by_budget(*r), 3u);
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 0);
}

TEST(TunerCandidateBudget, OnlyTimedCandidatesCountSoFailuresNeverEndItWithoutAWinner) {
  // Found by a hostile review: four runtime-compiled candidates that fail to build, then two that work. Untimed ones
  // are as if not compiled: the budget goes on until four were timed, or none is left.
  std::vector<Script> s = compiled({9, 9, 9, 9, 0.5, 0.6});
  for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)].kind = Kind::kBuildFails;
  FakeBackend fake(s);
  auto r = tune_with_backend(fake, "fake", quiet());
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 4);
  EXPECT_EQ(left_by_budget(*r), 0u);
}

TEST(TunerCandidateBudget, AfterAnInterruptTheRestSayInterruptedNotTheBudget) {
  FakeBackend fake(compiled({1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4}));
  std::atomic<bool> cancel{false};
  fake.on_time = [&](size_t i) {
    if (i == 1) cancel = true;
  };
  TuneOptions o = quiet();
  o.cancel = &cancel;
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->cancelled);
  EXPECT_EQ(left_by_budget(*r), 0u);
  for (size_t i = 2; i < r->candidates.size(); ++i)
    EXPECT_NE(r->candidates[i].message.find("interrupted"), std::string::npos) << r->candidates[i].message;
}

TEST(TunerCandidateBudget, AnIncumbentTheTuneDidNotTimeIsNotSaidToBeKept) {
  // The incumbent (rank 9) is left by the budget: the decision says so and the fastest timed wins.
  FakeBackend fake(compiled({1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1}));
  TuneOptions o = quiet();
  o.incumbent = Incumbent{"eng9", 0.1, 0.001};
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE(r->incumbent_decision.has_value());
  EXPECT_TRUE(r->incumbent_decision->replace);
  EXPECT_NE(r->incumbent_decision->explanation.find("did not pass in this tune"), std::string::npos)
      << r->incumbent_decision->explanation;
  EXPECT_EQ(r->candidates[*r->winner].config.engine_id, 0);
  // Ranked first, as the Planner's tunes rank it (rank_prior_winners), it is timed and kept.
  FakeBackend again(compiled({1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1}));
  o.budget.prior = rank_prior_winners({}, "", "eng9");
  auto kept = tune_with_backend(again, "fake", o);
  ASSERT_TRUE(kept.is_ok());
  EXPECT_EQ(kept->candidates[*kept->winner].config.engine_id, 9);
  EXPECT_FALSE(kept->incumbent_decision->replace);
}

TEST(TunerCandidateBudget, PriorWinnersRankMostOftenFirstWithTheIncumbentAhead) {
  const std::vector<std::pair<std::string, std::string>> won = {
      {"t=1", "eng6_k1=0"}, {"t=2", "eng4"}, {"t=3", "eng4"}, {"t=4", "eng9"}, {"t=5", "eng2"}};
  EXPECT_EQ(rank_prior_winners(won, "t=4"), (std::vector<std::string>{"eng4", "eng2", "eng6_k1=0"}));
  EXPECT_EQ(rank_prior_winners(won, "t=9", "eng6_k1=0"),
            (std::vector<std::string>{"eng6_k1=0", "eng4", "eng2", "eng9"}));
}

TEST(TunerCandidateBudget, ABudgetThatCannotHoldIsRefused) {
  FakeBackend fake(compiled({1.0}));
  TuneOptions o = quiet();
  o.budget.first = 0;
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("first must be >= 1"), std::string::npos);
}

TEST(TunerGpuShare, TheRestIsTheDeviceTimeScaledByTheShare) {
  EXPECT_DOUBLE_EQ(gpu_share_rest_ms(10.0, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(gpu_share_rest_ms(10.0, 0.5), 10.0);
  EXPECT_DOUBLE_EQ(gpu_share_rest_ms(10.0, 0.25), 30.0);
  EXPECT_DOUBLE_EQ(gpu_share_rest_ms(0.0, 0.25), 0.0);
  EXPECT_DOUBLE_EQ(gpu_share_rest_ms(10.0, 0.0), 0.0);  // refused before it gets here
}

TEST(TunerGpuShare, EachCandidateRestsAfterItsDeviceWork) {
  FakeBackend fake({{Kind::kCorrect, 1.0}, {Kind::kCorrect, 0.8}, {Kind::kCorrect, 0.9}});
  std::vector<std::chrono::steady_clock::time_point> timed_at;
  fake.on_time = [&](size_t) {
    timed_at.push_back(std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the candidate's timing on the "device"
  };
  TuneOptions o;
  o.build_threads = 2;
  o.gpu_share = 0.25;  // at least 3 x 20 ms of rest after each timing
  auto r = tune_with_backend(fake, "fake", o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(timed_at.size(), 3u);
  for (size_t i = 1; i < timed_at.size(); ++i) {
    const double gap_ms = std::chrono::duration<double, std::milli>(timed_at[i] - timed_at[i - 1]).count();
    EXPECT_GE(gap_ms, 79.0) << "between timings " << i - 1 << " and " << i;
  }
  ASSERT_TRUE(r->winner.has_value());
  EXPECT_EQ(*r->winner, 1u);  // resting changes when candidates run, not what wins
}

TEST(TunerGpuShare, AShareOutsideZeroToOneIsRefused) {
  for (double share : {0.0, -0.5, 1.5, std::nan("")}) {
    FakeBackend fake({{Kind::kCorrect, 1.0}});
    TuneOptions o;
    o.gpu_share = share;
    auto r = tune_with_backend(fake, "fake", o);
    ASSERT_FALSE(r.is_ok()) << share;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("GPU share must be in (0, 1]"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kiln
