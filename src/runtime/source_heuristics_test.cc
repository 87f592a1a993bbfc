// The heuristics source (runtime/plan_sources.h HeuristicsSource): the chain's last step, and the fall-through to the
// heuristics' next choices when the first fails first-use verification.
#include <gtest/gtest.h>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes
using runtime_detail::Built;
using runtime_detail::HeuristicsSource;

class ListingBackend : public FakeBackend {
 public:
  std::vector<EngineConfig> offered;
  StatusOr<std::vector<EngineConfig>> heuristic_configs(const Graph&) override { return offered; }
};

TEST(HeuristicsSource, ItsFailureCarriesEveryEarlierSourcesWhy) {
  SourceFixture f;
  f.backend->fail_heuristics = 1;
  HeuristicsSource h(*f.state);
  std::map<std::string, int64_t> shape = {{"tokens", 64}};
  auto r = f.request(shape);
  r.why.push_back("store: miss");
  Built out;
  auto served = h.serve(r, &out);
  ASSERT_FALSE(served.is_ok());
  EXPECT_NE(served.status().message().find("graph 'mlp' (store: miss; heuristics)"), std::string::npos)
      << served.status().to_string();
  auto r2 = f.request(shape);
  served = h.serve(r2, &out);
  ASSERT_TRUE(served.is_ok() && *served);
  EXPECT_EQ(out.source, PlanSource::kHeuristics);
  EXPECT_EQ(out.plan->config().identity(), "eng1");
}

TEST(HeuristicsSource, AChoiceThatFailsTheGateGivesWayToTheNextThatPasses) {
  auto b = std::make_unique<ListingBackend>();
  ListingBackend* backend = b.get();
  backend->wrong_configs = {"eng1", "eng2"};
  backend->offered = {EngineConfig{1, {}}, EngineConfig{2, {}}, EngineConfig{3, {}}};
  runtime_detail::PlannerState state(std::move(b), PlannerOptions::tools());
  auto pg = runtime_detail::prepare_graph(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto first = backend->build(*pg->graph, pg->signature, std::nullopt, PlanSource::kHeuristics);
  ASSERT_TRUE(first.is_ok());
  Built built;
  built.plan = *first;
  built.source = PlanSource::kHeuristics;
  Status st = HeuristicsSource::admit_or_next(state, &built, "mlp");
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(built.plan->config().identity(), "eng3");
  EXPECT_NE(built.why.find("heuristics' choice eng1 failed first-use verification, eng3 (their choice 3) passed"),
            std::string::npos)
      << built.why;
  EXPECT_EQ(state.counters().heuristic_fall_throughs.load(), 1);
  // Not a heuristic plan: the refusal stands.
  backend->wrong_configs.insert("eng41");
  auto bucket = backend->build(*pg->graph, pg->signature, EngineConfig{41, {}}, PlanSource::kBucket);
  ASSERT_TRUE(bucket.is_ok());
  Built other;
  other.plan = *bucket;
  other.source = PlanSource::kBucket;
  EXPECT_EQ(HeuristicsSource::admit_or_next(state, &other, "mlp").code(), StatusCode::kCheckFailed);
}

}  // namespace
}  // namespace kiln
