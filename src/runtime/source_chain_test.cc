// The chain of sources (kiln/runtime/source_chain.h): its order as data, its description, and the walk following it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kiln/runtime/source_chain.h"
#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

// The order is the contract docs/architecture.md describes: a change to it is a change of behaviour.
TEST(SourceChain, TheOrderIsWrittenOnce) {
  EXPECT_EQ(source_chain_text(),
            "memory > segments > store > split > padded > store (after the stopgaps) > dynamic > bucket > heuristics");
  const SourceStep want[] = {SourceStep::kMemory,  SourceStep::kSegments, SourceStep::kStore,
                             SourceStep::kSplit,   SourceStep::kPadded,   SourceStep::kStoreAfterStopgaps,
                             SourceStep::kDynamic, SourceStep::kBucket,   SourceStep::kHeuristics};
  for (int i = 0; i < kSourceStepCount; ++i) EXPECT_EQ(kSourceChain[i].step, want[i]) << i;
  EXPECT_EQ(kSourceChain[5].source, PlanSource::kStore);
}

TEST(SourceChain, TheJsonListsTheOrderAndTheAskedForSources) {
  auto j = nlohmann::json::parse(source_chain_json());
  ASSERT_EQ(j["order"].size(), static_cast<size_t>(kSourceStepCount));
  EXPECT_EQ(j["order"][0]["name"], "memory");
  EXPECT_EQ(j["order"][8]["source"], "heuristics");
  for (const auto& e : j["order"]) EXPECT_FALSE(e["cost"].get<std::string>().empty()) << e.dump();
  ASSERT_EQ(j["asked_for"].size(), 2u);
  EXPECT_EQ(j["asked_for"][0]["source"], "tuned");
  EXPECT_EQ(j["asked_for"][1]["source"], "pinned");
}

// Every source after the store declines a stored key; with nothing stored, each says why in the chain's order
// before the heuristics serve.
TEST(SourceChain, TheWalkAsksInTheChainsOrder) {
  SourceFixture f(PlannerOptions::serving());
  runtime_detail::SourceChain chain(*f.state);
  f.backend->stored.insert("tokens=64");
  std::map<std::string, int64_t> own = {{"tokens", 64}};
  auto stored = chain.build(f.pg, own, /*allow_stopgap=*/true);
  ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
  EXPECT_EQ(stored->source, PlanSource::kStore);
  EXPECT_EQ(f.backend->segment_queries.load(), 1);  // segments first
  EXPECT_EQ(f.backend->builds.load(), 0);

  f.backend->tuned.push_back(TunedShape{"tokens=64", {{"tokens", 64}}, EngineConfig{41, {}}});
  f.backend->dynamic_ok = false;
  std::map<std::string, int64_t> other = {{"tokens", 3000}};  // no split, no pad, no bucket (exact buckets)
  auto built = chain.build(f.pg, other, /*allow_stopgap=*/true);
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  EXPECT_EQ(built->source, PlanSource::kHeuristics) << built->why;
  const size_t split = built->why.find("split:"), padded = built->why.find("padded:"),
               store = built->why.find("store:"), dynamic = built->why.find("dynamic:"),
               bucket = built->why.find("; bucket ");
  ASSERT_NE(split, std::string::npos) << built->why;
  ASSERT_NE(padded, std::string::npos) << built->why;
  ASSERT_NE(store, std::string::npos) << built->why;
  ASSERT_NE(dynamic, std::string::npos) << built->why;
  ASSERT_NE(bucket, std::string::npos) << built->why;
  // tokens=3000 is not a tuned shape: the store is asked after the stopgaps.
  EXPECT_LT(split, padded);
  EXPECT_LT(padded, store);
  EXPECT_LT(store, dynamic);
  EXPECT_LT(dynamic, bucket);
}

}  // namespace
}  // namespace kiln
