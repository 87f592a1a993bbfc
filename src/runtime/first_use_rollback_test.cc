// Host tier: a stored plan that fails first-use verification rolls its store back (PlannerOptions::
// rollback_on_first_use_failure, runtime/first_use_rollback.cc): a backend over a real SQLite store, whose
// verification fails the configurations it is told to.
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "kiln/core/engine_config.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::TempDir;

class NoopExecutor : public PlanExecutor {
 public:
  Status run(cudaStream_t, const std::map<int, void*>&, void*) const override { return Status::ok(); }
};

class StoreBackend : public PlanBackend {
 public:
  explicit StoreBackend(std::string path) : path_(std::move(path)) {}
  std::set<std::string> wrong;  // identities that fail first-use verification
  bool writable = true;

  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(path_));
    KILN_ASSIGN_OR_RETURN(LookupResult got, store->get(sig.structure, sig.shape_key, h200()));
    if (!got.runnable()) {
      *why = "no record";
      return std::shared_ptr<const ExecutablePlan>();
    }
    return make(g, sig, EngineConfig{got.record->engine_id, got.record->knobs}, PlanSource::kStore);
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override { return std::vector<TunedShape>{}; }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    return make(g, sig, config ? *config : EngineConfig{1, {}}, source);
  }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    if (wrong.count(plan.identity())) return FirstUseVerdict{false, true, "y: Incorrect max_abs=9.0e+00 (injected)"};
    return FirstUseVerdict{true, true, "y: Passed (fake)"};
  }
  StatusOr<EnvFingerprint> environment() const override { return h200(); }
  Status with_writable_store(const std::function<Status(PlanStore&)>& fn) override {
    if (!writable) return failed_precondition("read-only (injected)");
    KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(path_));
    return fn(*store);
  }

 private:
  static std::shared_ptr<const ExecutablePlan> make(const Graph& g, const GraphSignature& sig, EngineConfig c,
                                                    PlanSource s) {
    return std::make_shared<ExecutablePlan>(g, sig, std::move(c), 0, s, std::make_unique<NoopExecutor>());
  }
  std::string path_;
};

Graph relu_graph() {
  auto g = parse_spec_string(R"({"name": "relu", "io_dtype": "fp32", "tensors": {"x": {"dims": [1, 4, 8]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "relu.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

struct Fixture {
  TempDir dir;
  std::string path = dir.file("plans.db");
  Graph g = relu_graph();
  StoreBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
  PlanRecord old_plan, new_plan;

  explicit Fixture(bool rollback = true, bool with_old = true) {
    auto sig = compute_signature(g);
    auto store = PlanStore::open(path);
    EXPECT_TRUE(store.is_ok());
    old_plan = store_test::make_record(1);
    old_plan.structure_sig = sig->structure;
    old_plan.shape_key = sig->shape_key;
    old_plan.engine_id = 5;
    old_plan.knobs = {};
    new_plan = old_plan;
    new_plan.engine_id = 6;
    new_plan.created_at += 100;
    if (with_old) {
      EXPECT_TRUE((*store)->put(old_plan).is_ok());
    }
    EXPECT_TRUE((*store)->put(new_plan).is_ok());
    auto b = std::make_unique<StoreBackend>(path);
    backend = b.get();
    backend->wrong.insert("eng6");
    PlannerOptions o;
    o.new_shapes = NewShapes::kBuildNow;
    o.rollback_on_first_use_failure = rollback;
    planner = Planner::create_with_backend(std::move(b), o);
  }
  std::string active() {
    auto store = PlanStore::open(path);
    auto r = (*store)->read(old_plan.structure_sig, old_plan.shape_key, old_plan.fingerprint_key());
    return r.is_ok() ? plan_identity(r->engine_id, r->knobs) : "";
  }
};

TEST(FirstUseRollback, AStoredPlanThatFailsRollsTheStoreBackAndThePreviousPlanServes) {
  Fixture f;
  auto r = f.planner->obtain(f.g);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->source, PlanSource::kStore);
  EXPECT_EQ(r->plan->identity(), "eng5");
  EXPECT_NE(r->why.find("its plan eng6 failed first-use verification; the store was rolled back to eng5"),
            std::string::npos)
      << r->why;
  EXPECT_EQ(f.active(), "eng5");
  auto store = PlanStore::open(f.path);
  auto rejected =
      (*store)->rollout_entry({f.new_plan.structure_sig, f.new_plan.shape_key, f.new_plan.fingerprint_key()}, "eng6");
  ASSERT_TRUE(rejected.is_ok()) << rejected.status().to_string();
  EXPECT_EQ(rejected->state, PlanState::kRejected);
  EXPECT_NE(rejected->reason.find("Incorrect max_abs=9.0e+00 (injected)"), std::string::npos) << rejected->reason;
  EXPECT_EQ(f.planner->stats().first_use_rollbacks, 1);
  EXPECT_NE(f.planner->stats().text().find("1 stored plan rolled back"), std::string::npos);
}

TEST(FirstUseRollback, OffTheRefusalStandsAndTheStoreIsUntouched) {
  Fixture f(/*rollback=*/false);
  auto r = f.planner->obtain(f.g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCheckFailed);
  EXPECT_EQ(f.active(), "eng6");
  EXPECT_EQ(f.planner->stats().first_use_rollbacks, 0);
}

TEST(FirstUseRollback, WithoutAPreviousPlanOrAWritableStoreTheRefusalStands) {
  Fixture none(/*rollback=*/true, /*with_old=*/false);
  auto r = none.planner->obtain(none.g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCheckFailed);
  EXPECT_EQ(none.active(), "eng6");

  Fixture ro;
  ro.backend->writable = false;
  auto r2 = ro.planner->obtain(ro.g);
  ASSERT_FALSE(r2.is_ok());
  EXPECT_EQ(ro.active(), "eng6");
}

TEST(FirstUseRollback, ARestoredPlanThatFailsTooIsRefused) {
  Fixture f;
  f.backend->wrong.insert("eng5");
  auto r = f.planner->obtain(f.g);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCheckFailed);
  EXPECT_EQ(f.active(), "eng5");  // rolled back once; the old plan is refused here too, and not rolled back further
}

}  // namespace
}  // namespace kiln
