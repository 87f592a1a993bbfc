// Device tier: shadow sampling with cuDNN's backend (runtime/shadow_trial.h, docs/rollout.md "Shadow sampling"). A
// store holds a tuned winner (active) and the runner-up in shadow (tuned again without the winner, stored as `kiln tune
// --rollout shadow` stores it); a serving Planner samples every request. The runner-up, right, is promoted or
// rejected for its speed, never for its numerics; corrupted after it runs (a few output elements overwritten, the
// deliberately wrong candidate), it is rejected. Every caller output is checked against the device reference.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "gpu_test_util.h"
#include "runtime/corrupting_executor_test_util.h"
#include "kiln/core/engine_config.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/workshop.h"
#include "kiln/spec/spec.h"
#include "kiln/store/plan_store.h"
#include "kiln/validate/device_check.h"

namespace kiln {
namespace {

const char* kShadowSpec = R"({
  "name": "shadow_mm_bias_relu", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
  "tensors": {"a": {"dims": [1, 512, 1024]}, "w": {"dims": [1, 1024, 1024]}, "bias": {"dims": [1, 1, 1024]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["c"]},
            {"name": "bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["b"]},
            {"name": "relu", "op": "relu", "inputs": ["b"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

struct ShadowStore {
  std::string path;
  std::string winner, runner_up;
  StoredPlanKey key;
};

// The winner stored active, then the runner-up (the tune again without the winner) in shadow.
void make_shadow_store(const Graph& g, ShadowStore* s) {
  const std::string dir = ::testing::TempDir() + "/kiln_shadow_" + std::to_string(::getpid()) + "_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  s->path = dir + "/plans.db";
  PlannerOptions o = PlannerOptions::offline(s->path);
  auto planner = Planner::create(o);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  TuneJob job;
  job.tune.top_k = 6;
  job.tune.measure.stopping.time_budget_ms = 50;
  job.unfused = false;
  auto first = (*planner)->workshop().tune(g, job);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_TRUE(first->kept.has_value());
  s->winner = plan_identity(first->kept->record.engine_id, first->kept->record.knobs);
  // The plan put in shadow: the slowest configuration that passed, where it is clearly slower than the winner (the
  // promotion test turns the pair round and needs a speed-up the rule can see); else the runner-up.
  job.tune.exclude = {s->winner};
  const CandidateResult* slow = nullptr;
  double best = 0;
  for (const CandidateResult& c : first->result.candidates) {
    if (c.disposition != Disposition::kPassed || c.samples == 0) continue;
    if (c.config.identity() == s->winner) best = c.median_ms;
    else if (slow == nullptr || c.median_ms > slow->median_ms) slow = &c;
  }
  if (slow != nullptr && best > 0 && slow->median_ms >= 1.15 * best) {
    // An identity without knobs ("eng7") excludes its whole engine: never the slow plan's own.
    for (const CandidateResult& c : first->result.candidates)
      if (&c != slow && !(c.config.knobs.empty() && c.config.engine_id == slow->config.engine_id))
        job.tune.exclude.push_back(c.config.identity());
    std::printf("[ shadow ] tuned: %s %.4f ms, the slowest that passed %s %.4f ms (%.2fx)\n", s->winner.c_str(), best,
                slow->config.identity().c_str(), slow->median_ms, slow->median_ms / best);
  }
  job.rollout = RolloutPolicy::kShadow;
  auto second = (*planner)->workshop().tune(g, job);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  ASSERT_TRUE(second->kept.has_value()) << "no second configuration passed";
  ASSERT_EQ(second->kept->state, PlanState::kShadow);
  s->runner_up = plan_identity(second->kept->record.engine_id, second->kept->record.knobs);
  s->key = {first->kept->record.structure_sig, first->kept->record.shape_key, first->kept->record.fingerprint_key()};
  std::printf("[ shadow ] active %s, in shadow %s\n", s->winner.c_str(), s->runner_up.c_str());
}

// cuDNN's backend, except that plans built with configuration `corrupt` come back corrupted.
class CorruptingBackend : public PlanBackend {
 public:
  CorruptingBackend(std::unique_ptr<PlanBackend> real, std::string corrupt)
      : real_(std::move(real)), corrupt_(std::move(corrupt)) {}
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
    if (!config || config->identity() != corrupt_) return plan;
    return std::shared_ptr<const ExecutablePlan>(
        std::make_shared<ExecutablePlan>(g, sig, plan->config(), plan->workspace_bytes(), source,
                                         std::make_unique<test::CorruptingExecutor>(plan, g.find_tensor("y"))));
  }
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    return real_->verify_first_use(plan);
  }
  StatusOr<EnvFingerprint> environment() const override { return real_->environment(); }
  Status with_writable_store(const std::function<Status(PlanStore&)>& fn) override {
    return real_->with_writable_store(fn);
  }
  StatusOr<std::optional<PlanRecord>> shadow_record(const GraphSignature& sig) override {
    return real_->shadow_record(sig);
  }

 private:
  std::unique_ptr<PlanBackend> real_;
  std::string corrupt_;
};

// Serves requests on one set of caller buffers until the Planner's trial is decided (or 60 s); every 200th request's
// output (and the last) checked against the device reference. The requests served.
int serve_until_decided(Planner& planner, const Graph& g) {
  auto got = planner.obtain(g);
  EXPECT_TRUE(got.is_ok()) << got.status().to_string();
  if (!got.is_ok()) return 0;
  const ExecutablePlan& plan = *got->plan;
  EXPECT_NE(got->why.find("shadow: plan"), std::string::npos) << got->why;
  std::map<std::string, DeviceBuffer> owned;
  TensorBindings bindings;
  std::map<int, void*> inputs, outputs;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    auto bytes = plan.tensor_bytes(g.tensors[i].name);
    if (!bytes.is_ok()) continue;
    auto buf = DeviceBuffer::allocate(*bytes);
    EXPECT_TRUE(buf.is_ok());
    bindings[g.tensors[i].name] = TensorBinding{buf->data(), *bytes};
    (g.is_graph_output(static_cast<int>(i)) ? outputs : inputs)[static_cast<int>(i)] = buf->data();
    owned.emplace(g.tensors[i].name, std::move(buf).value());
  }
  EXPECT_TRUE(generate_inputs_on_device(g, 7, inputs).is_ok());
  auto ref = device_reference_on_device(g, inputs);
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  auto checker = DeviceChecker::create(g, CheckOptions{});
  EXPECT_TRUE(checker.is_ok());
  auto ws = DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes(), 16)));
  auto stream = make_stream();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!ref.is_ok() || !checker.is_ok() || !ws.is_ok() || !stream.is_ok()) return 0;
  int calls = 0, checked = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (; std::chrono::steady_clock::now() < deadline; ++calls) {
    Status st = plan.execute(stream->get(), bindings, ws->data());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
    const PlannerStats s = planner.stats();
    const bool decided = s.shadow_promotions + s.shadow_rejections + s.shadow_unrecorded > 0;
    if (calls % 200 == 0 || decided) {
      EXPECT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
      auto rep = checker->check(outputs, *ref);
      EXPECT_TRUE(rep.is_ok());
      if (rep.is_ok()) {
        EXPECT_EQ(rep->verdict, Disposition::kPassed) << "request " << calls << ": " << rep->summary();
      }
      ++checked;
    }
    if (decided) break;
  }
  EXPECT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  std::printf("[ shadow ] %d requests, %d outputs checked; %s\n", calls + 1, checked, planner.stats().text().c_str());
  return calls + 1;
}

PlannerOptions sampling_every_request(const std::string& store) {
  PlannerOptions o = PlannerOptions::serving(store);
  o.shadow.sample_every = 1;
  o.shadow.rule.max_samples = 2000;  // a tie is rejected as "not faster" after 2000 samples, within the minute
  return o;
}

TEST(ShadowGpu, TheRunnerUpIsJudgedOnRealRequestsByItsSpeedNeverItsNumerics) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kShadowSpec, "shadow.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ShadowStore s;
  ASSERT_NO_FATAL_FAILURE(make_shadow_store(*g, &s));
  auto planner = Planner::create(sampling_every_request(s.path));
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  serve_until_decided(**planner, *g);
  const PlannerStats st = (*planner)->stats();
  EXPECT_EQ(st.shadow_disagreements, 0) << st.text();
  ASSERT_EQ(st.shadow_promotions + st.shadow_rejections, 1) << st.text();
  auto store = PlanStore::open(s.path);
  ASSERT_TRUE(store.is_ok());
  auto history = (*store)->plan_history(s.key);
  ASSERT_TRUE(history.is_ok() && !history->empty());
  const PlanTransition& last = history->back();
  std::printf("[ shadow ] %s: %s -> %s: %s\n", last.config.c_str(), last.from_state.c_str(), last.to_state.c_str(),
              last.reason.c_str());
  EXPECT_EQ(last.config, s.runner_up);
  EXPECT_EQ(last.from_state, "shadow");
  EXPECT_EQ(last.reason.find("disagreed"), std::string::npos) << last.reason;
  auto active = (*store)->read(s.key.structure_sig, s.key.shape_key, s.key.fingerprint_key);
  ASSERT_TRUE(active.is_ok());
  const std::string now = plan_identity(active->engine_id, active->knobs);
  EXPECT_EQ(now, st.shadow_promotions ? s.runner_up : s.winner);
  // The verdict dropped the structure's plans: the next obtain serves the store's active plan alone.
  auto next = (*planner)->obtain(*g);
  ASSERT_TRUE(next.is_ok()) << next.status().to_string();
  EXPECT_EQ(next->plan->identity(), now);
  EXPECT_EQ(next->why.find("shadow:"), std::string::npos) << next->why;
}

TEST(ShadowGpu, ACorruptedCandidateIsRejectedAndNoCallerSeesItsOutput) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kShadowSpec, "shadow.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ShadowStore s;
  ASSERT_NO_FATAL_FAILURE(make_shadow_store(*g, &s));
  const PlannerOptions o = sampling_every_request(s.path);
  auto real = make_cudnn_plan_backend(o);
  ASSERT_TRUE(real.is_ok()) << real.status().to_string();
  auto planner =
      Planner::create_with_backend(std::make_unique<CorruptingBackend>(std::move(real).value(), s.runner_up), o);
  serve_until_decided(*planner, *g);
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.shadow_promotions, 0) << st.text();
  EXPECT_EQ(st.shadow_rejections, 1) << st.text();
  auto store = PlanStore::open(s.path);
  ASSERT_TRUE(store.is_ok());
  auto active = (*store)->read(s.key.structure_sig, s.key.shape_key, s.key.fingerprint_key);
  ASSERT_TRUE(active.is_ok());
  EXPECT_EQ(plan_identity(active->engine_id, active->knobs), s.winner);
  auto rejected = (*store)->rollout_entry(s.key, s.runner_up);
  ASSERT_TRUE(rejected.is_ok()) << rejected.status().to_string();
  EXPECT_EQ(rejected->state, PlanState::kRejected);
  EXPECT_NE(rejected->reason.find("disagreed"), std::string::npos) << rejected->reason;
  std::printf("[ shadow ] injected: %s\n", rejected->reason.c_str());
}

// The store turned round: the runner-up made active, the winner back in shadow (a candidate again, then shadow), so
// that the plan in shadow is the faster one.
void swap_for_promotion(ShadowStore* s) {
  auto store = PlanStore::open(s->path);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  ASSERT_TRUE(
      (*store)->transition(s->key, s->runner_up, PlanState::kActive, "test: the runner-up made active").is_ok());
  auto winner = (*store)->rollout_entry(s->key, s->winner);
  ASSERT_TRUE(winner.is_ok()) << winner.status().to_string();
  ASSERT_EQ(winner->state, PlanState::kRetired);
  ASSERT_TRUE((*store)->put_candidate(winner->record, "test: the winner again").is_ok());
  ASSERT_TRUE((*store)->transition(s->key, s->winner, PlanState::kShadow, "test: in shadow").is_ok());
  std::swap(s->winner, s->runner_up);  // now: winner = the active plan, runner_up = the one in shadow
}

TEST(ShadowGpu, TheFasterPlanInShadowIsPromotedForEveryPlannerAndServesNext) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_string(kShadowSpec, "shadow.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ShadowStore s;
  ASSERT_NO_FATAL_FAILURE(make_shadow_store(*g, &s));
  ASSERT_NO_FATAL_FAILURE(swap_for_promotion(&s));
  std::printf("[ shadow ] turned round: active %s, in shadow %s\n", s.winner.c_str(), s.runner_up.c_str());
  auto planner = Planner::create(sampling_every_request(s.path));
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  serve_until_decided(**planner, *g);
  const PlannerStats st = (*planner)->stats();
  EXPECT_EQ(st.shadow_disagreements, 0) << st.text();
  EXPECT_EQ(st.shadow_promotions, 1) << st.text();
  auto store = PlanStore::open(s.path);
  ASSERT_TRUE(store.is_ok());
  auto history = (*store)->plan_history(s.key);
  ASSERT_TRUE(history.is_ok() && !history->empty());
  std::printf("[ shadow ] %s: %s -> %s: %s\n", history->back().config.c_str(), history->back().from_state.c_str(),
              history->back().to_state.c_str(), history->back().reason.c_str());
  auto active = (*store)->read(s.key.structure_sig, s.key.shape_key, s.key.fingerprint_key);
  ASSERT_TRUE(active.is_ok());
  EXPECT_EQ(plan_identity(active->engine_id, active->knobs), s.runner_up);
  // This Planner serves it next; so does a new one (another host sharing the store).
  auto next = (*planner)->obtain(*g);
  ASSERT_TRUE(next.is_ok()) << next.status().to_string();
  EXPECT_EQ(next->plan->identity(), s.runner_up);
  auto other = Planner::create(PlannerOptions::serving(s.path));
  ASSERT_TRUE(other.is_ok());
  auto theirs = (*other)->obtain(*g);
  ASSERT_TRUE(theirs.is_ok()) << theirs.status().to_string();
  EXPECT_EQ(theirs->plan->identity(), s.runner_up);
  EXPECT_EQ(theirs->why.find("shadow:"), std::string::npos) << theirs->why;
  // And a rollback (another store connection: `kiln plans rollback` in another process) brings the old plan back: in
  // this running Planner once its watcher reads the store's history (PlannerOptions::store_watch_s), and for the next.
  auto back = (*store)->rollback(s.key, "test: rolled back");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  std::string serving;
  for (int i = 0; i < 100 && serving != s.winner; ++i) {
    auto now = (*planner)->obtain(*g);
    ASSERT_TRUE(now.is_ok()) << now.status().to_string();
    serving = now->plan->identity();
    if (serving != s.winner) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(serving, s.winner) << "the running Planner did not hear of the rollback within 5 s";
  std::printf("[ shadow ] rolled back: the running Planner serves %s again\n", serving.c_str());
  auto third = Planner::create(PlannerOptions::serving(s.path));
  ASSERT_TRUE(third.is_ok());
  auto restored = (*third)->obtain(*g);
  ASSERT_TRUE(restored.is_ok());
  EXPECT_EQ(restored->plan->identity(), s.winner);
}

}  // namespace
}  // namespace kiln
