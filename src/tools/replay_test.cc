// kiln replay's library side (kiln/tools/replay.h): the job's checks, the option names, the report.
// The trace's own errors are tested through the CLI (src/tune/tune_cli_test.cc, ReplayRefusesBadTraces).
#include "kiln/tools/replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kiln {
namespace {

TEST(Replay, OptionNamesRoundTripAndBadOnesNameTheOption) {
  for (NewShapes n : {NewShapes::kStopgap, NewShapes::kBuildNow}) EXPECT_EQ(*parse_new_shapes(new_shapes_name(n)), n);
  for (PromoteBy p : {PromoteBy::kBuild, PromoteBy::kTune}) EXPECT_EQ(*parse_promote_by(promote_by_name(p)), p);
  auto n = parse_new_shapes("later");
  ASSERT_FALSE(n.is_ok());
  EXPECT_EQ(n.status().message(), "--new-shapes must be 'stopgap' or 'build-now', got 'later'");
  auto p = parse_promote_by("Tune");  // exact names only
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("--promote-by must be 'build' or 'tune', got 'Tune'"), std::string::npos);
  for (int i = 0; i < kPlanSourceCount; ++i) {
    const auto s = static_cast<PlanSource>(i);
    EXPECT_EQ(*parse_plan_source(plan_source_name(s)), s);
  }
  EXPECT_FALSE(parse_plan_source("disk").is_ok());
}

TEST(Replay, TheJobIsCheckedWholeBeforeAnythingRuns) {
  EXPECT_TRUE(check_replay_job(ReplayJob{}).is_ok());
  auto msg = [](ReplayJob j) { return check_replay_job(j).message(); };
  ReplayJob j;
  j.threads = 0;
  EXPECT_EQ(msg(j), "--threads must be 1..256, got 0");
  j = {};
  j.handles = 65;
  EXPECT_EQ(msg(j), "--handles must be 1..64, got 65");
  j = {};
  j.split_max_parts = 1;
  EXPECT_EQ(msg(j), "--split-max-parts must be 2..64 (one part is the shape itself), got 1");
  j.split_max_parts = 65;
  EXPECT_EQ(msg(j), "--split-max-parts must be 2..64 (one part is the shape itself), got 65");
  j = {};
  j.split_max_parts_given = true;
  EXPECT_TRUE(check_replay_job(j).is_ok());
  j.split = false;
  EXPECT_EQ(msg(j), "--split-max-parts bounds split stopgaps: it needs --new-shapes stopgap and no --no-split");
  j.split = true;
  j.new_shapes = NewShapes::kBuildNow;
  EXPECT_NE(msg(j).find("--split-max-parts bounds split stopgaps"), std::string::npos);
  j = {};
  j.split_overlap = false;
  EXPECT_TRUE(check_replay_job(j).is_ok());
  j.split = false;
  EXPECT_EQ(msg(j), "--no-split-overlap changes split stopgaps: it needs --new-shapes stopgap and no --no-split");
  j = {};
  j.warm = true;
  EXPECT_NE(msg(j).find("--warm warms what --preload loads"), std::string::npos);
  j.preload = true;
  EXPECT_TRUE(check_replay_job(j).is_ok());
  j = {};
  j.tune_bounds_given = true;
  EXPECT_NE(msg(j).find("give it too"), std::string::npos);
  j.promote_by = PromoteBy::kTune;
  EXPECT_TRUE(check_replay_job(j).is_ok());
  j.promote = false;
  EXPECT_NE(msg(j).find("tunes what replaces a stopgap"), std::string::npos);
  j = {};
  j.promote_by = PromoteBy::kTune;
  j.new_shapes = NewShapes::kBuildNow;
  EXPECT_NE(msg(j).find("tunes what replaces a stopgap"), std::string::npos);
  j = {};
  j.save_kernel_caches = true;
  EXPECT_NE(msg(j).find("--save-kernel-caches keeps kernel caches in the plan store: give --store too"),
            std::string::npos);
  j.store_path = "plans.db";
  EXPECT_TRUE(check_replay_job(j).is_ok());
  auto kept = planner_options(j);
  ASSERT_TRUE(kept.is_ok());
  EXPECT_TRUE(kept->save_kernel_caches);
  EXPECT_TRUE(kept->store_writable);  // keeping them writes to the store
  j = {};
  j.promote_by = PromoteBy::kTune;
  j.tuning.gpu_share = 0;
  EXPECT_EQ(msg(j), "--tune-gpu-share must be in (0, 1], got 0.000000");
  j.tuning.gpu_share = 0.25;
  EXPECT_TRUE(check_replay_job(j).is_ok());
  j = {};
  j.tuning.top_k = -1;
  EXPECT_NE(msg(j).find("--tune-top-k must be 0..10000"), std::string::npos);
  j = {};
  j.tuning.time_budget_s = std::nan("");
  EXPECT_NE(msg(j).find("--tune-budget must be 0..3600"), std::string::npos);
}

TEST(Replay, PlannerOptionsCarryTheJobAndNameABadBucketPolicy) {
  ReplayJob j;
  j.store_path = "plans.db";
  j.handles = 7;
  j.new_shapes = NewShapes::kBuildNow;
  j.promote = false;
  j.padded = false;
  j.buckets = "batch=pow2";
  auto po = planner_options(j);
  ASSERT_TRUE(po.is_ok()) << po.status().message();
  EXPECT_EQ(po->store_path, "plans.db");
  EXPECT_EQ(po->handles, 7);
  EXPECT_EQ(po->new_shapes, NewShapes::kBuildNow);
  EXPECT_FALSE(po->promote);
  EXPECT_FALSE(po->padded);
  EXPECT_EQ(po->buckets.text(), BucketPolicy::parse("batch=pow2")->text());
  EXPECT_EQ(po->shadow.sample_every, ShadowSampling{}.sample_every);  // the Planner's default unless asked
  j.shadow_every = 1;
  EXPECT_EQ(planner_options(j)->shadow.sample_every, 1);
  j.shadow_every = 0;
  EXPECT_EQ(planner_options(j)->shadow.sample_every, 0);
  j.buckets = "batch=cubes";
  auto bad = planner_options(j);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message().rfind("--buckets", 0), 0u) << bad.status().message();
}

TEST(Replay, PercentileIsNearestRank) {
  EXPECT_EQ(percentile({}, 0.5), 0);
  EXPECT_EQ(percentile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.0), 1);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.99), 5);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 1.0), 5);
}

// Two shapes of one graph: the first served by a padded stopgap (then its hits), then promoted.
ReplayReport two_shape_report() {
  ReplayReport rep;
  rep.trace.path = "t.json";
  Graph g;
  g.name = "mlp";
  g.dynamic_dims = {{"tokens", 64}};
  rep.trace.graphs.push_back(g);
  rep.trace.specs.push_back("./mlp.json");
  auto req = [](int64_t tokens) {
    TraceRequest q;
    q.shape = {{"tokens", tokens}};
    return q;
  };
  rep.trace.requests = {req(100), req(100), req(100), req(200)};
  rep.threads = 2;
  rep.samples = {
      {PlanSource::kPadded, PlanSource::kPadded, 0, 0.1, 0.5, 0.40, "eng1", "store: no record; padded from 128"},
      {PlanSource::kMemory, PlanSource::kPadded, 1, 0.001, 0.3, 0.25, "eng1", ""},
      {PlanSource::kMemory, PlanSource::kBucket, 2, 0.001, 0.2, 0.15, "eng2", ""},
      {PlanSource::kHeuristics, PlanSource::kHeuristics, 3, 20.0, 0.4, 0.30, "eng3", "store: no record"},
  };
  rep.stats.promotions = 1;
  return rep;
}

TEST(Replay, TheReportCountsSourcesAndSaysHowEachShapeWasFirstServed) {
  const ReplayReport rep = two_shape_report();
  const auto j = replay_report_json(rep);
  EXPECT_EQ(j["requests"], 4);
  EXPECT_EQ(j["by_source"]["memory"]["calls"], 2);
  EXPECT_EQ(j["by_source"]["padded"]["calls"], 1);
  EXPECT_EQ(j["by_source"]["heuristics"]["calls"], 1);
  EXPECT_EQ(j["by_source"]["store"]["calls"], 0);
  EXPECT_DOUBLE_EQ(j["by_source"]["memory"]["share"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["by_source"]["heuristics"]["first_execution_ms_p50"].get<double>(), 20.4);
  EXPECT_DOUBLE_EQ(j["latency_ms"]["p99"].get<double>(), 20.4);
  ASSERT_EQ(j["by_shape"].size(), 2u);
  const auto& s100 = j["by_shape"][0];
  EXPECT_EQ(s100["shape"], "tokens=100");
  EXPECT_EQ(s100["first_source"], "padded");
  EXPECT_EQ(s100["stopgap_executions"], 1);  // the hit on the padded plan; the first call is apart
  EXPECT_EQ(s100["executions"], 1);          // the hit on the promoted plan
  EXPECT_DOUBLE_EQ(s100["gpu_ms_p50"].get<double>(), 0.15);
  EXPECT_EQ(s100["first_plan_config"], "eng1");
  EXPECT_EQ(s100["first_why"], "store: no record; padded from 128");  // the first request's, not a later one's
  EXPECT_EQ(s100["config"], "eng2");
  EXPECT_EQ(j["by_shape"][1]["first_source"], "heuristics");
  EXPECT_EQ(j["promotions"]["promoted"], 1);
  EXPECT_FALSE(j.contains("preload"));
  const std::string text = replay_report_text(rep);
  EXPECT_NE(text.find("replay t.json: 4 requests on 2 threads"), std::string::npos) << text;
  EXPECT_NE(text.find("memory"), std::string::npos) << text;
  EXPECT_EQ(text.find("preloaded"), std::string::npos) << text;
}

// {"wait": "notices"} barriers: read with their count and timeout; every other form refused, naming the request.
TEST(Replay, ANoticesBarrierIsReadAndItsBadFormsAreRefused) {
  const std::string dir = ::testing::TempDir() + "/replay_notices_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/g.json")
      << R"({"name":"g","tensors":{"x":{"dims":[2,4]}},"nodes":[{"name":"r","op":"relu","inputs":["x"],"outputs":["y"]}],"outputs":["y"]})";
  auto parse = [&](const std::string& barrier) {
    return parse_trace_json(R"({"format":"kiln-trace","version":1,"requests":[{"spec":"g.json"},)" + barrier + "]}",
                            dir + "/t.json");
  };
  StatusOr<Trace> t = parse(R"({"wait":"notices","count":20,"timeout_s":2.5})");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_TRUE(t->requests[1].barrier);
  EXPECT_EQ(t->requests[1].notices, 20);
  EXPECT_DOUBLE_EQ(t->requests[1].timeout_s, 2.5);
  t = parse(R"({"wait":"notices","count":1})");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_DOUBLE_EQ(t->requests[1].timeout_s, 60);
  t = parse(R"({"wait":"promotions"})");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->requests[1].notices, 0);
  for (const char* bad :
       {R"({"wait":"notices"})", R"({"wait":"notices","count":0})", R"({"wait":"notices","count":2.5})",
        R"({"wait":"notices","count":1,"timeout_s":0})", R"({"wait":"notices","count":1,"timeout_s":"10"})",
        R"({"wait":"notices","count":1,"timeout":10})", R"({"wait":"promotions","count":1})", R"({"wait":"later"})",
        R"({"wait":3})"}) {
    StatusOr<Trace> b = parse(bad);
    ASSERT_FALSE(b.is_ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(b.status().message().find("requests[1]"), std::string::npos) << b.status().message();
  }
  std::filesystem::remove_all(dir);
}

// What a notices barrier saw, and the sources of the requests after it, in the JSON report and its text.
TEST(Replay, TheReportSaysWhatEachNoticesBarrierSawAndWhatServedAfterIt) {
  ReplayReport rep = two_shape_report();
  TraceRequest b;
  b.barrier = true;
  b.notices = 3;
  rep.trace.requests.insert(rep.trace.requests.begin() + 2, b);  // requests: 100, 100, barrier, 100, 200
  rep.samples[2].request = 3;
  rep.samples[3].request = 4;
  rep.samples[3].source = PlanSource::kStore;
  rep.notice_waits.push_back({2, 3, 2, 1.5, true});
  const auto j = replay_report_json(rep);
  ASSERT_TRUE(j.contains("notice_waits"));
  ASSERT_EQ(j["notice_waits"].size(), 1u);
  const auto& w = j["notice_waits"][0];
  EXPECT_EQ(w["wanted"], 3);
  EXPECT_EQ(w["seen"], 2);
  EXPECT_EQ(w["timed_out"], true);
  EXPECT_EQ(w["sources_after"], (nlohmann::ordered_json{{"memory", 1}, {"store", 1}}));
  const std::string text = replay_report_text(rep);
  EXPECT_NE(text.find("waited 1.5 s for 3 notices of plans stored elsewhere: 2 seen (timed out); after it: memory 1, "
                      "store 1"),
            std::string::npos)
      << text;
  EXPECT_FALSE(replay_report_json(two_shape_report()).contains("notice_waits"));
}

}  // namespace
}  // namespace kiln
