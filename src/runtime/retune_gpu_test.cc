// Device tier of the re-tune policies: a plan stored for another environment (a faked cuDNN version) is not
// run; the graph runs from heuristics and is queued; retune_queued tunes it for this environment; the store
// then serves it, and a deep verification of it passes. Also: kRetune tunes at once, a read-only store does
// not queue, and a plan the frontend refuses fails the deep check.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "gpu_test_util.h"
#include "kiln/core/exit_codes.h"
#include "kiln/lower/environment.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/workshop.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/runtime/retune.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/reference.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::TempDir;

const std::string kRoot = KILN_SOURCE_DIR;
const std::string kSpecName = "rms_norm";  // small and quick to tune

std::string spec_path() { return kRoot + "/examples/small/" + kSpecName + ".json"; }

bool contains(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "\n  " + s;
  return out;
}

// A heuristic plan of `g`, stored as if built under `fp`.
void put_heuristic_record(PlanStore& store, const Graph& g, const EnvFingerprint& fp) {
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  LowerTarget target;
  target.handle = handle->get();
  auto lg = LoweredGraph::create(g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  ASSERT_TRUE(lg->build_heuristic().is_ok());
  auto sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  auto rec = record_from_plan(*sig, fp, *lg);
  ASSERT_TRUE(rec.is_ok()) << rec.status().to_string();
  ASSERT_TRUE(store.put(*rec).is_ok());
}

TuneOptions quick_tune() {
  TuneOptions to;
  to.measure.stopping.time_budget_ms = 20;
  to.time_budget_s = 60;
  return to;
}

TEST(RetuneGpu, StaleRecordRunsHeuristicsQueuesThenRetunesAndDeepVerifies) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto g = parse_spec_file(spec_path());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok());
  EnvFingerprint env = collect_environment().fingerprint;
  EnvFingerprint old_env = env;
  old_env.cudnn_version = env.cudnn_version - 100;  // "built with another cuDNN"
  {
    auto store = PlanStore::open(path);
    ASSERT_TRUE(store.is_ok());
    put_heuristic_record(**store, *g, old_env);
  }

  // 1. The stale record is not run: heuristics, correct outputs, and a queued re-tune with the reason.
  RunOptions ro;
  ro.store_path = path;
  ro.verify = true;
  ro.policy.on_mismatch = MismatchPolicy::kHeuristicsAndQueue;
  auto run = run_graph(*g, ro);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run->plan_source, PlanSource::kHeuristics) << joined(run->reasons);
  EXPECT_TRUE(contains(run->reasons, "store: stale")) << joined(run->reasons);
  EXPECT_TRUE(contains(run->reasons, "cudnn_version: recorded")) << joined(run->reasons);
  EXPECT_TRUE(contains(run->reasons, "queued for re-tune (requested 1 time)")) << joined(run->reasons);
  ASSERT_TRUE(run->check.has_value());
  EXPECT_EQ(run->check->verdict, Disposition::kPassed) << run->check->summary();

  auto store_or = PlanStore::open(path);
  ASSERT_TRUE(store_or.is_ok());
  PlanStore& store = **store_or;
  auto queue = store.list_retune_queue();
  ASSERT_TRUE(queue.is_ok());
  ASSERT_EQ(queue->size(), 1u);
  const RetuneQueueEntry& row = (*queue)[0];
  EXPECT_EQ(row.structure_sig, sig->structure);
  EXPECT_EQ(row.shape_key, sig->shape_key);
  EXPECT_EQ(row.fingerprint_key, fingerprint_key(env));
  EXPECT_EQ(row.request_count, 1);
  ASSERT_EQ(row.reasons.size(), 1u);
  EXPECT_EQ(row.reasons[0].rfind("store stale: cudnn_version: recorded ", 0), 0u) << row.reasons[0];

  // A second run asks again: the same row, counted twice.
  run = run_graph(*g, ro);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_TRUE(contains(run->reasons, "queued for re-tune (requested 2 times)")) << joined(run->reasons);

  // 2. Drain the queue: tuned for this environment, stored, row gone.
  RetuneOptions opts;
  opts.tune = quick_tune();
  opts.budget_s = 120;
  auto rep = retune_queued(store, opts);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_EQ(rep->rows.size(), 1u);
  EXPECT_EQ(rep->rows[0].outcome, RetuneOutcome::kTuned) << rep->rows[0].message;
  EXPECT_EQ(rep->tuned, 1);
  std::printf("[ retune ] %s: %s %.4f ms %s (%.1f s)\n", kSpecName.c_str(), rep->rows[0].winner.c_str(),
              rep->rows[0].median_ms, disposition_name(rep->rows[0].verdict), rep->rows[0].seconds);
  EXPECT_TRUE(store.list_retune_queue()->empty());
  auto look = store.get(sig->structure, sig->shape_key, env);
  ASSERT_TRUE(look.is_ok()) << look.status().to_string();
  ASSERT_EQ(look->outcome, LookupOutcome::kHit);
  EXPECT_TRUE(look->record->tuned);
  EXPECT_EQ(look->record->fingerprint_key(), fingerprint_key(env));
  EXPECT_EQ(look->record->numerics.verdict, Disposition::kPassed);
  EXPECT_TRUE(store.get_graph_spec(sig->structure, sig->shape_key)->has_value());

  // 3. A Planner on the store now hits the tuned record.
  {
    PlannerOptions po;
    po.store_path = path;
    auto planner = Planner::create(po);
    ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
    auto op = (*planner)->obtain(*g);
    ASSERT_TRUE(op.is_ok()) << op.status().to_string();
    EXPECT_EQ(op->source, PlanSource::kStore) << op->why;
    EXPECT_EQ(op->plan->identity(), rep->rows[0].winner);
  }

  // 4. Deep verification of the store: the tuned plan passes on this GPU (its graph from the store's graph
  // specs), the stale one is not run here.
  GraphCatalog catalog;
  ASSERT_TRUE(catalog.add_store(store).is_ok());
  auto verifier = DeepPlanVerifier::create(std::move(catalog));
  ASSERT_TRUE(verifier.is_ok()) << verifier.status().to_string();
  VerifyOptions vo;
  vo.validator = (*verifier)->validator();
  auto vr = store.verify(vo);
  ASSERT_TRUE(vr.is_ok()) << vr.status().to_string();
  EXPECT_TRUE(vr->problems.empty()) << vr->problems[0].reason;
  ASSERT_EQ((*verifier)->rows().size(), 2u);
  int passed = 0, other_env = 0;
  for (const DeepVerifyRow& r : (*verifier)->rows()) {
    if (r.checked) {
      EXPECT_EQ(r.result.verdict, Disposition::kPassed) << r.result.message;
      EXPECT_EQ(r.fingerprint_key, fingerprint_key(env));
      EXPECT_EQ(r.result.reference_kind, ReferenceKind::kHost);
      std::printf("[ deep ] %s: %s %s\n", r.plan.c_str(), disposition_name(r.result.verdict), r.result.message.c_str());
      ++passed;
    } else {
      EXPECT_NE(r.reason.find("built for another environment: cudnn_version"), std::string::npos) << r.reason;
      ++other_env;
    }
  }
  EXPECT_EQ(passed, 1);
  EXPECT_EQ(other_env, 1);

  // 5. The same through the CLI (another process on the same file), with the graph from --spec and from
  // the store.
  auto cli = test::run_kiln("plans verify --deep --spec " + spec_path() + " --store " + path);
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("Passed  "), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("deep: 1 passed, 0 failed the check"), std::string::npos) << cli.output();
  cli = test::run_kiln("plans verify --deep --json --store " + path);
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("\"status\": \"Passed\""), std::string::npos) << cli.output();
}

// The CLI on a queue filled by `kiln run` (policy heuristics-and-queue, the default): `plans queue` lists the
// row, `plans retune` tunes it and empties the queue, and the next run is served by the store.
TEST(RetuneGpu, CliQueueAndRetune) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  std::string path = dir.file("plans.db");
  std::string spec = kRoot + "/examples/small/layer_norm.json";
  auto g = parse_spec_file(spec);
  ASSERT_TRUE(g.is_ok());
  RunOptions ro;
  ro.store_path = path;
  auto run = run_graph(*g, ro);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run->plan_source, PlanSource::kHeuristics);
  EXPECT_TRUE(contains(run->reasons, "store: miss")) << joined(run->reasons);
  EXPECT_TRUE(contains(run->reasons, "queued for re-tune")) << joined(run->reasons);

  auto cli = test::run_kiln("plans queue --store " + path);
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("layer_norm_small"), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("store miss"), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("1 queued re-tune in"), std::string::npos) << cli.output();
  cli = test::run_kiln("plans retune --candidate-budget-ms 20 --budget 120 --store " + path);
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("tuned  "), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("re-tuned 1 of 1 queued"), std::string::npos) << cli.output();
  std::printf("%s", cli.output().c_str());
  cli = test::run_kiln("plans queue --store " + path);
  EXPECT_NE(cli.output().find("0 queued re-tunes"), std::string::npos) << cli.output();
  cli = test::run_kiln("plans verify --deep --store " + path);  // the graph from the store's graph specs
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("deep: 1 passed"), std::string::npos) << cli.output();

  run = run_graph(*g, ro);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run->plan_source, PlanSource::kStore) << joined(run->reasons);
}

TEST(RetuneGpu, RetunePolicyTunesNowAndStores) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto g = parse_spec_file(spec_path());
  ASSERT_TRUE(g.is_ok());
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok());
  // kRetune through a Planner on a writable store: tuned now on the calling thread, stored, run.
  PlannerOptions po;
  po.store_path = path;
  po.store_writable = true;
  po.policy.on_mismatch = MismatchPolicy::kRetune;
  po.tuning.candidate_budget_ms = 20;
  po.tuning.time_budget_s = 30;
  po.tuning.store = true;
  po.prime_cudnn = false;
  po.new_shapes = NewShapes::kBuildNow;  // as kiln run: the spec's own shape, no stopgap
  auto planner = Planner::create(po);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto op = (*planner)->obtain(*g);
  ASSERT_TRUE(op.is_ok()) << op.status().to_string();
  EXPECT_EQ(op->source, PlanSource::kTuned) << op->why;
  EXPECT_NE(op->why.find("store: miss"), std::string::npos) << op->why;
  EXPECT_NE(op->why.find("re-tuned now: " + op->plan->identity()), std::string::npos) << op->why;
  EXPECT_NE(op->why.find("stored in " + path), std::string::npos) << op->why;
  auto store = PlanStore::open(path);
  ASSERT_TRUE(store.is_ok());
  EXPECT_TRUE((*store)->list_retune_queue()->empty());  // kRetune never queues

  // The tuned plan runs on the caller's buffers and is correct.
  auto inputs = make_random_inputs(*g, 5);
  ASSERT_TRUE(inputs.is_ok());
  auto buffers = allocate_graph_buffers(*g, *inputs, std::max<int64_t>(op->plan->workspace_bytes(), 16));
  ASSERT_TRUE(buffers.is_ok());
  TensorBindings bind;
  for (const auto& [t, ptr] : buffers->pointers()) bind[g->tensors[static_cast<size_t>(t)].name] = TensorBinding{ptr};
  Status ex = op->plan->execute(nullptr, bind, buffers->workspace.data());
  ASSERT_TRUE(ex.is_ok()) << ex.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto outs = download_outputs(*g, *buffers);
  auto ref = run_host_reference(*g, *inputs);
  ASSERT_TRUE(outs.is_ok() && ref.is_ok());
  auto check = check_outputs(*g, *outs, *ref);
  ASSERT_TRUE(check.is_ok());
  EXPECT_EQ(check->verdict, Disposition::kPassed) << check->summary();

  // A new Planner (a new process's) is served by the store.
  planner->reset();
  po.store_writable = false;
  auto again_planner = Planner::create(po);
  ASSERT_TRUE(again_planner.is_ok()) << again_planner.status().to_string();
  auto again = (*again_planner)->obtain(*g);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->source, PlanSource::kStore) << again->why;
  EXPECT_EQ(again->plan->config(), op->plan->config());
  EXPECT_TRUE((*store)->get_graph_spec(sig->structure, sig->shape_key)->has_value());
}

TEST(RetuneGpu, ReadOnlyStoreRunsHeuristicsWithoutQueueing) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  std::string path = dir.file("plans.db");
  { ASSERT_TRUE(PlanStore::open(path).is_ok()); }
  auto g = parse_spec_file(spec_path());
  ASSERT_TRUE(g.is_ok());
  PlannerOptions po;  // store_writable unset: the Planner's connection is read-only
  po.store_path = path;
  po.prime_cudnn = false;
  po.new_shapes = NewShapes::kBuildNow;  // as kiln run: the spec's own shape, no stopgap
  auto planner = Planner::create(po);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto op = (*planner)->obtain(*g);
  ASSERT_TRUE(op.is_ok()) << op.status().to_string();
  EXPECT_EQ(op->source, PlanSource::kHeuristics);
  EXPECT_NE(op->why.find("not queued for re-tune: plan store " + path + " was opened read-only"), std::string::npos)
      << op->why;
  auto rw = PlanStore::open(path);
  ASSERT_TRUE(rw.is_ok());
  EXPECT_TRUE((*rw)->list_retune_queue()->empty());

  // A pinned plan never asks the store, so it never queues either, even on a writable one.
  po.store_writable = true;
  auto writable = Planner::create(po);
  ASSERT_TRUE(writable.is_ok()) << writable.status().to_string();
  auto prepared = (*writable)->prepare(*g);
  ASSERT_TRUE(prepared.is_ok());
  auto pinned = (*writable)->obtain_pinned(*prepared, op->plan->config());
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().to_string();
  EXPECT_EQ(pinned->source, PlanSource::kPinned);
  EXPECT_EQ(pinned->plan->config(), op->plan->config());
  EXPECT_TRUE((*rw)->list_retune_queue()->empty());
}

TEST(RetuneGpu, DeepVerifyFailsAPlanTheFrontendRefuses) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto g = parse_spec_file(spec_path());
  ASSERT_TRUE(g.is_ok());
  EnvFingerprint env = collect_environment().fingerprint;
  {
    auto store = PlanStore::open(path);
    ASSERT_TRUE(store.is_ok());
    put_heuristic_record(**store, *g, env);
    auto sig = compute_signature(*g);
    auto rec = (*store)->read(sig->structure, sig->shape_key, fingerprint_key(env));
    ASSERT_TRUE(rec.is_ok());
    PlanRecord cut = *rec;
    cut.plan_bytes.resize(cut.plan_bytes.size() / 2);  // a sound record (checksum recomputed) of a broken plan
    ASSERT_TRUE((*store)->put(cut).is_ok());
  }
  auto cli = test::run_kiln("plans verify --deep --spec " + spec_path() + " --store " + path);
  EXPECT_EQ(cli.code, kExitCheckFailed) << cli.output();
  EXPECT_NE(cli.output().find("Failed  "), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("cuDNN Frontend refuses the plan"), std::string::npos) << cli.output();
  EXPECT_NE(cli.output().find("failed the deep check on this GPU"), std::string::npos) << cli.output();
  cli = test::run_kiln("plans verify --deep --quarantine --spec " + spec_path() + " --store " + path);
  EXPECT_EQ(cli.code, kExitCheckFailed) << cli.output();
  cli = test::run_kiln("plans verify --store " + path);
  EXPECT_EQ(cli.code, kExitOk) << cli.output();
  EXPECT_NE(cli.output().find("checked 0 plans"), std::string::npos) << cli.output();
}

}  // namespace
}  // namespace kiln
