// kiln::Planner on the host, with a fake backend: the order of sources, single flight, failures not
// cached, shapes at other dynamic values, the binding checks and the recorder (docs/runtime.md).
#include <gtest/gtest.h>

#include <limits>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "runtime/planner_test_util.h"

namespace kiln {
namespace {

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
  Status warm_up(const ExecutablePlan& plan) override {
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
  std::set<std::string> stored;   // shape keys the "store" has
  std::vector<TunedShape> tuned;  // tuned configurations of the structure
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

TEST(Planner, SourcesInOrderMemoryStoreBucketHeuristics) {
  Fixture f("tokens=pow2");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  f.backend->stored.insert("tokens=64");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  // The graph's own shape: in the store.
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kStore);
  // Again: memory, the same plan object.
  auto b = f.planner->obtain(*pg);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan.get(), a->plan.get());
  // 100 tokens: not stored; in the bucket 65-128 of the tuned 128: its configuration, built for 100.
  auto c = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->source, PlanSource::kBucket);
  EXPECT_EQ(c->plan->config().identity(), "eng41_k2=4");
  EXPECT_EQ(c->plan->graph().dynamic_dims.at("tokens"), 100);
  EXPECT_EQ(c->plan->signature().shape_key, "tokens=100");
  EXPECT_NE(c->why.find("tuned for tokens=128"), std::string::npos) << c->why;
  // 1000 tokens: bucket 513-1024 has no tuned shape: heuristics, and why says so.
  auto d = f.planner->obtain(*pg, {{"tokens", 1000}});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->source, PlanSource::kHeuristics);
  EXPECT_NE(d->why.find("bucket tokens=513-1024: no tuned shape"), std::string::npos) << d->why;
  EXPECT_NE(d->why.find("store: miss"), std::string::npos) << d->why;
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kStore)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kMemory)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kBucket)], 1);
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kHeuristics)], 1);
  EXPECT_EQ(st.builds, 3);
  EXPECT_EQ(st.cached, 3);
}

TEST(Planner, ExactBucketsNeverBorrowAnotherShapesConfiguration) {
  Fixture f;  // every dim exact
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto r = f.planner->obtain(*pg, {{"tokens", 127}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
}

TEST(Planner, NearestTunedShapeInTheBucketAndABadConfigFallsToHeuristics) {
  Fixture f("tokens=ranges:1-1000");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned = {TunedShape{"tokens=10", {{"tokens", 10}}, EngineConfig{1, {}}},
                      TunedShape{"tokens=500", {{"tokens", 500}}, EngineConfig{2, {}}},
                      TunedShape{"tokens=900", {{"tokens", 900}}, EngineConfig{3, {}}}};
  auto r = f.planner->obtain(*pg, {{"tokens", 400}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kBucket);
  EXPECT_EQ(r->plan->config().identity(), "eng2");  // |log(400/500)| is the smallest distance
  f.backend->bad_configs.insert("eng3");
  auto s = f.planner->obtain(*pg, {{"tokens", 950}});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->source, PlanSource::kHeuristics);
  EXPECT_NE(s->why.find("eng3 (tuned for tokens=900) does not build here"), std::string::npos) << s->why;
}

TEST(Planner, ConcurrentMissesForOneKeyBuildOnce) {
  Fixture f;
  f.backend->build_delay_ms = 50;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  constexpr int kThreads = 32;
  std::vector<std::thread> threads;
  std::vector<const ExecutablePlan*> got(kThreads, nullptr);
  std::atomic<int> errors{0};
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      // Half the threads ask for 64 tokens, half for 96: two keys, each built once.
      auto r = f.planner->obtain(*pg, {{"tokens", i % 2 ? 96 : 64}});
      if (!r.is_ok()) {
        ++errors;
        return;
      }
      got[static_cast<size_t>(i)] = r->plan.get();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(f.backend->heuristic_builds.load(), 2);
  EXPECT_EQ(f.backend->store_calls.load(), 2);
  for (int i = 2; i < kThreads; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], got[static_cast<size_t>(i % 2)]) << i;
  EXPECT_NE(got[0], got[1]);
  const PlannerStats st = f.planner->stats();
  int64_t total = 0;
  for (int64_t n : st.served) total += n;
  EXPECT_EQ(total, kThreads);
  EXPECT_EQ(st.builds, 2);
}

TEST(Planner, AFailureIsReturnedToEveryWaiterAndNotCached) {
  Fixture f;
  f.backend->fail_heuristics = 1;
  f.backend->build_delay_ms = 30;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      auto r = f.planner->obtain(*pg);
      if (!r.is_ok()) {
        ++failed;
        EXPECT_NE(r.status().message().find("cuDNN is busy (injected)"), std::string::npos) << r.status().to_string();
        EXPECT_NE(r.status().message().find("graph 'mlp'"), std::string::npos) << r.status().to_string();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_GE(failed.load(), 1);
  // The next call builds again (the failure was not cached) and succeeds.
  auto r = f.planner->obtain(*pg);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
  EXPECT_GE(f.planner->stats().failures, 1);
}

// Two graphs of one structure whose tensors are named differently: each gets a plan bound by its own names.
TEST(Planner, SameStructureOtherNamesGetTheirOwnPlan) {
  Fixture f;
  Graph a = token_graph(64), b = token_graph(64);
  b.tensors[static_cast<size_t>(b.find_tensor("x"))].name = "activations";
  auto pa = f.planner->prepare(a), pb = f.planner->prepare(b);
  ASSERT_TRUE(pa.is_ok() && pb.is_ok());
  ASSERT_EQ(pa->signature.structure, pb->signature.structure);
  auto ra = f.planner->obtain(*pa), rb = f.planner->obtain(*pb);
  ASSERT_TRUE(ra.is_ok() && rb.is_ok());
  EXPECT_NE(ra->plan.get(), rb->plan.get());
  EXPECT_TRUE(rb->plan->tensor_bytes("activations").is_ok());
  EXPECT_FALSE(rb->plan->tensor_bytes("x").is_ok());
}

TEST(Planner, ShapesNamingOtherSymbolsOrBadValuesAreRefused) {
  Fixture f;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto r = f.planner->obtain(*pg, {{"batch", 4}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not name exactly its dynamic dims (tokens)"), std::string::npos)
      << r.status().to_string();
  r = f.planner->obtain(*pg, {{"tokens", 0}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'tokens' = 0: must be >= 1"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(f.backend->builds.load(), 0);  // nothing was built for a bad request
}

TEST(Planner, ReshapeRederivesExtentsAndKeepsTheStructure) {
  Graph g = token_graph(64);
  ASSERT_TRUE(validate_graph(g).is_ok());
  auto s64 = compute_signature(g);
  auto r = reshape_graph(g, {{"tokens", 1000}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const int y = r->find_tensor("y");
  ASSERT_GE(y, 0);
  EXPECT_EQ(r->tensors[static_cast<size_t>(y)].shape(), (std::vector<int64_t>{1, 1000, 256}));
  EXPECT_EQ(r->tensors[static_cast<size_t>(y)].strides, (std::vector<int64_t>{256000, 256, 1}));
  auto s1000 = compute_signature(*r);
  ASSERT_TRUE(s64.is_ok() && s1000.is_ok());
  EXPECT_EQ(s1000->structure, s64->structure);
  EXPECT_EQ(s1000->shape_key, "tokens=1000");
  auto bad = reshape_graph(g, {});
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no value for dynamic dim 'tokens'"), std::string::npos);
}

// A channels-last convolution with a dynamic batch: strides follow the layout at the new batch, and the
// structure is the same (the batch stays symbolic through the convolution).
TEST(Planner, ReshapeAChannelsLastConvolution) {
  auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto s0 = compute_signature(*g);
  auto r = reshape_graph(*g, {{"batch", 5}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s1 = compute_signature(*r);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_EQ(s1->structure, s0->structure);
  EXPECT_EQ(s1->shape_key, "batch=5");
  const TensorDesc& x = r->tensors[static_cast<size_t>(r->find_tensor("x"))];
  ASSERT_EQ(x.dims.size(), 4u);
  EXPECT_EQ(x.dims[0].value, 5);
  // NHWC strides of [N, C, H, W]: C is the innermost.
  EXPECT_EQ(x.strides[1], 1);
  EXPECT_EQ(x.strides[0], x.dims[1].value * x.dims[2].value * x.dims[3].value);
  for (int t : r->outputs) EXPECT_EQ(r->tensors[static_cast<size_t>(t)].dims[0].value, 5);
}

// A conv whose image height and width are dynamic: reshaped to another size, its derived extents follow, and
// it keeps its structure (they are symbolic in the signature), so one structure serves every image size.
TEST(Planner, ReshapeAConvOverImageSizesKeepsItsStructure) {
  auto g = parse_spec_string(R"({"name": "img", "io_dtype": "fp16", "dynamic": {"h": 32, "w": 48},
    "tensors": {"x": {"dims": [4, 16, "h", "w"], "layout": "NHWC"}, "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"},
                "b": {"dims": [1, 32, 1, 1], "layout": "NHWC"}},
    "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"], "padding": [1, 1],
               "stride": [2, 2]},
              {"name": "bias", "op": "bias_add", "inputs": ["c", "b"], "outputs": ["cb"]},
              {"name": "act", "op": "relu", "inputs": ["cb"], "outputs": ["y"]}],
    "outputs": ["y"]})",
                             "img.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto s0 = compute_signature(*g);
  auto r = reshape_graph(*g, {{"h", 57}, {"w", 20}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s1 = compute_signature(*r);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_EQ(s1->structure, s0->structure) << s0->canonical << "\n" << s1->canonical;
  EXPECT_EQ(s1->shape_key, "h=57,w=20");
  const TensorDesc& y = r->tensors[static_cast<size_t>(r->find_tensor("y"))];
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{4, 32, 29, 10}));  // (57 + 2 - 3) / 2 + 1, (20 + 2 - 3) / 2 + 1
  EXPECT_EQ(y.strides[1], 1);
}

// reshaped_signature (the obtain path's signature of a new shape) equals a full compute_signature for every
// example with dynamic dims at several values, and for graphs whose text reads a dynamic value: an SDPA whose
// default scale follows a dynamic head dim, where the structure changes with the shape.
TEST(Planner, ReshapedSignatureEqualsAFullSignature) {
  auto same = [](const GraphSignature& a, const GraphSignature& b) {
    return a.structure == b.structure && a.shape_key == b.shape_key && a.canonical == b.canonical &&
           a.tensor_ids == b.tensor_ids;
  };
  int checked = 0;
  for (const char* name : {"conv_bias_relu", "conv_dgrad", "conv_wgrad", "layer_norm", "rms_norm", "sdpa_fwd",
                           "small/conv_bias_relu", "small/matmul_bias_gelu", "small/sdpa_fwd"}) {
    auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".json");
    ASSERT_TRUE(g.is_ok()) << name << ": " << g.status().to_string();
    auto base = compute_signature(*g);
    ASSERT_TRUE(base.is_ok()) << name;
    for (int64_t v : {1, 3, 7, 64}) {
      std::map<std::string, int64_t> shape = g->dynamic_dims;
      for (auto& [sym, value] : shape) value = v;
      auto r = reshape_graph(*g, shape);
      if (!r.is_ok()) continue;  // e.g. a dx whose declared extents do not fit every batch
      auto fast = reshaped_signature(*g, *base, *r);
      auto full = compute_signature(*r);
      ASSERT_TRUE(fast.is_ok() && full.is_ok()) << name;
      EXPECT_TRUE(same(*fast, *full)) << name << " at " << v << ": " << fast->shape_key << " vs " << full->shape_key;
      EXPECT_EQ(fast->structure, base->structure) << name << ": one structure for every value";
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
  // Two symbols: the key keeps the canonical order (first appearance), not the map's.
  auto two = parse_spec_string(R"({"name": "img", "io_dtype": "fp16", "dynamic": {"h": 32, "a_w": 48},
    "tensors": {"x": {"dims": [4, 16, "h", "a_w"], "layout": "NHWC"}, "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"}},
    "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"], "padding": [1, 1]}],
    "outputs": ["y"]})",
                               "img.json");
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  auto tb = compute_signature(*two);
  auto tr = reshape_graph(*two, {{"h", 9}, {"a_w", 11}});
  ASSERT_TRUE(tb.is_ok() && tr.is_ok());
  auto tf = reshaped_signature(*two, *tb, *tr);
  auto tfull = compute_signature(*tr);
  ASSERT_TRUE(tf.is_ok() && tfull.is_ok());
  EXPECT_TRUE(same(*tf, *tfull)) << tf->shape_key << " vs " << tfull->shape_key;
  // A dynamic head dim: the default scale 1/sqrt(d) is in the text, so each d is its own structure.
  auto sd = parse_spec_string(R"({"name": "att", "io_dtype": "bf16", "dynamic": {"d": 64},
    "tensors": {"q": {"dims": [1, 2, 128, "d"]}, "k": {"dims": [1, 2, 128, "d"]}, "v": {"dims": [1, 2, 128, "d"]}},
    "nodes": [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"]}],
    "outputs": ["o"]})",
                              "att.json");
  ASSERT_TRUE(sd.is_ok()) << sd.status().to_string();
  auto sb = compute_signature(*sd);
  auto sr = reshape_graph(*sd, {{"d", 128}});
  ASSERT_TRUE(sb.is_ok() && sr.is_ok()) << (sr.is_ok() ? "" : sr.status().to_string());
  auto sf = reshaped_signature(*sd, *sb, *sr);
  auto sfull = compute_signature(*sr);
  ASSERT_TRUE(sf.is_ok() && sfull.is_ok());
  EXPECT_TRUE(same(*sf, *sfull));
  EXPECT_NE(sf->structure, sb->structure) << "the scale differs, so the structure does";
}

// A dx of stride 2 has several valid extents and a dw's filter is not derived: reshape keeps what the
// spec declared (it used to fall back to the smallest dx and the formula's dw; found by review).
TEST(Planner, ReshapeKeepsADeclaredConvGradientExtent) {
  auto dgrad = parse_spec_string(R"({"name": "dg", "io_dtype": "fp16", "dynamic": {"batch": 2},
    "tensors": {"dy": {"dims": ["batch", 16, 4, 4], "layout": "NHWC"}, "w": {"dims": [16, 8, 3, 3], "layout": "NHWC"},
                "dx": {"dims": ["batch", 8, 8, 8], "layout": "NHWC"}},
    "nodes": [{"name": "dgrad", "op": "conv_dgrad", "inputs": ["dy", "w"], "outputs": ["dx"], "padding": [1, 1],
               "stride": [2, 2]}],
    "outputs": ["dx"]})",
                                 "dg.json");
  ASSERT_TRUE(dgrad.is_ok()) << dgrad.status().to_string();
  ASSERT_TRUE(validate_graph(*dgrad).is_ok());
  auto r = reshape_graph(*dgrad, {{"batch", 3}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const TensorDesc& dx = r->tensors[static_cast<size_t>(r->find_tensor("dx"))];
  EXPECT_EQ(dx.shape(), (std::vector<int64_t>{3, 8, 8, 8}));
  auto wgrad = parse_spec_string(R"({"name": "wg", "io_dtype": "fp16", "dynamic": {"batch": 2},
    "tensors": {"x": {"dims": ["batch", 8, 8, 8], "layout": "NHWC"}, "dy": {"dims": ["batch", 16, 8, 8], "layout": "NHWC"},
                "dw": {"dims": [16, 8, 3, 3], "layout": "NHWC", "dtype": "fp32"}},
    "nodes": [{"name": "wgrad", "op": "conv_wgrad", "inputs": ["x", "dy"], "outputs": ["dw"], "padding": [1, 1]}],
    "outputs": ["dw"]})",
                                 "wg.json");
  ASSERT_TRUE(wgrad.is_ok()) << wgrad.status().to_string();
  ASSERT_TRUE(validate_graph(*wgrad).is_ok());
  auto w = reshape_graph(*wgrad, {{"batch", 5}});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->tensors[static_cast<size_t>(w->find_tensor("dw"))].shape(), (std::vector<int64_t>{16, 8, 3, 3}));
}

TEST(ExecutablePlan, BindingsAreCheckedBeforeAnyLaunch) {
  Fixture f;
  auto got = f.planner->obtain(token_graph(64));
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const ExecutablePlan& p = *got->plan;
  alignas(64) static char mem[4][1 << 16];
  auto xb = p.tensor_bytes("x");
  ASSERT_TRUE(xb.is_ok());
  EXPECT_EQ(*xb, size_t{64} * 128 * 2);
  TensorBindings ok = {{"x", {mem[0], *xb}}, {"w", {mem[1]}}, {"b", {mem[2]}}, {"y", {mem[3]}}};
  EXPECT_TRUE(p.execute(nullptr, ok, mem[0]).is_ok());
  EXPECT_EQ(f.backend->runs.load(), 1);
  auto expect_refused = [&](TensorBindings t, void* ws, const std::string& what) {
    Status s = p.execute(nullptr, t, ws);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.to_string();
  };
  TensorBindings t = ok;
  t.erase("w");
  expect_refused(t, mem[0], "tensor 'w' is not bound");
  t = ok;
  t["y"].ptr = nullptr;
  expect_refused(t, mem[0], "tensor 'y' is bound to a null pointer");
  t = ok;
  t["x"].ptr = mem[0] + 2;
  expect_refused(t, mem[0], "is not 16-byte aligned");
  t = ok;
  t["x"].bytes = *xb - 1;
  expect_refused(t, mem[0], "tensor 'x': buffer of 16383 bytes, the shape tokens=64 needs 16384");
  t = ok;
  t["h"] = {mem[0]};  // a virtual intermediate: not bindable
  expect_refused(t, mem[0], "no input or output tensor 'h' to bind");
  expect_refused(ok, nullptr, "needs a workspace of 1024 bytes");
  EXPECT_EQ(f.backend->runs.load(), 1);  // none of those reached the executor
}

TEST(ShapeRecorder, CountsPerSourceWritesAndReadsItsFile) {
  Fixture f("tokens=pow2");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 7}}).is_ok());
  auto snap = f.planner->recorder().snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].shape_key, "tokens=100");
  EXPECT_EQ(snap[0].count, 5);
  EXPECT_EQ(snap[0].sources.at("heuristics"), 1);
  EXPECT_EQ(snap[0].sources.at("memory"), 4);
  EXPECT_EQ(snap[0].graph, "mlp");
  const std::string path = ::testing::TempDir() + "/kiln_shapes_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  ASSERT_TRUE(f.planner->recorder().write_file(path).is_ok());
  Status again = f.planner->recorder().write_file(path);  // an existing file is not written over unasked
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already exists"), std::string::npos) << again.to_string();
  EXPECT_TRUE(f.planner->recorder().write_file(path, /*overwrite=*/true).is_ok());
  auto back = read_shapes_file(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].structure, snap[0].structure);
  EXPECT_EQ((*back)[1].count, 2);
  std::remove(path.c_str());
  // Damaged files are refused naming the entry and field.
  auto bad = parse_shapes_json(
      R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":"xyz","shape_key":"","count":1}]})", "f.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("f.json: shapes[0]: \"structure\" 'xyz' is not 32 lowercase hex digits"),
            std::string::npos)
      << bad.status().to_string();
  bad = parse_shapes_json(R"({"format":"kiln-shapes","version":2,"shapes":[]})", "f.json");
  EXPECT_NE(bad.status().message().find("version 2 (this Kiln reads version 1)"), std::string::npos);
  bad = parse_shapes_json("[1,2]", "f.json");
  EXPECT_NE(bad.status().message().find("not a recorded-shapes file"), std::string::npos);
  bad = parse_shapes_json(R"({"format":5,"version":1,"shapes":[]})", "f.json");  // a format of another type
  EXPECT_NE(bad.status().message().find("not a recorded-shapes file"), std::string::npos) << bad.status().to_string();
  for (const char* key : {"tokens=", "=5", "a=1,a=2", "tokens=0", "tokens=99999999999"}) {
    bad = parse_shapes_json(std::string(R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":")") +
                                "0123456789abcdef0123456789abcdef\",\"shape_key\":\"" + key + "\",\"count\":1}]}",
                            "f.json");
    ASSERT_FALSE(bad.is_ok()) << key;
    EXPECT_NE(bad.status().message().find("f.json: shapes[0]: \"shape_key\""), std::string::npos)
        << bad.status().to_string();
  }
  auto zero = read_shapes_file("/dev/zero");  // a device: never read
  ASSERT_FALSE(zero.is_ok());
  EXPECT_NE(zero.status().message().find("is not a regular file"), std::string::npos) << zero.status().to_string();
  // A regular file past the limit (sparse: no disk used) is read in pieces up to the limit, then refused.
  const std::string big = ::testing::TempDir() + "/kiln_big_shapes_" + std::to_string(::getpid());
  std::ofstream(big).put(' ');
  ASSERT_EQ(::truncate(big.c_str(), (65LL << 20)), 0);
  auto over = read_shapes_file(big);
  std::remove(big.c_str());
  ASSERT_FALSE(over.is_ok());
  EXPECT_NE(over.status().message().find("over the limit"), std::string::npos) << over.status().to_string();
}

// Every Planner source has its own count (a stopgap's "dynamic" is not folded into "other").
TEST(ShapeRecorder, EveryPlannerSourceIsCountedByName) {
  ShapeRecorder rec;
  for (int i = 0; i < kPlanSourceCount; ++i)
    rec.record("s", "tokens=5", "g", plan_source_name(static_cast<PlanSource>(i)));
  auto shapes = rec.snapshot();
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0].sources.size(), static_cast<size_t>(kPlanSourceCount));
  EXPECT_EQ(shapes[0].sources.count("other"), 0u);
  EXPECT_EQ(shapes[0].sources.at("dynamic"), 1);
}

// A FIFO (or any file that is not a regular one) is refused, not read forever.
TEST(ShapeRecorder, APipeIsRefusedNotWaitedOn) {
  const std::string fifo = ::testing::TempDir() + "/kiln_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_shapes_file(fifo);
  std::remove(fifo.c_str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is not a regular file"), std::string::npos) << r.status().to_string();
}

TEST(ShapeRecorder, ManyThreadsLoseNoCount) {
  ShapeRecorder r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i)
        r.record("0123456789abcdef0123456789abcdef", "tokens=" + std::to_string(i % 7), "g",
                 t % 2 ? "memory" : "bucket");
    });
  for (auto& t : threads) t.join();
  int64_t total = 0;
  for (const auto& s : r.snapshot()) total += s.count;
  EXPECT_EQ(total, 16 * 5000);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A new shape: a dynamic-shape stopgap at once, then its bucket's tuned configuration swapped in.
TEST(PlannerStopgap, NewShapeServedByAStopgapThenPromotedToItsBucketsConfiguration) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kDynamic);
  EXPECT_NE(a->why.find("dynamic: a stopgap"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan->built_from(), PlanSource::kBucket);
  EXPECT_EQ(b->plan->config().identity(), "eng41_k2=4");
  EXPECT_NE(b->plan.get(), a->plan.get());
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kDynamic)], 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotion_failures, 0);
  EXPECT_EQ(st.cached, 1);
  EXPECT_EQ(st.builds, 2);  // the stopgap and its static plan
  EXPECT_NE(st.text().find("dynamic 1"), std::string::npos) << st.text();
  EXPECT_NE(st.text().find("0 stopgaps, 1 promoted"), std::string::npos) << st.text();
}

TEST(PlannerStopgap, StoredShapesNeverGetAStopgap) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=64");
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kStore);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
}

TEST(PlannerStopgap, AGraphWithoutDynamicDimsIsBuiltStatically) {
  Fixture f("", NewShapes::kStopgap);
  Graph g = token_graph();
  g.dynamic_dims.clear();
  for (TensorDesc& t : g.tensors)
    for (Dim& d : t.dims) d.symbol.clear();
  auto pg = f.planner->prepare(g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kHeuristics);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
}

TEST(PlannerStopgap, NoDynamicEngineFallsBackToTheStaticBuildAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->dynamic_ok = false;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kBucket);
  EXPECT_NE(a->why.find("dynamic: no engine supports dynamic shapes"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();  // nothing queued: returns at once
  EXPECT_EQ(f.planner->stats().promotions, 0);
  EXPECT_EQ(f.planner->stats().stopgaps, 0);
}

TEST(PlannerStopgap, AFailedPromotionKeepsTheStopgapAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->fail_heuristics = 1;  // no tuned shape: the promotion is a heuristics build, which fails once
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 300}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  f.planner->wait_for_promotions();
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotion_failures, 1);
  EXPECT_EQ(st.stopgaps, 1);
  EXPECT_NE(st.last_promotion_failure.find("cuDNN is busy (injected)"), std::string::npos) << st.last_promotion_failure;
  EXPECT_NE(st.text().find("1 promotions failed"), std::string::npos) << st.text();
  auto b = f.planner->obtain(*pg, {{"tokens", 300}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan.get(), a->plan.get());  // still the stopgap
}

TEST(PlannerStopgap, ManyThreadsOneStopgapAndOnePromotionPerShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 20;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r)
        if (!f.planner->obtain(*pg, {{"tokens", 100 + (i + r) % 4}}).is_ok()) ++errors;
    });
  for (auto& t : threads) t.join();
  f.planner->wait_for_promotions();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 4);
  EXPECT_EQ(f.backend->heuristic_builds.load(), 4);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 4);
  EXPECT_EQ(st.stopgaps, 0);
  for (int t = 100; t < 104; ++t) {
    auto r = f.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->plan->built_from(), PlanSource::kHeuristics) << t;
  }
}

// Destroying a Planner with promotions still queued neither hangs nor touches freed state.
TEST(PlannerStopgap, DestroyedWithPromotionsQueued) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 30;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int t = 200; t < 206; ++t) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", t}}).is_ok());
  const auto t0 = std::chrono::steady_clock::now();
  f.planner.reset();
  // At most the promotion in progress finishes; the five queued behind it are dropped.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Where static builds of a structure take under 5 ms (a precompiled engine), its new shapes are built at
// once; where they are dear, every new shape gets a stopgap.
TEST(PlannerStopgap, AStructureWhoseStaticBuildsAreCheapSkipsTheStopgap) {
  Fixture f("", NewShapes::kStopgap);
  f.backend->dynamic_delay_ms = 40;  // static builds: no delay
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kDynamic);
  f.planner->wait_for_promotions();  // its static build, timed: cheap
  auto r = f.planner->obtain(*pg, {{"tokens", 102}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, PlanSource::kHeuristics);
  EXPECT_NE(r->why.find("dynamic: skipped, static builds of this structure take under 5 ms"), std::string::npos)
      << r->why;
  EXPECT_EQ(f.backend->dynamic_builds.load(), 1);
}

TEST(PlannerStopgap, AStructureWhoseStaticBuildsAreDearKeepsItsStopgaps) {
  Fixture f("", NewShapes::kStopgap);
  f.backend->build_delay_ms = 20;  // every build, static ones included, costs 20 ms
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int t : {100, 101, 102}) {
    auto r = f.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->source, PlanSource::kDynamic) << t;
    f.planner->wait_for_promotions();
  }
}

TEST(PlannerStopgap, PromotionOffKeepsStopgapsAndCountsThem) {
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  PlannerOptions o;
  o.promote = false;
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 70}}).is_ok());
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 71}}).is_ok());
  planner->wait_for_promotions();
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.stopgaps, 2);
  EXPECT_EQ(st.promotions, 0);
  EXPECT_EQ(backend->heuristic_builds.load(), 0);
  auto again = planner->obtain(*pg, {{"tokens", 70}});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->plan->built_from(), PlanSource::kDynamic);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The token graph prepared, with tokens=128 stored and tuned (eng41): the padded stopgaps' representative.
StatusOr<PreparedGraph> prepared_with_128_tuned(Fixture& f) {
  f.backend->stored.insert("tokens=128");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  return f.planner->prepare(token_graph());
}

// A new shape in a tuned bucket: the representative's stored plan runs it at once on scratch copies
// (kiln/runtime/padding.h), then its own static plan replaces it.
TEST(PlannerPadded, ANewShapeRunsOnItsBucketsTunedPlanThenIsPromoted) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=128");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kPadded);
  EXPECT_EQ(a->plan->config().identity(), "eng7");  // the stored plan's (the fake store builds eng7)
  EXPECT_NE(a->why.find("padded: runs the plan tuned for tokens=128 on scratch (x 25600 of 32768 bytes, y 51200 of "
                        "65536 bytes)"),
            std::string::npos)
      << a->why;
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
  // Its workspace: the scratch of x and y, then the larger plan's own 1024 bytes.
  EXPECT_EQ(a->plan->workspace_bytes(), 32768 + 65536 + 1024);

  // Run it on the caller's buffers of 100 rows, with a canary past y's end.
  std::vector<uint16_t> x(100 * 128), w(128 * 256), b(256), y(100 * 256 + 64, 0xBEEF);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
  alignas(256) static char ws[32768 + 65536 + 1024];
  const int copies0 = FakeBackend::host_copies.load();
  Status s = a->plan->execute(
      nullptr,
      {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data(), 100 * 256 * 2}}}, ws);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(FakeBackend::host_copies.load() - copies0, 2);  // x in, y out
  for (int64_t r = 0; r < 100; ++r)
    for (int64_t j = 0; j < 256; j += 37)
      ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + 128)) << r << "," << j;
  for (size_t i = 100 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;
  // Too small a workspace is refused before anything runs.
  const int runs0 = f.backend->runs.load();
  EXPECT_FALSE(
      a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data()}}}, nullptr)
          .is_ok());
  EXPECT_EQ(f.backend->runs.load(), runs0);

  // The representative's plan is held now: a hit, the same object the padded plan runs.
  auto rep = f.planner->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->source, PlanSource::kMemory);

  // Promotion: the bucket's configuration built for 100, which then computes with 100 rows.
  f.planner->wait_for_promotions();
  // tokens=128 once and the promotion's 100: obtain() did not ask the store for 100, which the structure's
  // tuned shapes do not hold (its promotion asks it first).
  EXPECT_EQ(f.backend->store_calls.load(), 2);
  auto p = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->source, PlanSource::kMemory);
  EXPECT_EQ(p->plan->built_from(), PlanSource::kBucket);
  ASSERT_TRUE(
      p->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data()}}}, ws)
          .is_ok());
  EXPECT_EQ(y[5 * 256 + 3], static_cast<uint16_t>(x[5 * 128 + 3] + 100));
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kPadded)], 1);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("padded 1"), std::string::npos) << st.text();
}

TEST(PlannerPadded, TwoNewShapesShareOneLoadOfTheirRepresentative) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  auto b = f.planner->obtain(*pg, {{"tokens", 90}});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_EQ(b->source, PlanSource::kPadded);
  f.planner->wait_for_promotions();
  EXPECT_EQ(f.backend->store_calls.load(), 3);  // 128 once, the two promotions' misses (not the obtains)
}

// A plan stored for exactly the new shape that the structure's tuned shapes do not list (kiln compile's
// untuned plan, or one stored since they were read) is not asked for on the request's path, which a padded
// stopgap serves: the promotion asks the store first and swaps that plan in.
TEST(PlannerPadded, AnUntunedRecordOfTheShapeIsSwappedInByThePromotion) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=128");
  f.backend->stored.insert("tokens=100");  // stored, not tuned
  f.backend->stored.insert("tokens=256");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  f.backend->tuned.push_back(TunedShape{"tokens=256", {{"tokens", 256}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_NE(a->why.find("store: asked by the promotion"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan->built_from(), PlanSource::kStore);
  EXPECT_EQ(f.backend->builds.load(), 0);  // nothing built: the stored plan replaced the stopgap
  // A shape the tuned shapes list is asked of the store first, as ever: a store hit, no stopgap.
  auto c = f.planner->obtain(*pg, {{"tokens", 256}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->source, PlanSource::kStore) << c->why;
}

// PromoteBy::kTune: the stopgap's replacement is this shape tuned (within PromotionTuning's bounds).
TEST(PlannerPadded, PromotedByATuneOfTheShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_NE(a->why.find("its own plan is being tuned"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->plan->built_from(), PlanSource::kTuned);
  EXPECT_EQ(b->plan->config().identity(), "eng99");
  EXPECT_EQ(b->plan->signature().shape_key, "tokens=100");
  EXPECT_EQ(f.backend->tunes.load(), 1);
  EXPECT_EQ(f.backend->last_tuning.top_k, 5);  // the Planner's bounds reach the tune
  EXPECT_EQ(f.backend->builds.load(), 0);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotions_tuned, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("1 promoted, 1 by tuning"), std::string::npos) << st.text();
}

// A tuned winner that could not be stored still replaces the stopgap: a note, not a fallback.
TEST(PlannerPadded, ATunedWinnerNotStoredIsANoteNotAFallback) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  f.backend->tune_not_stored = true;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  f.planner->wait_for_promotions();
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions_tuned, 1);
  EXPECT_EQ(st.last_tune_fallback, "");
  EXPECT_EQ(st.last_tune_note, "mlp tokens=100: tuned eng99, not stored: the store is read-only (injected)");
  EXPECT_EQ(st.text().find("fell back"), std::string::npos) << st.text();
}

// Destroying the Planner cancels a background tune in progress instead of waiting for it to finish.
TEST(PlannerPadded, DestroyingThePlannerCancelsATuneInProgress) {
  auto f = std::make_unique<Fixture>("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  FakeBackend* backend = f->backend;
  backend->tune_delay_ms = 20000;
  auto pg = f->planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  backend->stored.insert("tokens=128");
  backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  ASSERT_TRUE(f->planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  while (backend->tunes.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  f->planner.reset();  // the backend dies with it: read the flag first
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 10000.0);  // far below the 20 s the tune would take
}

// Without promotions nothing would ask the store later: it is asked before the padded source, as ever.
TEST(PlannerPadded, WithoutPromotionsTheStoreIsAskedFirst) {
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kStopgap;
  o.promote = false;
  o.buckets = *BucketPolicy::parse("tokens=pow2");
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  backend->stored.insert("tokens=128");
  backend->stored.insert("tokens=100");  // stored, not tuned
  backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto a = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kStore) << a->why;
}

// A tune that finds no winner falls back to the static build, and the stats say why.
TEST(PlannerPadded, ATuneWithoutAWinnerFallsBackToTheBuild) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  f.backend->tune_finds_none = true;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  const int before = f.backend->store_calls.load();
  ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  f.planner->wait_for_promotions();
  // The padded stopgap loads the tuned 128's plan (one store call); the promotion asks the store once, before
  // its tune, not again before the build it falls back to (that was a third call).
  EXPECT_EQ(f.backend->store_calls.load(), before + 2);
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->plan->built_from(), PlanSource::kBucket);
  EXPECT_EQ(b->plan->config().identity(), "eng41");
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotions_tuned, 0);
  EXPECT_EQ(st.last_tune_fallback, "mlp tokens=100: no correct candidate of 3 (injected)");
  EXPECT_NE(st.text().find("a tune fell back to a build: mlp tokens=100: no correct candidate"), std::string::npos)
      << st.text();
}

// Where padding does not apply the stopgap is a dynamic-shape build, and `why` says what padding lacked.
TEST(PlannerPadded, WithoutALargerTunedShapeOrItsRecordTheStopgapIsDynamic) {
  {
    // Covers off: 80 + 80 would cover 100 (PlannerSplit.NoSumIsCoveredByOverlappingPartsUnlessOff).
    Fixture f("tokens=ranges:65-200", NewShapes::kStopgap, PromoteBy::kBuild, /*split_overlap=*/false);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored.insert("tokens=80");
    f.backend->tuned.push_back(TunedShape{"tokens=80", {{"tokens", 80}}, EngineConfig{41, {}}});
    auto a = f.planner->obtain(*pg, {{"tokens", 100}});  // 80 < 100: no plan to pad into
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, PlanSource::kDynamic);
    EXPECT_NE(a->why.find("padded: no tuned shape at least as large in bucket tokens=65-200"), std::string::npos)
        << a->why;
    f.planner->wait_for_promotions();
  }
  {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});  // no record
    auto a = f.planner->obtain(*pg, {{"tokens", 100}});
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, PlanSource::kDynamic);
    EXPECT_NE(a->why.find("padded: the plan tuned for tokens=128 did not load: miss"), std::string::npos) << a->why;
    f.planner->wait_for_promotions();
  }
}

TEST(PlannerPadded, OffByOptionAndNeverWhenBuildingNow) {
  for (int mode = 0; mode < 2; ++mode) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    if (mode == 0) o.padded = false;
    else o.new_shapes = NewShapes::kBuildNow;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored.insert("tokens=128");
    backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto a = planner->obtain(*pg, {{"tokens", 100}});
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, mode == 0 ? PlanSource::kDynamic : PlanSource::kBucket) << mode;
    planner->wait_for_promotions();
  }
}

// A service at start: every stored shape of the structure loaded, so they are hits and new shapes of
// their buckets are padded without loading anything.
TEST(PlannerPadded, PreloadHoldsEveryStoredShapeOfTheStructure) {
  // Covers off: 128 + 128 would cover 200 below; this test is about the padded path.
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kBuild, /*split_overlap=*/false);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=128", "tokens=256"};
  for (int64_t t : {128, 256, 512})  // 512: tuned, but its record does not load here
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto n = f.planner->preload(*pg, /*warm=*/true);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->loaded, 2);
  EXPECT_EQ(n->warmed, 2);
  EXPECT_EQ(f.backend->warmed.load(), 2);
  EXPECT_EQ(n->failed, 1);
  EXPECT_EQ(n->last_failure, "tokens=512: miss");
  // The padded path ran once, for a shape one below the tuned shape nearest the graph's own (64: 128), and
  // that plan is not held; the backend made its handles.
  EXPECT_TRUE(n->padded_warmed);
  EXPECT_EQ(f.backend->warmed_padded.load(), 1);
  EXPECT_EQ(f.backend->last_padded_warmed, "tokens=127");
  EXPECT_EQ(f.backend->concurrency_warms.load(), 1);
  EXPECT_EQ(f.planner->stats().cached, 2);
  EXPECT_EQ(f.planner->stats().served[static_cast<int>(PlanSource::kPadded)], 0) << "a warm-up serves no one";
  auto again = f.planner->preload(*pg);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->loaded, 0);  // held already: nothing loaded twice
  EXPECT_EQ(f.backend->warmed.load(), 2);
  const int calls = f.backend->store_calls.load();
  auto hit = f.planner->obtain(*pg, {{"tokens", 256}});
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->source, PlanSource::kMemory);
  auto padded = f.planner->obtain(*pg, {{"tokens", 200}});
  ASSERT_TRUE(padded.is_ok());
  EXPECT_EQ(padded->source, PlanSource::kPadded) << padded->why;
  // Not even 200's own miss: its promotion asks (on the promotion thread, which may already have).
  EXPECT_NE(padded->why.find("store: asked by the promotion"), std::string::npos) << padded->why;
  f.planner->wait_for_promotions();
  EXPECT_EQ(f.backend->store_calls.load(), calls + 1);
}

// The padded warm-up runs only where padded stopgaps serve, and only for a shape that is untuned and in its
// representative's bucket; where none is, it is skipped without counting a failure.
TEST(PlannerPadded, PreloadWarmsThePaddedPathOnlyWhereItServes) {
  {
    Fixture f("tokens=pow2", NewShapes::kBuildNow);  // no stopgaps
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=128"};
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_FALSE(r->padded_warmed);
    EXPECT_EQ(f.backend->warmed_padded.load(), 0);
    EXPECT_EQ(f.backend->concurrency_warms.load(), 1);
  }
  {
    // 127 is not in 128's exact bucket, but 128 is at most twice as large: padded all the same. A padded
    // stopgap warms the padded path whatever the buckets.
    Fixture f("tokens=exact", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=128"};
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->padded_warmed);
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=127");
    EXPECT_EQ(r->failed, 0) << r->last_failure;
  }
  {
    // The tuned shape nearest the graph's own (200) is 128, whose neighbour 127 is tuned itself: the next
    // nearest, 127, gives 126.
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph(200));
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=127", "tokens=128"};
    for (int64_t t : {127, 128})
      f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->padded_warmed);
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=126");
  }
}

// A plan that loads but does not warm is held all the same (it runs, just not warm), and counted.
TEST(PlannerPadded, AWarmUpThatFailsKeepsThePlanAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->warm_fails = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=128"};
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto r = f.planner->preload(*pg, /*warm=*/true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->loaded, 1);
  EXPECT_EQ(r->warmed, 0);
  EXPECT_EQ(r->failed, 2);  // the plan's warm-up, then the padded one's
  EXPECT_FALSE(r->padded_warmed);
  EXPECT_EQ(r->last_failure, "padded warm-up: tokens=127: out of device memory (injected)");
  auto hit = f.planner->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->source, PlanSource::kMemory);
}

// The tuned shapes of a structure are read from the store once, not on every miss; preload reads them
// again (a shape another process tuned meanwhile is found by its exact key all the same).
TEST(PlannerPadded, TunedShapesAreReadOncePerStructureAndAgainByPreload) {
  Fixture f("tokens=pow2", NewShapes::kBuildNow);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  for (int t : {100, 90, 120}) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", t}}).is_ok());
  EXPECT_EQ(f.backend->tuned_queries.load(), 1);
  // Tuned meanwhile: 256; seen after preload, by the bucket source of a new shape in 129-256.
  f.backend->tuned.push_back(TunedShape{"tokens=256", {{"tokens", 256}}, EngineConfig{42, {}}});
  auto before = f.planner->obtain(*pg, {{"tokens", 200}});
  ASSERT_TRUE(before.is_ok());
  EXPECT_EQ(before->source, PlanSource::kHeuristics) << before->why;
  ASSERT_TRUE(f.planner->preload(*pg).is_ok());
  EXPECT_EQ(f.backend->tuned_queries.load(), 2);
  auto after = f.planner->obtain(*pg, {{"tokens", 210}});
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->source, PlanSource::kBucket) << after->why;
  EXPECT_EQ(after->plan->config().identity(), "eng42");
}

// The nearest covering shape may not pad (here it differs in h, an inner dim); a farther one that
// differs only in the rows does, and serves.
TEST(PlannerPadded, AFartherTunedShapeServesWhereTheNearestDoesNotPad) {
  Fixture f("tokens=ranges:1-256;h=ranges:1-8", NewShapes::kStopgap);
  auto g = parse_spec_string(R"({"name": "rows", "io_dtype": "fp16", "dynamic": {"tokens": 64, "h": 4},
    "tensors": {"x": {"dims": ["tokens", "h"]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "rows.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto pg = f.planner->prepare(*g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto key = [&](int64_t tokens, int64_t h) {
    auto r = reshape_graph(*pg->graph, {{"tokens", tokens}, {"h", h}});
    return r.is_ok() ? compute_signature(*r)->shape_key : std::string();
  };
  f.backend->stored = {key(128, 5), key(256, 4)};
  f.backend->tuned = {TunedShape{"h=5,tokens=128", {{"h", 5}, {"tokens", 128}}, EngineConfig{41, {}}},
                      TunedShape{"h=4,tokens=256", {{"h", 4}, {"tokens", 256}}, EngineConfig{42, {}}}};
  auto a = f.planner->obtain(*pg, {{"tokens", 100}, {"h", 4}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
  EXPECT_NE(a->why.find("runs the plan tuned for h=4,tokens=256"), std::string::npos) << a->why;
  // Where none pads, `why` gives the nearest one's reason.
  f.backend->tuned.pop_back();
  Fixture f2("tokens=ranges:1-256;h=ranges:1-8", NewShapes::kStopgap);
  f2.backend->stored = {key(128, 5)};
  f2.backend->tuned = {TunedShape{"h=5,tokens=128", {{"h", 5}, {"tokens", 128}}, EngineConfig{41, {}}}};
  auto pg2 = f2.planner->prepare(*g);
  ASSERT_TRUE(pg2.is_ok());
  auto b = f2.planner->obtain(*pg2, {{"tokens", 100}, {"h", 4}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kDynamic);
  EXPECT_NE(b->why.find("padded: h=5,tokens=128: no padded plan: tensor 'x' varies in two dims"), std::string::npos)
      << b->why;
  f.planner->wait_for_promotions();
  f2.planner->wait_for_promotions();
}

// Many threads asking for new shapes of one bucket at once: each shape one padded plan, the
// representative loaded at most once per racing thread and held once.
TEST(PlannerPadded, ManyThreadsOnePaddedPlanPerShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 5;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  std::atomic<int> errors{0}, padded{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) {
        auto o = f.planner->obtain(*pg, {{"tokens", 100 + (i + r) % 4}});
        if (!o.is_ok()) ++errors;
        else if (o->source == PlanSource::kPadded) ++padded;
      }
    });
  for (auto& t : threads) t.join();
  f.planner->wait_for_promotions();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(padded.load(), 4);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 4);
  EXPECT_EQ(st.cached, 5);  // four shapes and their representative
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Promotion bounds that cannot hold are refused by create(), before any GPU is looked for.
TEST(PlannerOptionsCheck, PromotionTuningOutOfRangeIsRefusedNamingTheField) {
  auto refused = [](PlannerOptions o, const std::string& expect) {
    auto p = Planner::create(o);
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().to_string();
    EXPECT_NE(p.status().message().find(expect), std::string::npos) << p.status().message();
  };
  PlannerOptions o;
  o.tuning.top_k = -1;
  refused(o, "PromotionTuning::top_k must be >= 0, got -1");
  o = PlannerOptions{};
  o.tuning.time_budget_s = std::numeric_limits<double>::quiet_NaN();
  refused(o, "PromotionTuning::time_budget_s must be finite and >= 0");
  o.tuning.time_budget_s = -1;
  refused(o, "PromotionTuning::time_budget_s must be finite and >= 0");
  o = PlannerOptions{};
  o.tuning.build_threads = 0;
  refused(o, "PromotionTuning::build_threads must be >= 1, got 0");
  o = PlannerOptions{};
  o.promote_by = PromoteBy::kTune;
  o.tuning.store = true;
  refused(o, "PromotionTuning::store needs a store: set PlannerOptions::store_path");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A backend that counts the kernel caches it is asked to keep (the cuDNN backend writes them to the store).
class KernelCacheBackend : public FakeBackend {
 public:
  std::mutex kc_mu;
  std::vector<std::string> saved;  // graph names, in order
  bool save_fails = false;
  Status save_kernel_cache(const GraphSignature& sig, const std::string& graph_name) override {
    std::lock_guard<std::mutex> lock(kc_mu);
    if (save_fails) return unavailable("the store is busy (injected)");
    saved.push_back(graph_name + "/" + sig.structure);
    return Status::ok();
  }
  KernelCacheCounts kernel_cache_counts() const override {
    KernelCacheCounts k;
    k.loaded = 1;
    k.saved = 2;
    k.last_note = "a note (injected)";
    return k;
  }
};

std::unique_ptr<Planner> kernel_cache_planner(KernelCacheBackend** backend, bool save, bool promote = true) {
  auto b = std::make_unique<KernelCacheBackend>();
  *backend = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kStopgap;
  o.save_kernel_caches = save;
  o.promote = promote;
  return Planner::create_with_backend(std::move(b), o);
}

TEST(PlannerKernelCaches, ADynamicStopgapsKernelCacheIsKeptAfterItsPromotionWhenAsked) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/true);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto a = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->source, PlanSource::kDynamic);
  planner->wait_for_promotions();
  {
    std::lock_guard<std::mutex> lock(b->kc_mu);
    ASSERT_EQ(b->saved.size(), 1u);
    EXPECT_EQ(b->saved[0], token_graph().name + "/" + pg->signature.structure);
  }
  // A shape served from memory compiles nothing: nothing more to keep.
  ASSERT_TRUE(planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  planner->wait_for_promotions();
  EXPECT_EQ(b->saved.size(), 1u);
  // The stats carry the backend's counts and its last problem.
  const PlannerStats st = planner->stats();
  EXPECT_EQ(st.kernel_caches_loaded, 1);
  EXPECT_EQ(st.kernel_caches_saved, 2);
  EXPECT_NE(st.text().find("kernel caches: 1 loaded, 2 kept (last problem: a note (injected))"), std::string::npos)
      << st.text();
  // save_kernel_caches() asks again for every structure a dynamic stopgap was built for.
  EXPECT_TRUE(planner->save_kernel_caches().is_ok());
  EXPECT_EQ(b->saved.size(), 2u);
  b->save_fails = true;
  Status failed = planner->save_kernel_caches();
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.message().find("the store is busy"), std::string::npos) << failed.message();
}

TEST(PlannerKernelCaches, NothingIsKeptUnlessAsked) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/false);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 100}})->source, PlanSource::kDynamic);
  planner->wait_for_promotions();
  EXPECT_TRUE(b->saved.empty());
  Status st = planner->save_kernel_caches();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("save_kernel_caches is off"), std::string::npos) << st.message();
}

TEST(PlannerKernelCaches, WithoutPromotionsTheCallerKeepsThemWithSaveKernelCaches) {
  KernelCacheBackend* b = nullptr;
  auto planner = kernel_cache_planner(&b, /*save=*/true, /*promote=*/false);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 100}})->source, PlanSource::kDynamic);
  ASSERT_EQ(planner->obtain(*pg, {{"tokens", 200}})->source, PlanSource::kDynamic);
  EXPECT_TRUE(b->saved.empty());  // no promotion: nothing kept on its own
  EXPECT_TRUE(planner->save_kernel_caches().is_ok());
  EXPECT_EQ(b->saved.size(), 1u);  // one structure, one cache
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A new shape that is a sum of tuned shapes (kiln/runtime/padding.h "Split stopgaps"): their stored plans run
// one after another, each on its own rows of the caller's buffers, with no copies; then its own plan
// replaces it.
TEST(PlannerSplit, ASumOfTunedShapesRunsAsTheirPlansOnTheirRowsThenIsPromoted) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=32", "tokens=64", "tokens=128"};
  for (int64_t t : {32, 64, 128})
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 96}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kSplit);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kSplit);
  EXPECT_TRUE(plan_source_is_stopgap(a->source));
  EXPECT_NE(a->why.find("split: tokens 96 = 64 + 32, the tuned plans on their rows of the caller's buffers"),
            std::string::npos)
      << a->why;
  EXPECT_EQ(a->plan->workspace_bytes(), 1024);           // the parts share one: no scratch
  EXPECT_EQ(a->plan->identity(), "split[eng7 + eng7]");  // the stored plans of 64 and 32, in run order
  ASSERT_EQ(a->plan->parts().size(), 2u);
  EXPECT_EQ(a->plan->parts()[0]->signature().shape_key, "tokens=64");
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);

  std::vector<uint16_t> x(96 * 128), w(128 * 256), b(256), y(96 * 256 + 64, 0xBEEF);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
  alignas(256) static char ws[1024];
  const int copies0 = FakeBackend::host_copies.load();
  const int runs0 = f.backend->runs.load();
  Status s = a->plan->execute(
      nullptr, {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data(), 96 * 256 * 2}}},
      ws);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(FakeBackend::host_copies.load(), copies0) << "a split copies nothing";
  EXPECT_EQ(f.backend->runs.load() - runs0, 2);
  // Rows 0..63 by the 64 plan (+64), rows 64..95 by the 32 plan (+32), each from its own input row.
  for (int64_t r = 0; r < 96; ++r)
    for (int64_t j = 0; j < 256; j += 37)
      ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + (r < 64 ? 64 : 32))) << r << "," << j;
  for (size_t i = 96 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;

  // The parts' plans are held: hits.
  auto part = f.planner->obtain(*pg, {{"tokens", 32}});
  ASSERT_TRUE(part.is_ok());
  EXPECT_EQ(part->source, PlanSource::kMemory);

  f.planner->wait_for_promotions();
  auto p = f.planner->obtain(*pg, {{"tokens", 96}});
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->source, PlanSource::kMemory);
  EXPECT_EQ(p->plan->built_from(), PlanSource::kBucket);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kSplit)], 1);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("split 1"), std::string::npos) << st.text();
}

// A shape past every tuned one runs as a repeated part; one that is no short sum is padded, and with split off
// the sum is padded too.
TEST(PlannerSplit, PastTheLargestTunedShapeTooAndPaddedWhereItIsNoShortSum) {
  for (int mode = 0; mode < 3; ++mode) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    backend->compute_rows = true;
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    o.split_max_parts = 2;
    if (mode == 2) o.split = false;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored = {"tokens=8", "tokens=128"};
    for (int64_t t : {8, 128})
      backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    if (mode == 0) {  // 256 = 128 + 128: no tuned shape is as large, so nothing else but a build could serve it
      auto a = planner->obtain(*pg, {{"tokens", 256}});
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
      EXPECT_NE(a->why.find("tokens 256 = 128 + 128"), std::string::npos) << a->why;
      std::vector<uint16_t> x(256 * 128, 3), w(128 * 256), bias(256), y(256 * 256, 0);
      alignas(256) static char ws[1024];
      ASSERT_TRUE(
          a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data()}}}, ws)
              .is_ok());
      EXPECT_EQ(y[0], 3 + 128);
      EXPECT_EQ(y[255 * 256 + 255], 3 + 128) << "the second 128 rows were not written";
    } else {  // 120 = 8 x 15 (more than 2 parts), or split off: padded on the 128 plan
      auto a = planner->obtain(*pg, {{"tokens", 120}});
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      if (mode == 1)
        EXPECT_NE(a->why.find("split: tokens 120 is no sum of at most 2 tuned extents"), std::string::npos) << a->why;
      else EXPECT_EQ(a->why.find("split:"), std::string::npos) << a->why;
    }
    planner->wait_for_promotions();
  }
}

// A shape that is no sum of tuned shapes is covered by overlapping parts (kiln/runtime/padding.h cover_extents):
// tokens 7 with 4 tuned runs the 4 plan on rows 0..3, then on rows 3..6; no copies, nothing past the caller's
// rows. A call whose output shares memory with an input is refused before anything runs; with split_overlap off
// the shape is padded instead.
TEST(PlannerSplit, NoSumIsCoveredByOverlappingPartsUnlessOff) {
  for (bool overlap : {true, false}) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    backend->compute_rows = true;
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    o.split_overlap = overlap;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored = {"tokens=4", "tokens=8"};
    for (int64_t t : {4, 8})
      backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    auto a = planner->obtain(*pg, {{"tokens", 7}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (!overlap) {
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      EXPECT_NE(a->why.find("split: tokens 7 is no sum of at most 3 tuned extents (overlapping parts are off)"),
                std::string::npos)
          << a->why;
      planner->wait_for_promotions();
      continue;
    }
    EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
    EXPECT_NE(a->why.find("split: tokens 7 covered by 4 + 4 (the last part on rows 3..6, 1 of them computed twice)"),
              std::string::npos)
        << a->why;
    EXPECT_EQ(a->plan->identity(), "split[eng7 + eng7]");
    std::vector<uint16_t> x(7 * 128), w(128 * 256), bias(256), y(7 * 256 + 64, 0xBEEF);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
    alignas(256) static char ws[1024];
    const int copies0 = FakeBackend::host_copies.load();
    const int runs0 = backend->runs.load();
    Status s = a->plan->execute(
        nullptr,
        {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data(), 7 * 256 * 2}}}, ws);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(FakeBackend::host_copies.load(), copies0) << "a cover copies nothing";
    EXPECT_EQ(backend->runs.load() - runs0, 2);
    for (int64_t r = 0; r < 7; ++r)  // every row from its own input row, by a 4 plan (+4)
      for (int64_t j = 0; j < 256; j += 37)
        ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + 4)) << r << "," << j;
    for (size_t i = 7 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;

    // The output inside the input's memory: the last part would read rows the first one wrote.
    std::vector<uint16_t> shared(7 * 256 + 7 * 128);
    const int runs1 = backend->runs.load();
    Status aliased = a->plan->execute(
        nullptr, {{"x", {shared.data() + 7 * 64}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {shared.data()}}},
        ws);
    EXPECT_EQ(aliased.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(aliased.message().find("output 'y' shares memory with input 'x'"), std::string::npos)
        << aliased.message();
    EXPECT_EQ(backend->runs.load(), runs1) << "nothing ran";
    planner->wait_for_promotions();
  }
}

// Review: with two dynamic dims, an exact sum in one dim is preferred to a cover in another (a cover computes rows
// twice and refuses in-place calls that an exact split serves). Here "a" (first in the shape's order) has only a
// cover (4 + 4 for 6), "b" an exact sum (4 + 4 = 8).
TEST(PlannerSplit, AnExactSumInAnyDimIsPreferredToACover) {
  Fixture f("", NewShapes::kStopgap);
  auto g = parse_spec_string(R"({"name": "two", "io_dtype": "fp16", "dynamic": {"a": 6, "b": 8},
    "tensors": {"p": {"dims": ["a", 128]}, "q": {"dims": ["b", 128]}},
    "nodes": [{"name": "r1", "op": "relu", "inputs": ["p"], "outputs": ["u"]},
              {"name": "r2", "op": "relu", "inputs": ["q"], "outputs": ["v"]}],
    "outputs": ["u", "v"]})",
                             "two.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto pg = f.planner->prepare(*g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto key = [&](int64_t a, int64_t b) {
    auto r = reshape_graph(*pg->graph, {{"a", a}, {"b", b}});
    return r.is_ok() ? compute_signature(*r)->shape_key : std::string();
  };
  f.backend->stored = {key(4, 8), key(6, 4)};
  f.backend->tuned = {TunedShape{"a=4,b=8", {{"a", 4}, {"b", 8}}, EngineConfig{41, {}}},
                      TunedShape{"a=6,b=4", {{"a", 6}, {"b", 4}}, EngineConfig{42, {}}}};
  auto got = f.planner->obtain(*pg, {{"a", 6}, {"b", 8}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kSplit) << got->why;
  EXPECT_NE(got->why.find("split: b 8 = 4 + 4"), std::string::npos) << got->why;
  EXPECT_EQ(got->why.find("covered"), std::string::npos) << got->why;
  f.planner->wait_for_promotions();
}

// Review: a cover's `why` names the last part's rows and how many are computed twice (60 = 32 + 32: rows
// 28..59, 4 twice; a cover of exactly split_max_parts parts: 9 as 4 + 4 + 4, the last on rows 5..8, 3 twice), and
// every row is computed from its own input row.
TEST(PlannerSplit, ACoversWhyNamesItsRowsAndEveryRowIsRight) {
  struct Case {
    int64_t n;
    std::vector<int64_t> tuned;
    std::string why;
  };
  for (const Case& c :
       {Case{60, {32, 64}, "tokens 60 covered by 32 + 32 (the last part on rows 28..59, 4 of them"},
        Case{9, {4, 16}, "tokens 9 covered by 4 + 4 + 4 (the last part on rows 5..8, 3 of them"},
        Case{36, {4, 32, 64}, "tokens 36 covered by 32 + 4 (the last part on rows 32..35, 0 of them"}}) {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    f.backend->compute_rows = true;
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    for (int64_t t : c.tuned) {
      f.backend->stored.insert("tokens=" + std::to_string(t));
      f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    }
    auto a = f.planner->obtain(*pg, {{"tokens", c.n}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (c.n == 36) {  // 32 + 4 is an exact sum: no cover at all
      EXPECT_NE(a->why.find("tokens 36 = 32 + 4"), std::string::npos) << a->why;
      f.planner->wait_for_promotions();
      continue;
    }
    EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
    EXPECT_NE(a->why.find(c.why), std::string::npos) << a->why;
    const size_t n = static_cast<size_t>(c.n);
    std::vector<uint16_t> x(n * 128), w(128 * 256), bias(256), y(n * 256 + 64, 0xBEEF);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
    alignas(256) static char ws[1024];
    ASSERT_TRUE(
        a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data()}}}, ws)
            .is_ok());
    const int64_t part = c.n == 60 ? 32 : 4;
    for (size_t r = 0; r < n; ++r)
      for (size_t j = 0; j < 256; j += 37)
        ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + part)) << c.n << ": " << r;
    for (size_t i = n * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << c.n << ": past the rows at " << i;
    f.planner->wait_for_promotions();
  }
}

// Review: the cover's aliasing check. Buffers side by side in one allocation are disjoint and run; an output whose
// last bytes overlap an input's first ones, one equal to an input, and one over a non-varying input (the weights,
// which the last part reads after the first wrote) are refused before anything runs.
TEST(PlannerSplit, ACoverRefusesOverlapsOnlyWhereTheBytesShare) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=4", "tokens=8"};
  for (int64_t t : {4, 8})
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 7}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->source, PlanSource::kSplit) << a->why;
  // x: 7 x 128 fp16 = 1792 bytes (7 rows of 256); y: 7 x 256 fp16 = 3584; w: 65536; b: 512.
  constexpr size_t kX = 7 * 128, kY = 7 * 256, kW = 128 * 256, kB = 256;
  std::vector<uint16_t> arena(kX + kY + kW + kB + 4 * 128);
  uint16_t* base = arena.data() + (256 - reinterpret_cast<uintptr_t>(arena.data()) % 256) % 256 / 2;
  alignas(256) static char ws[1024];
  auto run = [&](uint16_t* x, uint16_t* y, uint16_t* w, uint16_t* b) {
    return a->plan->execute(nullptr, {{"x", {x}}, {"w", {w}}, {"b", {b}}, {"y", {y}}}, ws);
  };
  uint16_t* x = base;
  uint16_t* y = x + kX;  // right after x: disjoint
  uint16_t* w = y + kY;
  uint16_t* b = w + kW;
  Status adjacent = run(x, y, w, b);
  EXPECT_TRUE(adjacent.is_ok()) << adjacent.to_string();
  // y ends 256 bytes into x (y = x - 3584 + 256): partial overlap.
  std::vector<uint16_t> arena2(kY + kX + 256);
  uint16_t* base2 = arena2.data() + (256 - reinterpret_cast<uintptr_t>(arena2.data()) % 256) % 256 / 2;
  const int runs0 = f.backend->runs.load();
  Status tail = run(base2 + kY - 128, base2, w, b);
  EXPECT_EQ(tail.code(), StatusCode::kInvalidArgument) << tail.to_string();
  EXPECT_NE(tail.message().find("output 'y' shares memory with input 'x'"), std::string::npos) << tail.message();
  Status same = run(x, x, w, b);
  EXPECT_EQ(same.code(), StatusCode::kInvalidArgument) << same.to_string();
  Status weights = run(x, w, w, b);
  EXPECT_EQ(weights.code(), StatusCode::kInvalidArgument) << weights.to_string();
  EXPECT_NE(weights.message().find("output 'y' shares memory with input 'w'"), std::string::npos) << weights.message();
  EXPECT_EQ(f.backend->runs.load(), runs0) << "nothing ran";
  f.planner->wait_for_promotions();
}

TEST(PlannerSplit, MaxPartsOutOfRangeIsRefusedByCreate) {
  for (int bad : {1, 0, -1, 65}) {
    PlannerOptions o;
    o.split_max_parts = bad;
    auto p = Planner::create(o);
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("PlannerOptions::split_max_parts must be 2..64 (one part is the shape itself), "
                                        "got " +
                                        std::to_string(bad)),
              std::string::npos)
        << p.status().message();
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A shape below its bucket's tuned shapes (pow2: 50 is in 33-64, where nothing is tuned) is padded on a tuned
// shape of another bucket at most twice as large; three times as large is not a stopgap (a dynamic build).
TEST(PlannerPadded, OutsideTheBucketAtMostTwiceAsLarge) {
  for (int64_t tuned_at : {100, 150}) {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    const std::string key = "tokens=" + std::to_string(tuned_at);
    f.backend->stored.insert(key);
    f.backend->tuned.push_back(TunedShape{key, {{"tokens", tuned_at}}, EngineConfig{41, {}}});
    auto a = f.planner->obtain(*pg, {{"tokens", 50}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (tuned_at == 100) {
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      EXPECT_NE(a->why.find("padded: runs the plan tuned for tokens=100"), std::string::npos) << a->why;
    } else {
      EXPECT_EQ(a->source, PlanSource::kDynamic) << a->why;
      EXPECT_NE(a->why.find("padded: no tuned shape at least as large in bucket tokens=33-64, nor one at most twice "
                            "as large outside it"),
                std::string::npos)
          << a->why;
    }
    f.planner->wait_for_promotions();
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// preload(warm) warms the padded path itself, even where a split would serve the shape one below a tuned one
// (7 = 4 + 2 + 1), and with the default exact buckets, whose padded stopgaps come from a tuned shape at most
// twice as large.
TEST(PlannerPadded, PreloadWarmsAPaddedPlanWhereSplitsServeAndWithExactBuckets) {
  for (const std::string buckets : {"tokens=pow2", ""}) {
    Fixture f(buckets, NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph(8));
    ASSERT_TRUE(pg.is_ok());
    const std::vector<int64_t> tuned = buckets.empty() ? std::vector<int64_t>{8} : std::vector<int64_t>{1, 2, 4, 8};
    for (int64_t t : tuned) {
      const std::string key = "tokens=" + std::to_string(t);
      f.backend->stored.insert(key);
      f.backend->tuned.push_back(TunedShape{key, {{"tokens", t}}, EngineConfig{41, {}}});
    }
    auto n = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(n.is_ok()) << n.status().to_string();
    EXPECT_TRUE(n->padded_warmed) << buckets;
    EXPECT_EQ(f.backend->warmed_padded.load(), 1) << buckets;
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=7") << buckets;
    auto five = f.planner->obtain(*pg, {{"tokens", 5}});  // 4 + 1 where they are tuned, else padded on 8
    ASSERT_TRUE(five.is_ok());
    EXPECT_EQ(five->source, buckets.empty() ? PlanSource::kPadded : PlanSource::kSplit) << five->why;
    f.planner->wait_for_promotions();
  }
}

}  // namespace
}  // namespace kiln
