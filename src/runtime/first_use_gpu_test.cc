// Device tier: first-use verification with cuDNN's backend. A backend that wraps it corrupts its heuristic
// plans after they run (a few output elements overwritten): the Planner must refuse such a plan before any
// caller gets it; with the real backend, plans are checked on the device once and serve.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "cli_test_util.h"
#include "gpu_test_util.h"
#include "runtime/corrupting_executor_test_util.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/store/plan_store.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const char* kSpec = R"({
  "name": "mm_bias_relu", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
  "tensors": {"a": {"dims": [1, 64, 128]}, "w": {"dims": [1, 128, 96]}, "bias": {"dims": [1, 1, 96]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["c"]},
            {"name": "bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["b"]},
            {"name": "relu", "op": "relu", "inputs": ["b"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

// cuDNN's backend, except that heuristic plans come back corrupted (the "deliberately wrong candidate").
class WrongHeuristicsBackend : public PlanBackend {
 public:
  explicit WrongHeuristicsBackend(std::unique_ptr<PlanBackend> real) : real_(std::move(real)) {}
  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    return real_->from_store(g, sig, why);
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature& sig) override {
    return real_->tuned_shapes(sig);
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    KILN_ASSIGN_OR_RETURN(auto plan, real_->build(g, sig, config, source));
    if (config) return plan;  // pinned plans stay right
    return std::shared_ptr<const ExecutablePlan>(
        std::make_shared<ExecutablePlan>(g, sig, plan->config(), plan->workspace_bytes(), source,
                                         std::make_unique<test::CorruptingExecutor>(plan, g.find_tensor("y"))));
  }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    ++verifications;
    return real_->verify_first_use(plan);
  }
  int verifications = 0;

 private:
  std::unique_ptr<PlanBackend> real_;
};

TEST(FirstUseGpu, AWrongPlanIsRefusedBeforeAnyCallerGetsIt) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kSpec, "first_use.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  auto real = make_cudnn_plan_backend(o);
  ASSERT_TRUE(real.is_ok()) << real.status().to_string();
  auto backend = std::make_unique<WrongHeuristicsBackend>(std::move(real).value());
  WrongHeuristicsBackend* wrong = backend.get();
  auto planner = Planner::create_with_backend(std::move(backend), o);

  auto refused = planner->obtain(*g);
  ASSERT_FALSE(refused.is_ok()) << "a corrupted plan was served";
  EXPECT_EQ(refused.status().code(), StatusCode::kCheckFailed) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("failed first-use verification"), std::string::npos)
      << refused.status().message();
  std::printf("[ first use ] refused: %s\n", refused.status().message().c_str());
  auto again = planner->obtain(*g);
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(wrong->verifications, 1) << "the failed verdict was not kept";

  // The verdict belongs to the configuration in this environment: the same configuration pinned (built
  // uncorrupted this time) is refused without another check, as the contract says ("never served again").
  auto pg = planner->prepare(*g);
  ASSERT_TRUE(pg.is_ok());
  const std::string& m = refused.status().message();
  const size_t at = m.find("plan ") + 5;
  auto cfg = EngineConfig::parse(m.substr(at, m.find(' ', at) - at));
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  auto pinned = planner->obtain_pinned(*pg, *cfg);
  ASSERT_FALSE(pinned.is_ok());
  EXPECT_EQ(pinned.status().code(), StatusCode::kCheckFailed);
  EXPECT_EQ(wrong->verifications, 1);
  PlannerStats st = planner->stats();
  EXPECT_EQ(st.first_use_checks, 1);
  EXPECT_EQ(st.first_use_refused, 3);
  std::printf("[ first use ] %s\n", st.text().c_str());
}

// With the real backend, a plan from heuristics is checked on the device once, then served from memory.
TEST(FirstUseGpu, HeuristicPlansAreCheckedOnTheDeviceOnce) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kSpec, "first_use.json");
  ASSERT_TRUE(g.is_ok());
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  auto planner = Planner::create(o);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto a = (*planner)->obtain(*g);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  auto b = (*planner)->obtain(*g);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ((*planner)->stats().first_use_checks, 1);
}

// The verdict persists in the store (issue 31): a Planner sharing the store with one that checked a plan
// serves it without checking again, and a configuration that failed is refused by every later Planner on
// that store, even one whose plan would now run right, without running it.
TEST(FirstUseGpu, VerdictsAreKeptInTheStoreForEveryPlannerSharingIt) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kSpec, "first_use.json");
  ASSERT_TRUE(g.is_ok());
  test::TempDir dir;
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  o.store_path = dir.file("passed.db");
  o.store_writable = true;
  {
    auto first = Planner::create(o);
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    ASSERT_TRUE((*first)->obtain(*g).is_ok());
    EXPECT_EQ((*first)->stats().first_use_checks, 1);
  }
  PlannerOptions reader = o;
  reader.store_writable = false;
  {
    auto second = Planner::create(reader);
    ASSERT_TRUE(second.is_ok()) << second.status().to_string();
    auto p = (*second)->obtain(*g);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ((*second)->stats().first_use_checks, 0) << "checked again despite the kept verdict";
  }
  {
    auto s = PlanStore::open(o.store_path);
    ASSERT_TRUE(s.is_ok());
    auto kept = (*s)->list_first_use_verdicts();
    ASSERT_TRUE(kept.is_ok());
    ASSERT_EQ(kept->size(), 1u);
    EXPECT_TRUE(kept->front().passed);
    std::printf("[ first use ] kept: %s %s passed=%d: %s\n", kept->front().structure_sig.substr(0, 12).c_str(),
                kept->front().config.c_str(), kept->front().passed ? 1 : 0, kept->front().summary.c_str());
  }

  // A wrong plan's failure, kept; then cuDNN's own (right) plan of that configuration is never served by a
  // later Planner: it is refused unrun, and the Planner falls through to the heuristics' next configuration.
  PlannerOptions w = o;
  w.store_path = dir.file("failed.db");
  std::string failed_config;
  {
    auto real = make_cudnn_plan_backend(w);
    ASSERT_TRUE(real.is_ok()) << real.status().to_string();
    auto planner = Planner::create_with_backend(std::make_unique<WrongHeuristicsBackend>(std::move(real).value()), w);
    auto refused = planner->obtain(*g);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kCheckFailed);
    const std::string& m = refused.status().message();
    const size_t at = m.find("plan ") + 5;
    failed_config = m.substr(at, m.find(' ', at) - at);
  }
  auto kept = PlanStore::open(w.store_path);
  ASSERT_TRUE(kept.is_ok());
  auto verdicts = (*kept)->list_first_use_verdicts();
  ASSERT_TRUE(verdicts.is_ok());
  ASSERT_EQ(verdicts->size(), 1u);
  EXPECT_EQ(verdicts->front().config, failed_config);
  EXPECT_FALSE(verdicts->front().passed);
  kept->reset();

  auto later = Planner::create(w);
  ASSERT_TRUE(later.is_ok()) << later.status().to_string();
  auto again = (*later)->obtain(*g);
  if (again.is_ok()) {
    EXPECT_NE(again->plan->identity(), failed_config) << "a configuration that failed in this environment was served";
    EXPECT_NE(again->why.find("heuristics' choice " + failed_config + " failed first-use verification"),
              std::string::npos)
        << again->why;
    EXPECT_EQ((*later)->stats().first_use_checks, 1) << "only the configuration served instead is checked";
    std::printf("[ first use ] later Planner served %s: %s\n", again->plan->identity().c_str(), again->why.c_str());
  } else {
    EXPECT_EQ(again.status().code(), StatusCode::kCheckFailed);
    EXPECT_NE(again.status().message().find("verdict kept in the store"), std::string::npos)
        << again.status().message();
    std::printf("[ first use ] later Planner: %s\n", again.status().message().c_str());
  }
}

}  // namespace
}  // namespace kiln
