#include "kiln/tune/tune_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "kiln/measure/measure.h"

namespace kiln {
namespace {

CandidateResult cand(int64_t eng, double median, Disposition d = Disposition::kPassed, int64_t ws = 0,
                     std::map<std::string, int64_t> knobs = {}, double rel = 0.005) {
  CandidateResult c;
  c.config = EngineConfig{eng, std::move(knobs)};
  c.disposition = d;
  c.median_ms = median;
  c.min_ms = median * 0.98;
  c.max_ms = median * 1.05;
  c.rel_error = rel;
  c.samples = median > 0 ? 50 : 0;
  c.workspace_bytes = ws;
  return c;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(Identity, CanonicalRegardlessOfInsertionOrder) {
  std::map<std::string, int64_t> a;
  a["k2"] = 0;
  a["k1"] = 2;
  std::map<std::string, int64_t> b;
  b["k1"] = 2;
  b["k2"] = 0;
  EXPECT_EQ(plan_identity(12, a), "eng12_k1=2_k2=0");
  EXPECT_EQ(plan_identity(12, a), plan_identity(12, b));
  EXPECT_EQ(plan_identity(7, {}), "eng7");
  // Knobs sort by number, as in cuDNN's tags: k2 before k13.
  EXPECT_EQ(plan_identity(41, {{"k13", 0}, {"k2", 4}}), "eng41_k2=4_k13=0");
  EXPECT_EQ(cand(3, 1.0, Disposition::kPassed, 0, {{"SPLIT_K", 4}}).identity(), "eng3_SPLIT_K=4");
}

TEST(Disposition, NamesRoundTrip) {
  for (Disposition d : {Disposition::kPassed, Disposition::kIncorrect, Disposition::kNotSupported, Disposition::kFailed,
                        Disposition::kNotVerified}) {
    auto p = parse_disposition(disposition_name(d));
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(*p, d);
  }
  auto bad = parse_disposition("passed");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "'passed'"));
}

TEST(Winner, IncorrectIsNeverChosenEvenIfFastest) {
  std::vector<CandidateResult> cs = {cand(1, 0.10, Disposition::kIncorrect), cand(2, 0.30),
                                     cand(3, 0.05, Disposition::kNotVerified), cand(4, 0.20)};
  auto w = pick_winner(cs);
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(cs[*w].identity(), "eng4");
}

TEST(Winner, UntimedPassedIsNotEligible) {
  std::vector<CandidateResult> cs = {cand(1, 0.0), cand(2, 0.4)};
  auto w = pick_winner(cs);
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(cs[*w].config.engine_id, 2);
}

TEST(Winner, TiesAreBrokenByWorkspaceThenIdentityInAnyOrder) {
  std::vector<CandidateResult> cs = {cand(9, 0.2, Disposition::kPassed, 1024), cand(5, 0.2, Disposition::kPassed, 0),
                                     cand(4, 0.2, Disposition::kPassed, 0, {{"k", 1}}), cand(8, 0.25)};
  std::mt19937 rng(11);
  for (int i = 0; i < 20; ++i) {
    std::shuffle(cs.begin(), cs.end(), rng);
    auto w = pick_winner(cs);
    ASSERT_TRUE(w.is_ok());
    // eng5 and eng4_k=1 tie on (median, workspace); "eng4_k=1" < "eng5".
    EXPECT_EQ(cs[*w].identity(), "eng4_k=1");
  }
}

TEST(Winner, WorkspaceObjectivePicksSmallestWithinTolerance) {
  std::vector<CandidateResult> cs = {cand(1, 1.00, Disposition::kPassed, 1 << 30),
                                     cand(2, 1.04, Disposition::kPassed, 1 << 20),  // within 5%
                                     cand(3, 1.20, Disposition::kPassed, 0),        // too slow
                                     cand(4, 1.01, Disposition::kIncorrect, 0)};    // never
  WinnerOptions opt;
  opt.objective = Objective::kWorkspace;
  auto w = pick_winner(cs, opt);
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(cs[*w].config.engine_id, 2);
  opt.workspace_tolerance = 0.25;
  EXPECT_EQ(cs[*pick_winner(cs, opt)].config.engine_id, 3);
  opt.workspace_tolerance = 0.0;
  EXPECT_EQ(cs[*pick_winner(cs, opt)].config.engine_id, 1);
  EXPECT_EQ(cs[*pick_winner(cs)].config.engine_id, 1);  // default objective: time
}

TEST(Winner, NotFoundListsDispositions) {
  std::vector<CandidateResult> cs = {cand(1, 0.1, Disposition::kIncorrect), cand(2, 0.0, Disposition::kNotSupported),
                                     cand(3, 0.0, Disposition::kNotSupported)};
  auto w = pick_winner(cs);
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(w.status().message(), "Incorrect: 1")) << w.status().message();
  EXPECT_TRUE(contains(w.status().message(), "NotSupported: 2")) << w.status().message();
}

TEST(Objective, Parse) {
  EXPECT_EQ(*parse_objective("workspace"), Objective::kWorkspace);
  EXPECT_EQ(*parse_objective("time"), Objective::kTime);
  EXPECT_FALSE(parse_objective("speed").is_ok());
}

TEST(Incumbent, WithinNoiseKeepsIncumbent) {
  Incumbent inc{"eng3_k=1", 1.000, 0.004};
  CandidateResult ch = cand(5, 0.988, Disposition::kPassed, 0, {}, 0.004);  // 1.2% faster
  IncumbentDecision d = decide_incumbent(inc, ch);
  EXPECT_FALSE(d.replace);
  EXPECT_EQ(d.chosen_identity, "eng3_k=1");
  // k=2, noise floored at 0.5% each side: margin = 1 - 0.99/1.01 = 1.98%
  EXPECT_NEAR(d.required_margin, 1.0 - 0.99 / 1.01, 1e-12);
  EXPECT_EQ(d.explanation, "kept incumbent eng3_k=1: challenger eng5 1.2% faster, within noise 2.0%");
}

TEST(Incumbent, ClearlyFasterReplaces) {
  Incumbent inc{"eng3_k=1", 1.000, 0.004};
  CandidateResult ch = cand(5, 0.90, Disposition::kPassed, 0, {}, 0.004);
  IncumbentDecision d = decide_incumbent(inc, ch);
  EXPECT_TRUE(d.replace);
  EXPECT_EQ(d.chosen_identity, "eng5");
  EXPECT_NEAR(d.speedup, 1.0 / 0.9, 1e-12);
  EXPECT_TRUE(contains(d.explanation, "replaced incumbent eng3_k=1 with eng5: 10.0% faster")) << d.explanation;
}

TEST(Incumbent, NoisyMeasurementsNeedALargerMargin) {
  Incumbent inc{"eng3", 1.000, 0.03};
  CandidateResult ch = cand(5, 0.90, Disposition::kPassed, 0, {}, 0.03);  // 10% faster, 3% noise each
  IncumbentDecision d = decide_incumbent(inc, ch);
  EXPECT_FALSE(d.replace) << d.explanation;
  IncumbentOptions loose;
  loose.noise_multiplier = 1.0;
  EXPECT_TRUE(decide_incumbent(inc, ch, loose).replace);
}

// Each side's bound uses its own noise: the rule is not symmetric in n_c and n_i (issue 14 item 6: taking
// the challenger's noise from the incumbent went through every test, which gave both sides the same noise).
TEST(Incumbent, EachSideIsJudgedByItsOwnNoise) {
  // A quiet incumbent (0.1%, floored to 0.5%) and a noisy challenger (6%), 10% faster: 0.9 * 1.12 = 1.008 is
  // not below 1.0 * 0.99, so the incumbent stays.
  Incumbent quiet{"eng3", 1.000, 0.001};
  IncumbentDecision d = decide_incumbent(quiet, cand(5, 0.90, Disposition::kPassed, 0, {}, 0.06));
  EXPECT_FALSE(d.replace) << d.explanation;
  EXPECT_NEAR(d.required_margin, 1.0 - 0.99 / 1.12, 1e-12);
  EXPECT_EQ(d.explanation, "kept incumbent eng3: challenger eng5 10.0% faster, within noise 11.6%");
  // The noises swapped, 15% faster: 0.85 * 1.01 = 0.8585 is below 1.0 * 0.88, so the challenger replaces it.
  Incumbent noisy{"eng3", 1.000, 0.06};
  d = decide_incumbent(noisy, cand(5, 0.85, Disposition::kPassed, 0, {}, 0.001));
  EXPECT_TRUE(d.replace) << d.explanation;
  EXPECT_NEAR(d.required_margin, 1.0 - 0.88 / 1.01, 1e-12);
}

TEST(Incumbent, EdgeCases) {
  Incumbent inc{"eng3", 1.0, 0.001};
  EXPECT_FALSE(decide_incumbent(inc, cand(5, 0.5, Disposition::kIncorrect)).replace);
  EXPECT_TRUE(contains(decide_incumbent(inc, cand(5, 0.5, Disposition::kIncorrect)).explanation, "Incorrect"));
  EXPECT_FALSE(decide_incumbent(inc, cand(3, 0.5)).replace);  // same plan
  IncumbentDecision slower = decide_incumbent(inc, cand(5, 1.1));
  EXPECT_FALSE(slower.replace);
  EXPECT_TRUE(contains(slower.explanation, "10.0% slower")) << slower.explanation;
  Incumbent untimed{"eng3", 0.0, 0.0};
  EXPECT_TRUE(decide_incumbent(untimed, cand(5, 1.1)).replace);
}

TEST(Fusion, FasterPolicyAndTies) {
  FusionSide f = fused_side(cand(1, 0.5));
  FusionSide u =
      unfused_side({cand(2, 0.3, Disposition::kPassed, 0, {}, 0.01), cand(3, 0.4, Disposition::kPassed, 0, {}, 0.01)});
  ASSERT_TRUE(u.available);
  EXPECT_DOUBLE_EQ(u.median_ms, 0.7);
  EXPECT_NEAR(u.rel_error, std::sqrt(0.003 * 0.003 + 0.004 * 0.004) / 0.7, 1e-12);
  EXPECT_EQ(u.identities, (std::vector<std::string>{"eng2", "eng3"}));
  auto d = decide_fusion(f, u, FusionPolicy::kFaster);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->use_fused);
  EXPECT_TRUE(contains(d->explanation, "1.40x faster")) << d->explanation;

  FusionSide slow = fused_side(cand(1, 0.9));
  EXPECT_FALSE(decide_fusion(slow, u, FusionPolicy::kFaster)->use_fused);
  FusionSide tie = fused_side(cand(1, 0.7));
  EXPECT_TRUE(decide_fusion(tie, u, FusionPolicy::kFaster)->use_fused);
  EXPECT_FALSE(decide_fusion(f, u, FusionPolicy::kAlwaysUnfused)->use_fused);
  EXPECT_TRUE(decide_fusion(slow, u, FusionPolicy::kAlwaysFused)->use_fused);
}

TEST(Fusion, UnavailableSides) {
  FusionSide bad_fused = fused_side(cand(1, 0.1, Disposition::kIncorrect));
  EXPECT_FALSE(bad_fused.available);
  FusionSide partial = unfused_side({cand(2, 0.3), cand(3, 0.0, Disposition::kNotSupported)});
  EXPECT_FALSE(partial.available);
  FusionSide u = unfused_side({cand(2, 0.3)});
  EXPECT_EQ(decide_fusion(bad_fused, u, FusionPolicy::kAlwaysFused).status().code(), StatusCode::kNotSupported);
  EXPECT_FALSE(decide_fusion(bad_fused, u, FusionPolicy::kFaster)->use_fused);
  EXPECT_EQ(decide_fusion(bad_fused, partial, FusionPolicy::kFaster).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(decide_fusion(fused_side(cand(1, 0.2)), partial, FusionPolicy::kAlwaysUnfused).status().code(),
            StatusCode::kNotSupported);
  EXPECT_FALSE(unfused_side({}).available);
  EXPECT_EQ(*parse_fusion_policy("always_fused"), FusionPolicy::kAlwaysFused);
  EXPECT_FALSE(parse_fusion_policy("fused").is_ok());
}

std::vector<CandidateResult> sample_run() {
  std::vector<CandidateResult> cs = {
      cand(0, 0.40, Disposition::kPassed, 4096, {{"SPLIT_K", 1}}),
      cand(7, 0.20, Disposition::kPassed, 1 << 20),
      cand(3, 0.60, Disposition::kPassed, 0),
      cand(9, 0.10, Disposition::kIncorrect, 0),
      cand(5, 0.0, Disposition::kNotSupported, 0),
  };
  cs[0].heuristic_rank = 0;
  cs[1].heuristic_rank = 1;
  cs[3].message = "max rel error 0.3 > 0.01";
  cs[4].message = "engine refused the layout";
  for (auto& c : cs) c.flops = 2e9;
  return cs;
}

TEST(Report, TableSortedWithMarksAndRatios) {
  ReportOptions opt;
  opt.title = "matmul 4096x4096x4096 bf16";
  std::string t = format_report_table(sample_run(), opt);
  EXPECT_EQ(t.rfind("matmul 4096x4096x4096 bf16\n", 0), 0u) << t;
  // Sorted by median: eng9 (0.10, Incorrect), eng7 (0.20), eng0 (0.40), eng3 (0.60), then untimed eng5.
  const size_t p9 = t.find("eng9"), p7 = t.find("eng7"), p0 = t.find("eng0_SPLIT_K=1"), p3 = t.find("eng3 "),
               p5 = t.find("eng5");
  ASSERT_NE(p9, std::string::npos);
  EXPECT_LT(p9, p7);
  EXPECT_LT(p7, p0);
  EXPECT_LT(p0, p3);
  EXPECT_LT(p3, p5);
  EXPECT_TRUE(contains(t, "*  eng7")) << t;            // winner mark
  EXPECT_TRUE(contains(t, " H eng0_SPLIT_K=1")) << t;  // heuristic's first choice
  EXPECT_TRUE(contains(t, "best: eng7 0.2000 ms")) << t;
  EXPECT_TRUE(contains(t, "best vs heuristic: 2.00x (heuristic eng0_SPLIT_K=1 0.4000 ms, Passed)")) << t;
  EXPECT_TRUE(contains(t, "best vs worst: 3.00x")) << t;
  EXPECT_TRUE(contains(t, "10.0 TFLOP/s")) << t;  // 2e9 flop in 0.2 ms
  EXPECT_TRUE(contains(t, "1.0 MiB")) << t;
  EXPECT_TRUE(contains(t, "Incorrect")) << t;
  EXPECT_TRUE(contains(t, "max rel error 0.3 > 0.01")) << t;
  EXPECT_TRUE(contains(t, "NotSupported")) << t;
}

TEST(Report, ThrottledCandidatesAreMarkedInTheClockColumnAndJson) {
  std::vector<CandidateResult> cs = {cand(1, 0.1), cand(2, 0.2), cand(3, 0.0, Disposition::kNotSupported)};
  cs[1].throttled = true;
  cs[1].message = "throttled: sm clock 1980 -> 1500 MHz";
  std::string t = format_report_table(cs);
  std::istringstream lines(t);
  std::string line, eng1, eng2, eng3;
  while (std::getline(lines, line)) {
    if (eng1.empty() && contains(line, " eng1 ")) eng1 = line;  // the table row, not the footer
    if (eng2.empty() && contains(line, " eng2 ")) eng2 = line;
    if (eng3.empty() && contains(line, " eng3 ")) eng3 = line;
  }
  EXPECT_TRUE(contains(eng1, " ok")) << t;
  EXPECT_FALSE(contains(eng1, "THROTTLED")) << t;
  EXPECT_TRUE(contains(eng2, "THROTTLED  throttled: sm clock 1980 -> 1500 MHz")) << t;  // note shown though Passed
  EXPECT_FALSE(contains(eng3, "ok")) << t;                                              // not timed: no clock verdict
  nlohmann::json j = report_to_json(cs, nlohmann::json::object());
  bool seen = false;
  for (const auto& c : j["candidates"])
    if (c["identity"] == "eng2") {
      seen = true;
      EXPECT_EQ(c["throttled"], true);
    }
  EXPECT_TRUE(seen);
}

TEST(Report, TableWithoutWinnerSaysWhy) {
  std::string t = format_report_table({cand(1, 0.1, Disposition::kIncorrect)});
  EXPECT_TRUE(contains(t, "best: none (no passing, timed candidate")) << t;
}

TEST(Report, GbPerSecondWhenOnlyBytesAreKnown) {
  CandidateResult c = cand(1, 0.5);
  c.bytes = 1e9;
  EXPECT_TRUE(contains(format_report_table({c}), "2000.0 GB/s"));
}

TEST(Report, JsonHasMetaWinnerAndRatios) {
  nlohmann::json meta = {{"git_revision", "abc123"}, {"device", {{"name", "NVIDIA H200"}}}};
  nlohmann::json j = report_to_json(sample_run(), meta);
  EXPECT_EQ(j["meta"]["git_revision"], "abc123");
  EXPECT_EQ(j["winner"], "eng7");
  EXPECT_EQ(j["objective"], "time");
  ASSERT_EQ(j["candidates"].size(), 5u);
  EXPECT_EQ(j["candidates"][0]["identity"], "eng9");
  EXPECT_EQ(j["candidates"][0]["disposition"], "Incorrect");
  EXPECT_EQ(j["candidates"][2]["knobs"]["SPLIT_K"], 1);
  EXPECT_TRUE(j["candidates"][4]["median_ms"].is_null());
  EXPECT_NEAR(j["candidates"][1]["tflops"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(j["summary"]["best_over_heuristic"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(j["summary"]["best_over_worst"].get<double>(), 3.0, 1e-12);
  EXPECT_EQ(j["summary"]["heuristic"], "eng0_SPLIT_K=1");
  EXPECT_EQ(j["summary"]["counts"]["Passed"], 3);
  EXPECT_EQ(j["summary"]["counts"]["Incorrect"], 1);
  // Must round-trip through text (no NaN/inf leaks).
  EXPECT_FALSE(nlohmann::json::parse(j.dump()).is_discarded());
}

TEST(Report, CandidateTimingFromMeasurement) {
  Measurement m;
  m.stats = summarize(SampleSet({1.0, 1.1, 0.9}));
  CandidateResult c;
  c.set_timing(m);
  EXPECT_DOUBLE_EQ(c.median_ms, 1.0);
  EXPECT_DOUBLE_EQ(c.min_ms, 0.9);
  EXPECT_DOUBLE_EQ(c.max_ms, 1.1);
  EXPECT_EQ(c.samples, 3u);
}

// The one encoder of a candidate (candidate_to_json): reports write what they always wrote, byte for byte.
CandidateResult golden_candidate() {
  CandidateResult c = cand(3, 0.5, Disposition::kPassed, 1024, {{"k2", 1}}, 0.125);
  c.min_ms = 0.25;
  c.max_ms = 0.75;
  c.heuristic_rank = 0;
  c.build_ms = 2.0;
  c.check_ms = 1.0;
  c.warmup_ms = 0.25;
  c.measure_ms = 1.25;
  return c;
}

TEST(CandidateJson, ReportFormIsTheReportsBytes) {
  EXPECT_EQ(candidate_to_json(golden_candidate()).dump(),
            R"({"disposition":"Passed","engine_id":3,"heuristic_rank":0,"identity":"eng3_k2=1","knobs":{"k2":1},)"
            R"("max_ms":0.75,"median_ms":0.5,"message":"","min_ms":0.25,)"
            R"("phases_ms":{"build":2.0,"gate":1.0,"timing":1.0,"warmup":0.25},"rel_error":0.125,"samples":50,)"
            R"("throttled":false,"workspace_bytes":1024})");
  CandidateResult refused = cand(4, 0.0, Disposition::kNotSupported);
  refused.message = "refused";
  refused.heuristic_rank = -1;
  EXPECT_EQ(candidate_to_json(refused).dump(),
            R"({"disposition":"NotSupported","engine_id":4,"heuristic_rank":-1,"identity":"eng4","knobs":{},)"
            R"("median_ms":null,"message":"refused","phases_ms":{"build":0.0,"gate":0.0,"timing":0.0,"warmup":0.0},)"
            R"("samples":0,"throttled":false,"workspace_bytes":0})");
}

void expect_same_candidate(const CandidateResult& a, const CandidateResult& b) {
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.disposition, b.disposition);
  EXPECT_EQ(a.message, b.message);
  EXPECT_EQ(a.median_ms, b.median_ms);
  EXPECT_EQ(a.min_ms, b.min_ms);
  EXPECT_EQ(a.max_ms, b.max_ms);
  EXPECT_EQ(a.rel_error, b.rel_error);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.throttled, b.throttled);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.heuristic_rank, b.heuristic_rank);
  EXPECT_EQ(a.flops, b.flops);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.build_ms, b.build_ms);
  EXPECT_EQ(a.check_ms, b.check_ms);
  EXPECT_EQ(a.measure_ms, b.measure_ms);
  EXPECT_EQ(a.warmup_ms, b.warmup_ms);
}

// What a worker sends its supervisor: every field back exactly, those a report drops or derives included.
TEST(CandidateJson, ExactFormRoundTrips) {
  CandidateResult c = golden_candidate();
  c.flops = 3e9;
  c.throttled = true;
  c.message = "note";
  c.measure_ms = 0.3;  // the report's timing (0.3 - 0.1) plus warmup is not exactly 0.3
  c.warmup_ms = 0.1;
  CandidateResult untimed = cand(8, 0.0, Disposition::kFailed, 0, {{"k13", 0}, {"k2", 4}});
  untimed.min_ms = 0.5;  // not timed, yet with numbers a report leaves out
  untimed.rel_error = std::numeric_limits<double>::infinity();
  for (const CandidateResult& x : {c, untimed}) {
    SCOPED_TRACE(x.identity());
    const std::string text = candidate_to_json(x, CandidateJson::kExact).dump();
    StatusOr<CandidateResult> back = candidate_from_json(nlohmann::json::parse(text));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    expect_same_candidate(*back, x);
  }
}

TEST(CandidateJson, ReportFormReadsBackWhatItKeeps) {
  StatusOr<CandidateResult> back = candidate_from_json(candidate_to_json(golden_candidate()));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  expect_same_candidate(*back, golden_candidate());
}

TEST(CandidateJson, MalformedIsAnErrorNamingIt) {
  nlohmann::json j = candidate_to_json(golden_candidate(), CandidateJson::kExact);
  j.erase("samples");
  EXPECT_EQ(candidate_from_json(j).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(candidate_from_json(j).status().message().find("samples"), std::string::npos)
      << candidate_from_json(j).status().message();
  j = candidate_to_json(golden_candidate());
  j["disposition"] = "Fine";
  EXPECT_NE(candidate_from_json(j).status().message().find("unknown disposition 'Fine'"), std::string::npos);
}

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(Progress, PlainLinesWhenNotATty) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter p("tune", 3, f);  // kAuto on a file: lines
    EXPECT_FALSE(p.drawing_bar());
    p.update(1, "eng1 0.2 ms");
    p.update(2);
    p.finish();
  }
  const std::string s = read_all(f);
  EXPECT_TRUE(std::regex_match(s, std::regex("tune: 1/3 eng1 0.2 ms \\([0-9.]+ s\\)\n"
                                             "tune: 2/3 \\([0-9.]+ s\\)\n"
                                             "tune: 3/3 done \\([0-9.]+ s\\)\n")))
      << s;
  std::fclose(f);
}

// Regression (issue 11): `kiln tune` built its reporter before the candidates were known and printed
// "0/0 <candidate> (27 total)". The total now comes with each update.
TEST(Progress, TotalGivenWithTheUpdateIsShown) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter p("tune g", 0, f, ProgressReporter::Mode::kLines);
    p.update(1, 27, "eng3");
    p.update(2, 27, "eng5");
  }
  const std::string s = read_all(f);
  EXPECT_EQ(s.rfind("tune g: 1/27 eng3 (", 0), 0u) << s;
  EXPECT_NE(s.find("\ntune g: 2/27 eng5 ("), std::string::npos) << s;
  std::fclose(f);
}

TEST(Progress, BarShowsTheTimeLeft) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter p("tune", 0, f, ProgressReporter::Mode::kBar);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.update(1, 4, "eng7");
  }
  const std::string s = read_all(f);
  EXPECT_TRUE(std::regex_search(s, std::regex("1/4 ~[0-9]+ s left eng7"))) << s;
  std::fclose(f);
}

TEST(Progress, BarRewritesOneLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter p("tune", 4, f, ProgressReporter::Mode::kBar);
    p.update(2, "eng7");
  }  // destructor closes the line
  std::string s = read_all(f);
  EXPECT_EQ(s.rfind("\rtune [###############...............] 2/4 ~", 0), 0u) << s;
  EXPECT_NE(s.find(" s left eng7"), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
  std::fclose(f);
}

TEST(Progress, SilentPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressReporter p("tune", 2, f, ProgressReporter::Mode::kSilent);
    p.update(1, "x");
    p.finish();
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A decomposition's bound: known parts as timed, one-node parts at their node's time alone, other parts at their
// slowest heavy node alone (a pointwise fused into a part counts nothing).
TEST(ChainLowerBound, KnownPartsAsTimedOthersAtTheirSlowestHeavyNode) {
  const std::vector<double> node_ms = {1.41, 0.06, 0.07};  // a GEMM, its bias, a GELU, each alone
  const std::vector<bool> heavy = {true, false, false};
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, node_ms, heavy, {}), 1.41 + 0.07);
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 1, 1}, node_ms, heavy, {}), 1.41) << "bias+GELU fused: no bound";
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 1, 2}, node_ms, heavy, {}), 1.41 + 0.06 + 0.07);
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 1, 1}, node_ms, heavy, {{1, 0.065}}), 1.41 + 0.065);
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, node_ms, heavy, {{0, 1.39}}), 1.39 + 0.07);
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, node_ms, heavy, {{1, 0.0}}), 1.41 + 0.07) << "0 is not a time";
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, {0.0, 0.06, 0.07}, heavy, {}), 0.07) << "the GEMM's time unknown";
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, {}, heavy, {}), 0.0);
  EXPECT_DOUBLE_EQ(chain_lower_bound_ms({0, 0, 1}, node_ms, {}, {}), 0.07)
      << "no node heavy: a fused part bounds nothing";
}

}  // namespace
}  // namespace kiln
