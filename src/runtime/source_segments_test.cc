// The segments source (runtime/plan_sources.h SegmentsSource): a graph cuDNN cannot fuse whole runs as its segments,
// each obtained through the chain; a graph that fuses is asked about once.
#include <gtest/gtest.h>

#include "kiln/graph/decompose.h"
#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::Built;

TEST(SegmentsSource, AFusableStructureIsAskedAboutOnce) {
  SourceFixture f;
  runtime_detail::SourceChain chain(*f.state);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  for (int i = 0; i < 3; ++i) {
    auto got = chain.build(f.pg, shape, /*allow_stopgap=*/false);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->source, PlanSource::kHeuristics);
  }
  EXPECT_EQ(f.backend->segment_queries.load(), 1);
}

TEST(SegmentsSource, AnUnfusableGraphRunsAsItsSegmentsEachFromTheChain) {
  SourceFixture f;
  auto parts = decompose_graph(*f.pg.graph, DataType::kFloat16);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  ASSERT_GE(parts->size(), 2u);
  SegmentDecision d;
  d.segments = *parts;
  d.why = "no engine fuses these (injected)";
  f.backend->segment_into = d;
  f.backend->stored.insert("tokens=64");        // every segment's key: each is served from the store
  runtime_detail::SourceChain chain(*f.state);  // what the segments are obtained through
  runtime_detail::SegmentsSource segments(*f.state, chain);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto r = f.request(shape, /*allow_stopgap=*/false);
  Built out;
  auto served = segments.serve(r, &out);
  ASSERT_TRUE(served.is_ok()) << served.status().to_string();
  ASSERT_TRUE(*served);
  EXPECT_EQ(out.source, PlanSource::kSegments);
  EXPECT_EQ(out.plan->parts().size(), parts->size());
  EXPECT_NE(out.why.find("whole graph not fusable (no engine fuses these (injected)): runs as " +
                         std::to_string(parts->size()) + " fused segments"),
            std::string::npos)
      << out.why;
  EXPECT_NE(out.why.find(parts->front().graph.name + ": eng7 from store"), std::string::npos) << out.why;
  EXPECT_NE(out.why.find(parts->back().graph.name + ": eng7 from store"), std::string::npos) << out.why;
  EXPECT_EQ(f.backend->heuristic_builds.load(), 0);
}

// Under heuristics-and-queue, a segment the store has no plan for is queued as its own graph (a worker tunes it);
// a stored one is not, and no other policy queues.
TEST(SegmentsSource, SegmentsTheStoreLacksAreQueuedForReTune) {
  for (const MismatchPolicy policy : {MismatchPolicy::kHeuristicsAndQueue, MismatchPolicy::kFail}) {
    EnvPolicy e;
    e.on_mismatch = policy;
    SourceFixture f(PlannerOptions::tools().with_store("plans.db", /*writable=*/false).with_policy(e));
    auto parts = decompose_graph(*f.pg.graph, DataType::kFloat16);
    ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
    SegmentDecision d;
    d.segments = *parts;
    d.why = "no engine fuses these (injected)";
    f.backend->segment_into = d;
    f.backend->queue_note = "queued for re-tune (requested 1 time)";
    runtime_detail::SourceChain chain(*f.state);
    runtime_detail::SegmentsSource segments(*f.state, chain);
    std::map<std::string, int64_t> shape = {{"tokens", 64}};
    auto r = f.request(shape, /*allow_stopgap=*/false);
    Built out;
    auto served = segments.serve(r, &out);
    ASSERT_TRUE(served.is_ok()) << served.status().to_string();
    ASSERT_TRUE(*served);
    if (policy != MismatchPolicy::kHeuristicsAndQueue) {
      EXPECT_TRUE(f.backend->queued.empty()) << f.backend->queued.front();
      continue;
    }
    ASSERT_EQ(f.backend->queued.size(), parts->size());  // none stored: every segment queued, once
    EXPECT_EQ(f.backend->queued.front(), "miss, a segment of graph 'mlp'");
    EXPECT_NE(r.joined().find("segment '" + parts->front().graph.name + "': queued for re-tune"), std::string::npos)
        << r.joined();
  }
}

TEST(SegmentsSource, StoredSegmentsAreNotQueued) {
  EnvPolicy e;
  e.on_mismatch = MismatchPolicy::kHeuristicsAndQueue;
  SourceFixture f(PlannerOptions::tools().with_store("plans.db", /*writable=*/false).with_policy(e));
  auto parts = decompose_graph(*f.pg.graph, DataType::kFloat16);
  ASSERT_TRUE(parts.is_ok());
  SegmentDecision d;
  d.segments = *parts;
  d.why = "injected";
  f.backend->segment_into = d;
  f.backend->stored.insert("tokens=64");  // every segment's key
  runtime_detail::SourceChain chain(*f.state);
  runtime_detail::SegmentsSource segments(*f.state, chain);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto r = f.request(shape, /*allow_stopgap=*/false);
  Built out;
  auto served = segments.serve(r, &out);
  ASSERT_TRUE(served.is_ok()) << served.status().to_string();
  EXPECT_TRUE(f.backend->queued.empty());
}

TEST(SegmentsSource, ASegmentThatCannotBeBuiltNamesItself) {
  SourceFixture f;
  auto parts = decompose_graph(*f.pg.graph, DataType::kFloat16);
  ASSERT_TRUE(parts.is_ok());
  SegmentDecision d;
  d.segments = *parts;
  d.why = "too wide (injected)";
  f.backend->segment_into = d;
  f.backend->fail_heuristics = 100;
  runtime_detail::SourceChain chain(*f.state);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto got = chain.build(f.pg, shape, /*allow_stopgap=*/false);
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find("graph 'mlp', segment '" + parts->front().graph.name + "'"), std::string::npos)
      << got.status().to_string();
}

}  // namespace
}  // namespace kiln
