// The fake backend and fixture the Planner's host tests share (planner_test.cc and the source_*_test.cc files):
// a backend that records what it was asked, keeps a fake store, and builds plans whose executors record their
// calls or copy rows.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "runtime/plan_sources.h"
#include "runtime/planner_test_util.h"

namespace kiln::planner_fake {

class RecordingExecutor : public PlanExecutor {
 public:
  explicit RecordingExecutor(std::atomic<int>* runs) : runs_(runs) {}
  Status run(cudaStream_t, const std::map<int, void*>& pointers, void*) const override {
    ++*runs_;
    last_count = pointers.size();
    return Status::ok();
  }
  mutable size_t last_count = 0;

 private:
  std::atomic<int>* runs_;
};

// Computes the token graph on host memory (the fake's "device"): y[r][j] = x[r][j % 128] + r_rows, with
// r_rows the token count it was built for, so a test sees which plan ran and that each row came from its
// own input row. Rows past its shape are never touched.
class RowExecutor : public PlanExecutor {
 public:
  RowExecutor(int64_t rows, int x, int y, std::atomic<int>* runs) : rows_(rows), x_(x), y_(y), runs_(runs) {}
  Status run(cudaStream_t, const std::map<int, void*>& pointers, void*) const override {
    ++*runs_;
    const auto* x = static_cast<const uint16_t*>(pointers.at(x_));
    auto* y = static_cast<uint16_t*>(pointers.at(y_));
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t j = 0; j < 256; ++j) y[r * 256 + j] = static_cast<uint16_t>(x[r * 128 + j % 128] + rows_);
    return Status::ok();
  }

 private:
  int64_t rows_;
  int x_, y_;
  std::atomic<int>* runs_;
};

class FakeBackend : public PlanBackend {
 public:
  bool compute_rows = false;  // plans compute the token graph on host memory (RowExecutor)
  DeviceCopy device_copy() const override {
    return [](void* dst, const void* src, size_t bytes, cudaStream_t) -> Status {
      std::memcpy(dst, src, bytes);
      ++host_copies;
      return Status::ok();
    };
  }
  static inline std::atomic<int> host_copies{0};
  std::atomic<int> warmed{0}, tuned_queries{0}, warmed_padded{0}, concurrency_warms{0};
  std::string last_padded_warmed;  // the shape key of the last padded plan warmed
  bool warm_fails = false;
  Status warm_concurrency() override {
    ++concurrency_warms;
    return Status::ok();
  }
  int warm_delay_ms = 0;  // warm_up() takes this long
  Status warm_up(const ExecutablePlan& plan) override {
    if (warm_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(warm_delay_ms));
    if (warm_fails) return unavailable("out of device memory (injected)");
    if (plan.built_from() == PlanSource::kPadded) {
      ++warmed_padded;
      last_padded_warmed = plan.signature().shape_key;
      return Status::ok();
    }
    ++warmed;
    return Status::ok();
  }
  std::mutex mu;
  std::set<std::string> stored;      // shape keys the "store" has
  std::function<void()> store_hook;  // called as from_store() starts, outside the lock
  std::vector<TunedShape> tuned;     // tuned configurations of the structure
  std::atomic<int> store_calls{0}, builds{0}, heuristic_builds{0}, runs{0};
  std::atomic<int> fail_heuristics{0};  // this many heuristic builds fail, then they succeed
  int build_delay_ms = 0;
  std::set<std::string> bad_configs;  // identities that do not build
  bool dynamic_ok = true;             // dynamic-shape builds succeed
  int dynamic_delay_ms = 0;           // added to a dynamic build
  std::atomic<int> dynamic_builds{0};
  std::atomic<int> tunes{0};
  bool tune_finds_none = false;  // tune(): no correct candidate
  int tune_delay_ms = 0;         // tune(): this long, or until cancelled
  bool tune_not_stored = false;  // tune(): a winner, with a note that it was not stored
  std::atomic<bool> saw_cancel{false};
  StatusOr<std::shared_ptr<const ExecutablePlan>> tune(const Graph& g, const GraphSignature& sig,
                                                       const PromotionTuning& t, const std::atomic<bool>* cancel,
                                                       std::string* why) override {
    ++tunes;
    last_tuning = t;
    for (int waited = 0; waited < tune_delay_ms; waited += 5) {
      if (cancel && *cancel) {
        saw_cancel = true;
        *why = "cancelled (injected)";
        return std::shared_ptr<const ExecutablePlan>();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (tune_finds_none) {
      *why = "no correct candidate of 3 (injected)";
      return std::shared_ptr<const ExecutablePlan>();
    }
    if (tune_not_stored) *why = "tuned eng99, not stored: the store is read-only (injected)";
    return make(g, sig, EngineConfig{99, {}}, PlanSource::kTuned);
  }
  PromotionTuning last_tuning;

  StatusOr<std::shared_ptr<const ExecutablePlan>> from_store(const Graph& g, const GraphSignature& sig,
                                                             std::string* why) override {
    if (store_hook) store_hook();  // e.g. a test holding a load back until another thread has asked
    ++store_calls;
    std::lock_guard<std::mutex> lock(mu);
    if (!stored.count(sig.shape_key)) {
      *why = "miss";
      return std::shared_ptr<const ExecutablePlan>();
    }
    return make(g, sig, EngineConfig{7, {}}, PlanSource::kStore);
  }
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature&) override {
    ++tuned_queries;
    std::lock_guard<std::mutex> lock(mu);
    return tuned;
  }
  // First-use verification: every plan passes, except those whose identity is in wrong_configs (injected).
  std::set<std::string> wrong_configs;
  std::atomic<int> verifications{0};
  StatusOr<FirstUseVerdict> verify_first_use(const ExecutablePlan& plan) override {
    ++verifications;
    if (wrong_configs.count(plan.identity()))
      return FirstUseVerdict{false, true, "y: Incorrect max_abs=1.0e+00 at [0,3] (injected)"};
    return FirstUseVerdict{true, true, "fake plan: nothing to compute"};
  }
  StatusOr<std::shared_ptr<const ExecutablePlan>> build(const Graph& g, const GraphSignature& sig,
                                                        const std::optional<EngineConfig>& config,
                                                        PlanSource source) override {
    if (build_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(build_delay_ms));
    ++builds;
    if (source == PlanSource::kDynamic) {
      if (dynamic_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(dynamic_delay_ms));
      ++dynamic_builds;
      if (!dynamic_ok) return not_supported("no engine supports dynamic shapes for this graph (injected)");
      return make(g, sig, EngineConfig{9, {}}, source);
    }
    if (!config) {
      ++heuristic_builds;
      if (fail_heuristics > 0) {
        --fail_heuristics;
        return unavailable("cuDNN is busy (injected)");
      }
      return make(g, sig, EngineConfig{1, {}}, source);
    }
    if (bad_configs.count(config->identity()))
      return not_supported(config->identity() + " does not support this shape");
    return make(g, sig, *config, source);
  }

  // segments(): this decision for the graph named `segment_graph` (one cuDNN cannot fuse whole), else none.
  std::optional<SegmentDecision> segment_into;
  std::string segment_graph = "mlp";
  std::atomic<int> segment_queries{0};
  StatusOr<SegmentDecision> segments(const Graph& g) override {
    ++segment_queries;
    return segment_into && g.name == segment_graph ? *segment_into : SegmentDecision{};
  }
  // queue_retune(): the misses it was told of, and the note it gives when queue_note is set.
  std::vector<std::string> queued;
  std::string queue_note;
  void queue_retune(const Graph&, const GraphSignature&, const std::string& why_missed, std::string* note) override {
    std::lock_guard<std::mutex> lock(mu);
    queued.push_back(why_missed);
    *note = queue_note;
  }

 private:
  std::shared_ptr<const ExecutablePlan> make(const Graph& g, const GraphSignature& sig, EngineConfig c, PlanSource s) {
    if (compute_rows)
      return std::make_shared<ExecutablePlan>(
          g, sig, std::move(c), 1024, s,
          std::make_unique<RowExecutor>(g.tensors[static_cast<size_t>(g.find_tensor("x"))].dims[1].value,
                                        g.find_tensor("x"), g.find_tensor("y"), &runs));
    return std::make_shared<ExecutablePlan>(g, sig, std::move(c), 1024, s, std::make_unique<RecordingExecutor>(&runs));
  }
};

// A FakeBackend whose store hands out the notices queued in `notices`, once each.
class NoticeBackend : public FakeBackend {
 public:
  std::mutex notices_mu;
  std::vector<StoredPlanKey> notices;
  std::atomic<int> polls{0};
  StatusOr<std::vector<StoredPlanKey>> changed_plans() override {
    ++polls;
    std::lock_guard<std::mutex> lock(notices_mu);
    std::vector<StoredPlanKey> out;
    out.swap(notices);
    return out;
  }
  void notice(const StoredPlanKey& k) {
    std::lock_guard<std::mutex> lock(notices_mu);
    notices.push_back(k);
  }
};

struct Fixture {
  FakeBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
  // Most tests check the static sources: new shapes built on the calling thread unless they ask.
  explicit Fixture(const std::string& buckets = "", NewShapes new_shapes = NewShapes::kBuildNow,
                   PromoteBy promote_by = PromoteBy::kBuild, bool split_overlap = true) {
    auto b = std::make_unique<FakeBackend>();
    backend = b.get();
    PlannerOptions o;
    o.new_shapes = new_shapes;
    o.split_overlap = split_overlap;
    o.promote_by = promote_by;
    o.tuning.top_k = 5;
    auto p = BucketPolicy::parse(buckets);
    EXPECT_TRUE(p.is_ok());
    o.buckets = *p;
    planner = Planner::create_with_backend(std::move(b), o);
  }
};

// One source asked directly: the Planner's shared state over a FakeBackend, and requests for the token graph.
struct SourceFixture {
  FakeBackend* backend = nullptr;
  std::unique_ptr<runtime_detail::PlannerState> state;
  PreparedGraph pg;
  explicit SourceFixture(PlannerOptions o = PlannerOptions::tools()) {
    auto b = std::make_unique<FakeBackend>();
    backend = b.get();
    state = std::make_unique<runtime_detail::PlannerState>(std::move(b), o);
    auto p = runtime_detail::prepare_graph(token_graph());
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (p.is_ok()) pg = *p;
  }
  // A request for `shape` (kept alive by the caller), initialized.
  runtime_detail::SourceRequest request(const std::map<std::string, int64_t>& shape, bool allow_stopgap = true,
                                        bool store_asked = false) {
    runtime_detail::SourceRequest r(*state, pg, shape, allow_stopgap, store_asked);
    Status st = r.init();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return r;
  }
};

}  // namespace kiln::planner_fake
