// The host side of re-tuning: queue reasons, queueing a graph with its spec, read-only stores, graph specs,
// what retune_queued does with rows it need not (or cannot) tune, and the graph catalog of deep verification.
// Tuning and deep checks themselves need a GPU: src/runtime/retune_gpu_test.cc.
#include <gtest/gtest.h>

#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/runtime/retune.h"
#include "kiln/spec/spec.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::open_store;
using store_test::TempDir;

const std::string kRoot = KILN_SOURCE_DIR;

Graph small(const std::string& name) {
  StatusOr<Graph> g = parse_spec_file(kRoot + "/examples/small/" + name + ".json");
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? *g : Graph{};
}

EnvFingerprint other_env() {
  EnvFingerprint f = h200();
  f.cudnn_version = 92000;
  return f;
}

TEST(Retune, ReasonNamesTheLookupOutcome) {
  LookupResult miss;
  EXPECT_EQ(retune_reason(miss), "store miss");
  LookupResult stale;
  stale.outcome = LookupOutcome::kStale;
  stale.reasons = {"cudnn_version: recorded 9.19.0, current 9.20.0 (must match)",
                   "sm_count: recorded 132, current 114 (must match)"};
  EXPECT_EQ(retune_reason(stale),
            "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match); sm_count: recorded 132, current "
            "114 (must match)");
  LookupResult corrupt;
  corrupt.outcome = LookupOutcome::kCorrupt;
  corrupt.reasons = {"checksum mismatch (stored a, computed b)"};
  EXPECT_EQ(retune_reason(corrupt), "store corrupt: checksum mismatch (stored a, computed b)");
}

TEST(Retune, QueueKeepsTheGraphAsASpecThatGivesItsKey) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  Graph g = small("conv_bias_relu");
  StatusOr<GraphSignature> sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  StatusOr<RetuneQueueEntry> e = queue_retune(*store, g, h200(), "store miss");
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  e = queue_retune(*store, g, h200(), "store miss");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->request_count, 2);
  EXPECT_EQ(e->structure_sig, sig->structure);
  EXPECT_EQ(e->shape_key, "batch=2");
  EXPECT_EQ(e->graph_name, "conv_bias_relu_small");
  StatusOr<Graph> back = parse_spec_string(e->spec_json, "queued");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  StatusOr<GraphSignature> back_sig = compute_signature(*back);
  ASSERT_TRUE(back_sig.is_ok());
  EXPECT_EQ(back_sig->structure, sig->structure);
  EXPECT_EQ(back_sig->shape_key, sig->shape_key);
}

TEST(Retune, ReadOnlyStoreDoesNotQueue) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  { ASSERT_TRUE(open_store(path)); }
  auto ro = open_store(path, /*read_only=*/true);
  ASSERT_TRUE(ro);
  Status s = queue_retune(*ro, small("rms_norm"), h200(), "store miss").status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.message();
  EXPECT_TRUE(ro->list_retune_queue()->empty());
  EXPECT_EQ(remember_graph_spec(*ro, small("rms_norm")).code(), StatusCode::kFailedPrecondition);
  RetuneOptions o;
  o.current = h200();
  EXPECT_EQ(retune_queued(*ro, o).status().code(), StatusCode::kFailedPrecondition);
}

TEST(Retune, RememberedGraphSpecReadsBack) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  Graph g = small("matmul_amax");
  ASSERT_TRUE(remember_graph_spec(*store, g).is_ok());
  StatusOr<GraphSignature> sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  EXPECT_EQ(sig->shape_key, "");  // static graph
  StatusOr<std::optional<GraphSpecEntry>> spec = store->get_graph_spec(sig->structure, sig->shape_key);
  ASSERT_TRUE(spec.is_ok() && spec->has_value());
  EXPECT_EQ((*spec)->graph_name, "matmul_amax_small");
  StatusOr<Graph> back = parse_spec_string((*spec)->spec_json, "stored");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(compute_signature(*back)->structure, sig->structure);
}

TEST(Retune, TuneOptionsForRetuneNow) {
  RetuneNowOptions o;
  o.time_budget_s = 12;
  o.candidate_budget_ms = 34;
  o.top_k = 5;
  o.seed = 9;
  TuneOptions t = tune_options_for(o);
  EXPECT_EQ(t.time_budget_s, 12);
  EXPECT_EQ(t.measure.stopping.time_budget_ms, 34);
  EXPECT_EQ(t.top_k, 5);
  EXPECT_EQ(t.seed, 9u);
  EXPECT_TRUE(t.verify);
}

// Rows retune_queued settles without tuning (so without a GPU): another environment's, one whose spec
// does not parse or gives another key, one already tuned meanwhile, and one the budget does not reach.
TEST(Retune, QueuedRowsItNeedNotOrCannotTune) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  Graph conv = small("conv_bias_relu"), norm = small("rms_norm"), attn = small("sdpa_fwd");
  StatusOr<GraphSignature> conv_sig = compute_signature(conv), norm_sig = compute_signature(norm);
  ASSERT_TRUE(conv_sig.is_ok() && norm_sig.is_ok());

  ASSERT_TRUE(queue_retune(*store, conv, other_env(), "store miss").is_ok());  // another environment
  ASSERT_TRUE(queue_retune(*store, norm, h200(), "store miss").is_ok());       // tuned meanwhile
  PlanRecord tuned = store_test::make_record(0);
  tuned.structure_sig = norm_sig->structure;
  tuned.shape_key = norm_sig->shape_key;
  ASSERT_TRUE(store->put(tuned).is_ok());
  RetuneRequest bad;  // a spec that does not parse
  bad.structure_sig = "badspec_0123456789abcdef";
  bad.fingerprint = h200();
  bad.graph_name = "broken";
  bad.spec_json = "{\"tensors\": ";
  bad.reason = "store miss";
  ASSERT_TRUE(store->enqueue_retune(bad).is_ok());
  RetuneRequest moved = bad;  // a spec of another graph than its key says
  moved.structure_sig = "moved_0123456789abcdef";
  moved.graph_name = "moved";
  moved.spec_json = *graph_to_spec_json(conv);
  ASSERT_TRUE(store->enqueue_retune(moved).is_ok());

  RetuneOptions o;
  o.current = h200();
  std::vector<std::string> seen;
  o.on_row = [&](const RetuneRowReport& r) { seen.push_back(r.entry.graph_name); };
  StatusOr<RetuneReport> rep = retune_queued(*store, o);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_EQ(rep->rows.size(), 4u);
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(rep->other_environment, 1);
  EXPECT_EQ(rep->already_tuned, 1);
  EXPECT_EQ(rep->failed, 2);
  EXPECT_EQ(rep->tuned, 0);
  for (const RetuneRowReport& r : rep->rows) {
    SCOPED_TRACE(r.entry.graph_name);
    if (r.entry.graph_name == "conv_bias_relu_small") {
      EXPECT_EQ(r.outcome, RetuneOutcome::kOtherEnvironment);
      EXPECT_NE(r.message.find("queued by NVIDIA H200, cuDNN 9.20.0"), std::string::npos) << r.message;
    } else if (r.entry.graph_name == "rms_norm_small") {
      EXPECT_EQ(r.outcome, RetuneOutcome::kAlreadyTuned);
      EXPECT_EQ(r.verdict, Disposition::kPassed);
    } else if (r.entry.graph_name == "broken") {
      EXPECT_EQ(r.outcome, RetuneOutcome::kFailed);
      EXPECT_NE(r.message.find("its spec does not parse: queued graph 'broken': malformed JSON"), std::string::npos)
          << r.message;
    } else {
      EXPECT_EQ(r.outcome, RetuneOutcome::kFailed);
      EXPECT_NE(r.message.find("not the queued moved_012345"), std::string::npos) << r.message;
    }
  }
  // Settled rows left the queue; failed ones and the other environment's stayed.
  StatusOr<std::vector<RetuneQueueEntry>> q = store->list_retune_queue();
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->size(), 3u);
  for (const auto& e : *q) EXPECT_NE(e.graph_name, "rms_norm_small");
  // The graph of the already-tuned row is kept beside its plan.
  EXPECT_TRUE(store->get_graph_spec(norm_sig->structure, norm_sig->shape_key)->has_value());

  // A budget already spent reaches nothing of this environment (the other environment's row is still
  // reported as such).
  ASSERT_TRUE(queue_retune(*store, attn, h200(), "store miss").is_ok());
  o.budget_s = 1e-9;
  rep = retune_queued(*store, o);
  ASSERT_TRUE(rep.is_ok());
  EXPECT_TRUE(rep->budget_exhausted);
  EXPECT_EQ(rep->other_environment, 1);
  EXPECT_EQ(rep->not_reached, 3);
  EXPECT_EQ(store->list_retune_queue()->size(), 4u);
}

TEST(Retune, NoGpuNoRetuneAndNoDeepVerifier) {
  // Decided by the driver, without asking CUDA for its devices (a host test does not touch a GPU); with a GPU
  // this is covered by runtime.gpu.Retune*.
  if (test::cuda_driver_installed()) GTEST_SKIP() << "a CUDA driver is installed (a host test does not touch a GPU)";
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  Status s = retune_queued(*store, RetuneOptions{}).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("re-tuning needs this machine's GPU, and there is none"), std::string::npos)
      << s.message();
  s = DeepPlanVerifier::create(GraphCatalog{}).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("deep verification runs each plan on this machine's GPU"), std::string::npos)
      << s.message();
}

TEST(GraphCatalog, SpecFilesServeEveryShapeOfTheirStructure) {
  GraphCatalog c;
  ASSERT_TRUE(c.add_spec_file(kRoot + "/examples/small/conv_bias_relu.json").is_ok());
  Graph g = small("conv_bias_relu");
  StatusOr<GraphSignature> sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  std::string source;
  const Graph* exact = c.find(sig->structure, "batch=2", &source);
  ASSERT_NE(exact, nullptr);
  EXPECT_NE(source.find("examples/small/conv_bias_relu.json"), std::string::npos) << source;
  const Graph* other = c.find(sig->structure, "batch=5", &source);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->dynamic_dims.at("batch"), 5);
  EXPECT_EQ(compute_signature(*other)->shape_key, "batch=5");
  EXPECT_NE(source.find("(with batch=5)"), std::string::npos) << source;
  EXPECT_EQ(c.find(sig->structure, "tokens=5"), nullptr);  // not a symbol of this graph
  EXPECT_EQ(c.find(sig->structure, "garbage"), nullptr);
  EXPECT_EQ(c.find("0123", "batch=2"), nullptr);
  Status bad = c.add_spec_file(kRoot + "/examples/small/nosuch.json");
  EXPECT_EQ(bad.code(), StatusCode::kNotFound);
  EXPECT_NE(bad.message().find("nosuch.json: cannot open spec file"), std::string::npos) << bad.message();
}

TEST(GraphCatalog, StoreGraphSpecsAndQueuedGraphs) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  Graph norm = small("layer_norm"), mm = small("matmul_bias_gelu");
  ASSERT_TRUE(remember_graph_spec(*store, norm).is_ok());
  ASSERT_TRUE(queue_retune(*store, mm, h200(), "store miss").is_ok());
  GraphCatalog c;
  ASSERT_TRUE(c.add_store(*store).is_ok());
  EXPECT_EQ(c.size(), 2u);
  StatusOr<GraphSignature> ns = compute_signature(norm), ms = compute_signature(mm);
  std::string source;
  ASSERT_NE(c.find(ns->structure, ns->shape_key, &source), nullptr);
  EXPECT_EQ(source, "store graph spec 'layer_norm_small'");
  ASSERT_NE(c.find(ms->structure, ms->shape_key, &source), nullptr);
  EXPECT_EQ(source, "re-tune queue graph 'matmul_bias_gelu_small'");
}

}  // namespace
}  // namespace kiln
