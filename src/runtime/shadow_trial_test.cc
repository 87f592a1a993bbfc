// Host tier: shadow sampling in the Planner (runtime/shadow_trial.h, docs/rollout.md "Shadow sampling"). A backend
// over a real SQLite store whose plans compute y = relu(x) on host memory (or, for the injected candidates, something
// else), and a lane of host memory whose clock the plans advance by the time each is said to take.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "kiln/core/engine_config.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/shadow_lane.h"
#include "kiln/spec/spec.h"
#include "kiln/store/plan_store.h"
#include "runtime/shadow_trial.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::TempDir;

constexpr int kN = 32;  // relu over [1, 4, 8] fp32

// What a configuration computes, and how long it is said to take (the lane's clock).
struct Behaviour {
  double ms = 1.0;
  // y[i] from x[i] on the k-th run of this configuration (k from 0).
  std::function<float(float x, int64_t k, int i)> f = [](float x, int64_t, int) { return x > 0 ? x : 0.0f; };
  bool fail_launch = false;
  int fail_first_launches = 0;  // the first N launches fail, the rest run
};

struct Clock {
  std::atomic<int64_t> us{0};
};

class RunExecutor : public PlanExecutor {
 public:
  // The clock is shared: a plan may outlive its Planner and backend (APlanOutlivingItsPlanner...; ASan found the
  // test's own executor touching a freed backend's clock).
  RunExecutor(Behaviour b, std::shared_ptr<Clock> clock, int x, int y)
      : b_(std::move(b)), clock_(std::move(clock)), x_(x), y_(y) {}
  Status run(cudaStream_t, const std::map<int, void*>& p, void*) const override {
    if (b_.fail_launch || launches_.fetch_add(1) < b_.fail_first_launches)
      return internal_error("launch failed (injected)");
    const int64_t k = runs_.fetch_add(1);
    const float* x = static_cast<const float*>(p.at(x_));
    float* y = static_cast<float*>(p.at(y_));
    float tmp[kN];
    for (int i = 0; i < kN; ++i) tmp[i] = b_.f(x[i], k, i);
    std::memcpy(y, tmp, sizeof(tmp));
    clock_->us += static_cast<int64_t>(b_.ms * 1000);
    return Status::ok();
  }

 private:
  Behaviour b_;
  std::shared_ptr<Clock> clock_;
  int x_, y_;
  mutable std::atomic<int64_t> runs_{0}, launches_{0};
};

// How often lanes held their side stream and let it go (every hold must be released).
struct Holds {
  std::atomic<int> held{0}, released{0};
};

class HostLane : public ShadowLane {
 public:
  HostLane(size_t dev, size_t host, std::shared_ptr<Clock> clock, bool capturing, std::shared_ptr<Holds> holds)
      : dev_(dev + 16), host_(host + 16), clock_(std::move(clock)), capturing_(capturing), holds_(std::move(holds)) {}
  char* device() override { return dev_.data(); }
  char* host() override { return host_.data(); }
  cudaStream_t side() override { return reinterpret_cast<cudaStream_t>(0x5); }
  bool capturing(cudaStream_t) override { return capturing_; }
  Status mark(int i, cudaStream_t) override {
    marks_[i] = clock_->us.load();
    return Status::ok();
  }
  Status fork(cudaStream_t) override { return Status::ok(); }
  Status hold() override {
    ++holds_->held;
    return Status::ok();
  }
  void release() override { ++holds_->released; }
  Status copy(void* dst, const void* src, size_t bytes, cudaStream_t) override {
    std::memmove(dst, src, bytes);
    return Status::ok();
  }
  Status wait() override { return Status::ok(); }
  StatusOr<double> elapsed_ms(int from, int to) override { return (marks_[to] - marks_[from]) / 1000.0; }

 private:
  std::vector<char> dev_, host_;
  std::shared_ptr<Clock> clock_;
  bool capturing_;
  std::shared_ptr<Holds> holds_;
  int64_t marks_[kShadowMarks] = {};
};

class ShadowBackend : public PlanBackend {
 public:
  explicit ShadowBackend(std::string path) : path_(std::move(path)) {}
  std::map<int, Behaviour> behaviours;  // by engine id
  std::shared_ptr<Clock> clock = std::make_shared<Clock>();
  bool capturing = false;
  std::atomic<int> lanes{0};
  std::shared_ptr<Holds> holds = std::make_shared<Holds>();

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
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan&) override {
    return FirstUseVerdict{true, false, "fake"};
  }
  StatusOr<EnvFingerprint> environment() const override { return h200(); }
  Status with_writable_store(const std::function<Status(PlanStore&)>& fn) override {
    KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(path_));
    return fn(*store);
  }
  StatusOr<std::optional<PlanRecord>> shadow_record(const GraphSignature& sig) override {
    KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(path_));
    ListFilter f;
    f.structure_prefix = sig.structure;
    f.shape_key = sig.shape_key;
    f.fingerprint_key = fingerprint_key(h200());
    KILN_ASSIGN_OR_RETURN(std::vector<RolloutEntry> entries, store->rollout_entries(f));
    for (const RolloutEntry& e : entries)
      if (e.state == PlanState::kShadow) return std::optional<PlanRecord>(e.record);
    return std::optional<PlanRecord>();
  }
  StatusOr<std::unique_ptr<ShadowLane>> shadow_lane(size_t dev, size_t host) override {
    ++lanes;
    return std::unique_ptr<ShadowLane>(new HostLane(dev, host, clock, capturing, holds));
  }

 private:
  std::shared_ptr<const ExecutablePlan> make(const Graph& g, const GraphSignature& sig, EngineConfig c, PlanSource s) {
    const Behaviour b = behaviours.count(c.engine_id) ? behaviours.at(c.engine_id) : Behaviour{};
    auto exec = std::make_unique<RunExecutor>(b, clock, g.find_tensor("x"), g.find_tensor("y"));
    return std::make_shared<ExecutablePlan>(g, sig, std::move(c), 0, s, std::move(exec));
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

// A store whose key has eng5 active and eng6 in shadow; a Planner over it sampling every request.
struct Fixture {
  TempDir dir;
  std::string path = dir.file("plans.db");
  Graph g = relu_graph();
  ShadowBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
  StoredPlanKey key;

  explicit Fixture(Behaviour active, Behaviour shadow, ShadowSampling sampling = small_rule(), bool capturing = false) {
    auto sig = compute_signature(g);
    auto store = PlanStore::open(path);
    EXPECT_TRUE(store.is_ok());
    PlanRecord old_plan = store_test::make_record(1);
    old_plan.structure_sig = sig->structure;
    old_plan.shape_key = sig->shape_key;
    old_plan.engine_id = 5;
    old_plan.knobs = {};
    PlanRecord candidate = old_plan;
    candidate.engine_id = 6;
    candidate.created_at += 100;
    EXPECT_TRUE((*store)->put(old_plan).is_ok());
    EXPECT_TRUE((*store)->put_candidate(candidate, "tuned (test)").is_ok());
    key = {sig->structure, sig->shape_key, old_plan.fingerprint_key()};
    Status to_shadow = (*store)->transition(key, "eng6", PlanState::kShadow, "shadow policy (test)");
    EXPECT_TRUE(to_shadow.is_ok()) << to_shadow.to_string();
    auto b = std::make_unique<ShadowBackend>(path);
    backend = b.get();
    backend->behaviours[5] = std::move(active);
    backend->behaviours[6] = std::move(shadow);
    backend->capturing = capturing;
    PlannerOptions o;
    o.new_shapes = NewShapes::kBuildNow;
    o.shadow = sampling;
    planner = Planner::create_with_backend(std::move(b), o);
  }
  // A rule that decides within a few hundred samples (the rule's own numbers are shadow_rule_test's).
  static ShadowSampling small_rule() {
    ShadowSampling s;
    s.sample_every = 1;
    s.rule.detect_rate = 0.05;
    s.rule.miss_probability = 1e-3;  // 135 samples
    s.rule.max_samples = 400;
    return s;
  }
  std::string active() {
    auto store = PlanStore::open(path);
    auto r = (*store)->read(key.structure_sig, key.shape_key, key.fingerprint_key);
    return r.is_ok() ? plan_identity(r->engine_id, r->knobs) : "";
  }
  StatusOr<RolloutEntry> entry(const std::string& config) {
    KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(path));
    return store->rollout_entry(key, config);
  }
  // Requests until the trial is decided (the Planner's stats say so) or `max_calls`; every output checked against
  // relu of its input. The calls made.
  int serve_until_decided(int max_calls, int* wrong_outputs) {
    auto plan = planner->obtain(g);
    EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
    if (!plan.is_ok()) return 0;
    alignas(16) float x[kN], y[kN];
    int calls = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (; calls < max_calls && std::chrono::steady_clock::now() < deadline; ++calls) {
      for (int i = 0; i < kN; ++i) x[i] = static_cast<float>((i * 7 + calls) % 11) - 5.0f;
      Status st = plan->plan->execute(nullptr, {{"x", {x, sizeof(x)}}, {"y", {y, sizeof(y)}}});
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      for (int i = 0; i < kN; ++i)
        if (y[i] != std::max(x[i], 0.0f)) ++*wrong_outputs;
      PlannerStats s = planner->stats();
      if (s.shadow_promotions + s.shadow_rejections + s.shadow_unrecorded > 0) break;
      if (calls % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the judge run
    }
    return calls;
  }
};

Behaviour takes(double ms) {
  Behaviour b;
  b.ms = ms;
  return b;
}

TEST(ShadowSampling, AFasterAgreeingPlanIsPromotedInTheStoreAndServesNext) {
  Fixture f(takes(1.0), takes(0.8));
  auto first = f.planner->obtain(f.g);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->plan->identity(), "eng5");  // the caller's plan is the active one
  EXPECT_NE(first->why.find("shadow: plan eng6 runs beside it on 1 in 1 requests"), std::string::npos) << first->why;
  int wrong = 0;
  f.serve_until_decided(20000, &wrong);
  EXPECT_EQ(wrong, 0);
  PlannerStats s = f.planner->stats();
  EXPECT_EQ(s.shadow_promotions, 1) << s.text();
  EXPECT_EQ(s.shadow_rejections, 0);
  EXPECT_GE(s.shadow_samples, 135);
  EXPECT_EQ(s.shadow_disagreements, 0);
  EXPECT_EQ(f.active(), "eng6");
  auto old = f.entry("eng5");
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_EQ(old->state, PlanState::kRetired);
  auto store = PlanStore::open(f.path);
  auto history = (*store)->plan_history(f.key);
  ASSERT_TRUE(history.is_ok());
  ASSERT_FALSE(history->empty());
  const PlanTransition& last = history->back();
  EXPECT_EQ(last.config, "eng6");
  EXPECT_EQ(last.from_state, "shadow");
  EXPECT_EQ(last.to_state, "active");
  EXPECT_EQ(last.reason.rfind("shadow: promote: ", 0), 0u) << last.reason;
  EXPECT_NE(last.evidence.find("\"n\""), std::string::npos) << last.evidence;
  // The structure's plans were dropped: the next obtain reads the store and serves the promoted plan alone.
  auto next = f.planner->obtain(f.g);
  ASSERT_TRUE(next.is_ok());
  EXPECT_EQ(next->plan->identity(), "eng6");
  EXPECT_EQ(next->source, PlanSource::kStore);
  EXPECT_EQ(next->why.find("shadow:"), std::string::npos) << next->why;
  EXPECT_NE(s.text().find("shadow: 1 in trial"), std::string::npos) << s.text();
  // Every sample held the side stream while both plans were enqueued, and let it go.
  EXPECT_GE(f.backend->holds->held.load(), s.shadow_samples);
  EXPECT_EQ(f.backend->holds->held.load(), f.backend->holds->released.load());
}

// Injected wrong candidates (docs/rollout.md "Fault injection"): none may become active, whatever its speed, and no
// caller ever sees its output.
struct Injected {
  const char* name;
  std::function<float(float, int64_t, int)> f;
};

TEST(ShadowSampling, InjectedWrongCandidatesAreRejectedAndNeverServe) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Injected cases[] = {
      {"scaled", [](float x, int64_t, int) { return 1.5f * std::max(x, 0.0f); }},
      {"one element wrong", [](float x, int64_t, int i) { return i == 17 ? 3.0f : std::max(x, 0.0f); }},
      {"NaN on one run in 50", [=](float x, int64_t k, int) { return k % 50 == 49 ? nan : std::max(x, 0.0f); }},
      {"wrong on one run in 100",
       [](float x, int64_t k, int i) { return k % 100 == 99 && i == 3 ? -1.0f : std::max(x, 0.0f); }},
  };
  int rejected = 0;
  for (const Injected& c : cases) {
    SCOPED_TRACE(c.name);
    Behaviour bad = takes(0.5);  // much faster: only its numerics can reject it
    bad.f = c.f;
    ShadowSampling sampling;  // the default rule (1375 agreeing samples before any promotion)
    sampling.sample_every = 1;
    Fixture f(takes(1.0), bad, sampling);
    int wrong = 0;
    f.serve_until_decided(200000, &wrong);
    EXPECT_EQ(wrong, 0);
    PlannerStats s = f.planner->stats();
    EXPECT_EQ(s.shadow_promotions, 0) << s.text();
    EXPECT_EQ(s.shadow_rejections, 1) << s.text();
    EXPECT_EQ(f.active(), "eng5");
    auto e = f.entry("eng6");
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    EXPECT_EQ(e->state, PlanState::kRejected);
    EXPECT_NE(e->reason.find("disagreed"), std::string::npos) << e->reason;
    rejected += e->state == PlanState::kRejected;
  }
  EXPECT_EQ(rejected, 4);
}

TEST(ShadowSampling, ASlowerAgreeingPlanIsRejectedAsSlower) {
  Fixture f(takes(1.0), takes(1.3));
  int wrong = 0;
  f.serve_until_decided(20000, &wrong);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(f.planner->stats().shadow_rejections, 1);
  EXPECT_EQ(f.active(), "eng5");
  auto e = f.entry("eng6");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->state, PlanState::kRejected);
  EXPECT_NE(e->reason.find("slower"), std::string::npos) << e->reason;
}

TEST(ShadowSampling, AShadowPlanThatFailsToLaunchIsRejectedAndTheCallerIsServed) {
  Behaviour broken = takes(0.5);
  broken.fail_launch = true;
  Fixture f(takes(1.0), broken);
  int wrong = 0;
  f.serve_until_decided(20000, &wrong);  // it stops at the verdict; 2000 calls ended before it on a loaded CI host
  EXPECT_EQ(wrong, 0);
  auto e = f.entry("eng6");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->state, PlanState::kRejected);
  EXPECT_NE(e->reason.find("failed to run 3 times in a row: launch failed (injected)"), std::string::npos) << e->reason;
  EXPECT_GE(f.backend->holds->held.load(), 3);
  EXPECT_EQ(f.backend->holds->held.load(), f.backend->holds->released.load());  // released after a failed launch too
}

TEST(ShadowSampling, ALaunchThatFailsOnceIsADroppedSampleNotARejection) {
  Behaviour flaky = takes(0.8);
  flaky.fail_first_launches = 2;  // out of memory for a moment, say
  Fixture f(takes(1.0), flaky);
  int wrong = 0;
  f.serve_until_decided(20000, &wrong);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(f.planner->stats().shadow_promotions, 1) << f.planner->stats().text();
  EXPECT_EQ(f.active(), "eng6");
}

TEST(ShadowSampling, AnOutputBoundOverItsInputStillGivesTheShadowTheOriginalInputs) {
  Fixture f(takes(1.0), takes(0.8));
  auto plan = f.planner->obtain(f.g);
  ASSERT_TRUE(plan.is_ok());
  alignas(16) float xy[kN];
  for (int calls = 0; calls < 20000; ++calls) {
    float want[kN];
    for (int i = 0; i < kN; ++i) {
      xy[i] = static_cast<float>((i * 3 + calls) % 9) - 4.0f;
      want[i] = std::max(xy[i], 0.0f);
    }
    ASSERT_TRUE(plan->plan->execute(nullptr, {{"x", {xy, sizeof(xy)}}, {"y", {xy, sizeof(xy)}}}).is_ok());
    ASSERT_EQ(std::memcmp(xy, want, sizeof(xy)), 0);
    PlannerStats s = f.planner->stats();
    if (s.shadow_promotions + s.shadow_rejections > 0) break;
    if (calls % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  PlannerStats s = f.planner->stats();
  EXPECT_EQ(s.shadow_disagreements, 0) << s.text();  // had the shadow read relu's output as its input, it would agree
                                                     // too (relu is idempotent): the promotion below says more
  EXPECT_EQ(s.shadow_promotions, 1) << s.text();
}

TEST(ShadowSampling, OffOrUnderCaptureNothingIsSampled) {
  ShadowSampling off = Fixture::small_rule();
  off.sample_every = 0;
  Fixture none(takes(1.0), takes(0.8), off);
  auto p = none.planner->obtain(none.g);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->why.find("shadow"), std::string::npos) << p->why;
  EXPECT_EQ(none.backend->lanes.load(), 0);

  Fixture captured(takes(1.0), takes(0.8), Fixture::small_rule(), /*capturing=*/true);
  int wrong = 0;
  EXPECT_EQ(captured.serve_until_decided(500, &wrong), 500);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(captured.planner->stats().shadow_samples, 0);
  EXPECT_EQ(captured.entry("eng6")->state, PlanState::kShadow);
}

TEST(ShadowSampling, OneRequestInSampleEveryIsSampledAtMost) {
  ShadowSampling every = Fixture::small_rule();
  every.sample_every = 10;
  Fixture f(takes(1.0), takes(0.8), every);
  auto p = f.planner->obtain(f.g);
  ASSERT_TRUE(p.is_ok());
  alignas(16) float x[kN] = {}, y[kN];
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(p->plan->execute(nullptr, {{"x", {x, sizeof(x)}}, {"y", {y, sizeof(y)}}}).is_ok());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const PlannerStats s = f.planner->stats();
  f.planner.reset();  // the judge stops; samples not yet judged are dropped
  EXPECT_GE(s.shadow_samples, 1) << s.text();
  EXPECT_LE(s.shadow_samples, 100) << s.text();
  EXPECT_EQ(f.entry("eng6")->state, PlanState::kShadow);  // 100 samples at most: below the rule's 135
}

TEST(ShadowSampling, AVerdictAnotherHostRecordedFirstEndsTheTrialWithoutOverwritingIt) {
  Fixture f(takes(1.0), takes(0.8));
  auto p = f.planner->obtain(f.g);
  ASSERT_TRUE(p.is_ok());
  {
    auto store = PlanStore::open(f.path);
    ASSERT_TRUE((*store)->transition(f.key, "eng6", PlanState::kRejected, "rejected by ops (test)").is_ok());
  }
  int wrong = 0;
  f.serve_until_decided(20000, &wrong);
  EXPECT_EQ(wrong, 0);
  PlannerStats s = f.planner->stats();
  EXPECT_EQ(s.shadow_unrecorded, 1) << s.text();
  EXPECT_EQ(f.active(), "eng5");
  EXPECT_EQ(f.entry("eng6")->reason, "rejected by ops (test)");
}

TEST(ShadowSampling, APlanOutlivingItsPlannerServesTheActivePlanAlone) {
  Fixture f(takes(1.0), takes(0.8));
  auto p = f.planner->obtain(f.g);
  ASSERT_TRUE(p.is_ok());
  std::shared_ptr<const ExecutablePlan> kept = p->plan;
  f.planner.reset();
  alignas(16) float x[kN], y[kN];
  for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(i) - 16.0f;
  for (int k = 0; k < 50; ++k) {
    ASSERT_TRUE(kept->execute(nullptr, {{"x", {x, sizeof(x)}}, {"y", {y, sizeof(y)}}}).is_ok());
    for (int i = 0; i < kN; ++i) ASSERT_EQ(y[i], std::max(x[i], 0.0f));
  }
  EXPECT_EQ(f.entry("eng6")->state, PlanState::kShadow);
}

TEST(ShadowSampling, StopgapsRunTheActivePlanUnwrapped) {
  Fixture f(takes(1.0), takes(0.8));
  auto p = f.planner->obtain(f.g);
  ASSERT_TRUE(p.is_ok());
  std::shared_ptr<const ExecutablePlan> inner = runtime_detail::without_shadow(p->plan);
  ASSERT_TRUE(inner);
  EXPECT_NE(inner.get(), p->plan.get());  // the trial's active plan, not the plan that samples
  EXPECT_EQ(inner->identity(), "eng5");
  EXPECT_EQ(runtime_detail::without_shadow(inner).get(), inner.get());  // a plain plan is itself
  alignas(16) float x[kN] = {}, y[kN];
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(inner->execute(nullptr, {{"x", {x, sizeof(x)}}, {"y", {y, sizeof(y)}}}).is_ok());
  EXPECT_EQ(f.planner->stats().shadow_samples, 0);  // what a padded or split stopgap runs is never sampled
}

TEST(ShadowSampling, ABadRuleOrSampleRateIsRefusedAtCreate) {
  PlannerOptions o;
  o.shadow.sample_every = -1;
  auto p = Planner::create(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("shadow.sample_every"), std::string::npos);
  PlannerOptions r;
  r.shadow.rule.detect_rate = 0;
  auto q = Planner::create(r);
  ASSERT_FALSE(q.is_ok());
  EXPECT_NE(q.status().message().find("shadow.rule"), std::string::npos) << q.status().to_string();
}

}  // namespace
}  // namespace kiln
