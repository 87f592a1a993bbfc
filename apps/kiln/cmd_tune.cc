// kiln tune SPEC...: measure every engine configuration cuDNN offers, reject wrong ones, pick the winner,
// optionally store it. --list enumerates candidates without timing them; --pin builds exactly one.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tune_isolation.h"
#include "tune_report.h"
#include "kiln/advice.h"
#include "kiln/device_io.h"
#include "kiln/fingerprint.h"
#include "kiln/plan_bridge.h"
#include "kiln/plan_words.h"
#include "kiln/planner.h"
#include "kiln/shape_recorder.h"
#include "kiln/retune.h"
#include "kiln/segments.h"
#include "kiln/spec.h"
#include "kiln/tuner.h"
#include "kiln/unfused.h"

namespace kiln::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int sig) {
  g_interrupted = true;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C (or TERM) ends the process at once
}

struct TuneCliOptions {
  std::vector<std::string> specs;
  bool list = false, json = false, hot_cache = false, untuned_only = false, no_verify = false, use_store = false;
  bool no_unfused = false, no_isolate = false, graph_replay = false;
  std::string pin, store_path, objective = "time", fusion_policy = "faster", materialize, inputs_dir;
  std::string shapes_file, buckets;  // --shapes FILE [--hottest N] [--buckets POLICY]
  int hottest = 0;
  std::vector<std::string> exclude;
  int top_k = 0;
  int64_t max_workspace = -1;
  double budget_s = 0, candidate_budget_ms = 1000, target_noise = 0.005, workspace_tolerance = 0.05;
  uint64_t seed = 1;
};

// Each spec's graph with its advice; with --shapes (and not --list), each spec at its recorded shapes
// instead, hottest first, at most --hottest, one per bucket representative.
StatusOr<std::vector<std::pair<std::string, Graph>>> graphs_to_tune(const TuneCliOptions& o,
                                                                     const std::vector<RecordedShape>& recorded,
                                                                     const BucketPolicy& buckets) {
  const bool have_shapes = !o.shapes_file.empty();
  std::vector<std::pair<std::string, Graph>> out;
  for (const auto& spec : o.specs) {
    KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file(spec));
    for (const Advice& a : graph_advice(g)) std::fprintf(stderr, "%s: advice: %s\n", spec.c_str(), a.message.c_str());
    if (!have_shapes || o.list) {
      out.emplace_back(spec, std::move(g));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(g));
    auto picked = shapes_to_tune(recorded, sig.structure, buckets, o.hottest);
    if (!picked.is_ok()) return picked.status().with_context("--shapes " + o.shapes_file);
    const auto& chosen = *picked;
    if (chosen.empty()) {
      std::fprintf(stderr, "%s: no shape of its structure (%s) in %s: not tuned\n", spec.c_str(), sig.structure.c_str(),
                   o.shapes_file.c_str());
      continue;
    }
    for (const auto& shape : chosen) {
      auto at = reshape_graph(g, shape);
      if (!at.is_ok()) return at.status().with_context(spec + " at recorded shape " + shape_key_text(shape));
      std::fprintf(stderr, "%s: tuning recorded shape %s\n", spec.c_str(),
                   shape.empty() ? "(static)" : shape_key_text(shape).c_str());
      out.emplace_back(spec, std::move(at).value());
    }
  }
  if (have_shapes && !o.list && out.empty())
    return invalid_argument("--shapes " + o.shapes_file + ": no recorded shape has the structure of any spec given");
  return out;
}

Status tune_cmd(const TuneCliOptions& o) {
  // --shapes: the shapes a service recorded (kiln::Planner's recorder, docs/runtime.md), read and checked
  // before anything else (no store is created for a bad file, no GPU is touched); each spec is tuned at its
  // recorded shapes, the hottest first, instead of its own.
  const bool have_shapes = !o.shapes_file.empty();
  std::vector<RecordedShape> recorded;
  BucketPolicy buckets;
  if (have_shapes) {
    KILN_ASSIGN_OR_RETURN(recorded, read_shapes_file(o.shapes_file));
    auto b = BucketPolicy::parse(o.buckets);
    if (!b.is_ok()) return b.status().with_context("--buckets");
    buckets = *b;
  } else if (o.hottest > 0 || !o.buckets.empty()) {
    return invalid_argument("--hottest and --buckets choose among the shapes of --shapes FILE: give --shapes");
  }
  // Numbers that mean nothing are refused here, naming the flag (not later, as a stopping rule).
  if (!std::isfinite(o.budget_s) || o.budget_s < 0)
    return invalid_argument("--budget must be a number of seconds >= 0 (0: no budget), got " + std::to_string(o.budget_s));
  if (!std::isfinite(o.candidate_budget_ms) || o.candidate_budget_ms <= 0)
    return invalid_argument("--candidate-budget-ms must be a number of milliseconds > 0, got " +
                            std::to_string(o.candidate_budget_ms));
  if (!std::isfinite(o.target_noise) || o.target_noise < 0)
    return invalid_argument("--target-noise must be a number >= 0, got " + std::to_string(o.target_noise));
  if (!std::isfinite(o.workspace_tolerance) || o.workspace_tolerance < 0)
    return invalid_argument("--workspace-tolerance must be a number >= 0, got " + std::to_string(o.workspace_tolerance));
  if (o.top_k < 0) return invalid_argument("--top-k must be >= 0 (0: every candidate), got " + std::to_string(o.top_k));
  // The store is opened (and, when new, created) by the Planner, once every input is checked and the GPU
  // is there: a run refused for bad input or a missing GPU leaves no store behind.
  std::string store_path = o.use_store && o.store_path.empty() ? default_store_path() : o.store_path;
  if (store_path.empty() && o.untuned_only) return invalid_argument("--untuned needs --store");
  // Whatever exists at the path is checked now, before the GPU (a folder, a pipe or device, corrupt, newer,
  // not a store); a new store, or an empty file made one, is created by the Planner.
  struct stat st {};
  if (!store_path.empty() && ::stat(store_path.c_str(), &st) == 0 && !(S_ISREG(st.st_mode) && st.st_size == 0)) {
    StoreOpenOptions so;
    so.read_only = true;
    KILN_RETURN_IF_ERROR(PlanStore::open(store_path, so).status());
  }
  TuneJob job;
  TuneOptions& to = job.tune;
  if (!o.pin.empty()) { KILN_ASSIGN_OR_RETURN(to.pin, EngineConfig::parse(o.pin)); }
  to.top_k = o.top_k;
  to.max_workspace_bytes = o.max_workspace;
  to.exclude = o.exclude;
  to.measure.hot_cache = o.hot_cache;
  to.graph_replay = o.graph_replay;
  to.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  to.measure.stopping.target_rel_error = o.target_noise;
  KILN_ASSIGN_OR_RETURN(to.winner.objective, parse_objective(o.objective));
  to.winner.workspace_tolerance = o.workspace_tolerance;
  to.seed = o.seed;
  to.inputs_dir = o.inputs_dir;
  to.verify = !o.no_verify;
  to.cancel = &g_interrupted;
  KILN_ASSIGN_OR_RETURN(job.fusion_policy, parse_fusion_policy(o.fusion_policy));
  if (!o.materialize.empty()) {
    auto m = parse_dtype(o.materialize);
    if (!m.is_ok()) return m.status().with_context("--materialize");
    job.materialized = *m;
  }
  job.store = !store_path.empty();
  job.untuned_only = o.untuned_only;
  job.unfused = !o.no_unfused;
  // In a worker process by default: a candidate that crashes it is Failed, and the tune goes on.
  job.tuner = o.no_isolate ? tune_graph : tune_isolated;
  g_interrupted = false;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  // --budget bounds the whole command: every graph, its builds, inputs, reference and unfused alternative.
  const auto started = std::chrono::steady_clock::now();
  auto budget_left_s = [&] {
    return o.budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };

  KILN_ASSIGN_OR_RETURN(auto specs_read, graphs_to_tune(o, recorded, buckets));
  if (o.list) {
    for (auto& [spec, g] : specs_read) KILN_RETURN_IF_ERROR(list_candidates(g, o.json));
    return Status::ok();
  }
  // Recorded inputs are checked before the GPU is touched (bad input is exit 2, not a late failure).
  if (!o.inputs_dir.empty())
    for (auto& [spec, g] : specs_read) KILN_RETURN_IF_ERROR(check_graph_input_files(g, o.inputs_dir).with_context("--inputs"));
  // cuDNN on this GPU first (also the probe of fusability below): without one, its plain message.
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle probe, make_cudnn_handle());
  PlannerOptions po;
  po.store_path = store_path;
  po.store_writable = !store_path.empty();
  po.handles = 1;
  po.prime_cudnn = false;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(po));
  // What to tune: each spec's graph, or, when cuDNN cannot fuse it whole, each of its fused segments
  // (kiln/segments.h); `kiln run` finds the segments' plans in the store under their own signatures.
  std::vector<std::pair<std::string, Graph>> work;
  for (auto& [spec, g] : specs_read) {
    KILN_ASSIGN_OR_RETURN(SegmentDecision seg, segments_if_unfusable(g, probe.get()));
    if (seg.segments.empty()) {
      work.emplace_back(spec, std::move(g));
      continue;
    }
    std::fprintf(stderr, "%s: cannot be fused whole (%s); tuning its %zu fused segments, each stored under its own signature\n",
                 g.name.c_str(), seg.why.c_str(), seg.segments.size());
    for (GraphPart& p : seg.segments) work.emplace_back(spec, std::move(p.graph));
  }

  nlohmann::json all = nlohmann::json::array();
  Status overall;
  for (auto& [spec, g] : work) {
    if (o.budget_s > 0) {
      if (budget_left_s() <= 0) {
        std::fprintf(stderr, "tune %s: skipped, the time budget (%.1f s) is spent\n", g.name.c_str(), o.budget_s);
        overall = overall.is_ok() ? check_failed("time budget spent before '" + g.name + "' was tuned") : overall;
        continue;
      }
      to.time_budget_s = budget_left_s();
    }
    // Progress always goes to stderr (with --json too): a bar with the time left on a terminal, lines otherwise.
    ProgressReporter progress("tune " + g.name, 0, stderr);
    // Test hook KILN_TEST_TERM_AFTER=N: the process sends itself SIGTERM once N candidates are settled, so a
    // test interrupts a tune at a known point however fast the candidates are (tune_gpu_test's TuneCli).
    const char* term_after = std::getenv("KILN_TEST_TERM_AFTER");
    const size_t term_at = term_after ? static_cast<size_t>(std::strtoull(term_after, nullptr, 10)) : 0;
    to.progress = [&](size_t done, size_t total, const std::string& id) {
      progress.update(done, total, id);
      if (term_at > 0 && done == term_at) std::raise(SIGTERM);
    };
    const std::string name = g.name;
    job.on_note = [&](const std::string& note) { std::fprintf(stderr, "tune %s: %s\n", name.c_str(), note.c_str()); };
    KILN_ASSIGN_OR_RETURN(TunedGraph t, planner->tune_and_store(g, job));
    if (t.skipped) {
      std::printf("%s: already tuned in the store, skipped\n", g.name.c_str());
      continue;
    }
    const TuneResult& tr = t.result;
    progress.finish(tr.cancelled ? "interrupted" : tr.budget_exhausted ? "time budget reached" : "");
    print_tuned(spec, g, t, job, o.json, &all);
    if (t.kept) {
      for (const std::string& w : t.kept->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      const char* partial = t.kept->record.tuned ? "" : " (partial: marked untuned)";
      if (!o.json) std::printf("stored in %s%s\n", store_path.c_str(), partial);
      else if (!t.kept->record.tuned) std::fprintf(stderr, "tune %s: partial winner stored in %s, marked untuned\n", g.name.c_str(), store_path.c_str());
    }
    if (!tr.winner) {
      if (tr.cancelled) { overall = cancelled("interrupted: finished candidates were reported, none was correct"); break; }
      overall = check_failed("no correct candidate for '" + g.name + "'");
      continue;
    }
    if (tr.cancelled) { overall = cancelled("interrupted: finished candidates were reported"); break; }
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return overall;
}

void add_tune(CLI::App& app, Runner* run) {
  auto o = std::make_shared<TuneCliOptions>();
  CLI::App* sub = app.add_subcommand("tune", "Time every engine configuration, reject wrong ones, pick and store the winner");
  sub->add_option("specs", o->specs, "Spec JSON files")->required();
  sub->add_flag("--list", o->list, "List candidates (engine + knobs, modes, behaviour notes) without timing");
  sub->add_flag("--json", o->json, "Machine-readable report");
  sub->add_option("--pin", o->pin, "Build, check and time exactly this engine configuration (e.g. eng12_k2=1)");
  sub->add_option("--top-k", o->top_k, "Only the heuristic's first k configurations (quick tuning)");
  sub->add_option("--max-workspace", o->max_workspace, "Reject plans needing more workspace bytes");
  sub->add_option("--exclude", o->exclude, "Identities or engN prefixes to skip");
  sub->add_option("--budget", o->budget_s,
                  "Time budget for the whole run, seconds (0: none): builds, references and the unfused alternative "
                  "included; the best verified result within it is stored");
  sub->add_option("--candidate-budget-ms", o->candidate_budget_ms, "Sampling budget per candidate, ms")->capture_default_str();
  sub->add_option("--target-noise", o->target_noise, "Stop sampling at this relative standard error of the median")->capture_default_str();
  sub->add_flag("--hot-cache", o->hot_cache, "Do not flush L2 between samples (graphs that run back-to-back)");
  sub->add_flag("--graph-replay", o->graph_replay,
                "Time candidates replayed from a CUDA graph (default: stream launches); for plans an application "
                "replays (kiln/capture.h)");
  sub->add_option("--objective", o->objective, "time | workspace (smallest workspace within --workspace-tolerance of the best)")->capture_default_str();
  sub->add_option("--workspace-tolerance", o->workspace_tolerance, "Fraction of the best time allowed for --objective workspace")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the random inputs")->capture_default_str();
  sub->add_option("--inputs", o->inputs_dir,
                  "Recorded inputs to gate candidates on: DIR/<tensor>.bin for each graph input (as kiln run --inputs)");
  sub->add_flag("--no-unfused", o->no_unfused, "Do not time the unfused alternative (each node as its own best plan)");
  sub->add_flag("--no-isolate", o->no_isolate,
                "Tune in this process instead of a supervised worker (a crashing candidate then ends the run)");
  sub->add_option("--fusion-policy", o->fusion_policy, "faster | always_fused | always_unfused: which side the report chooses")->capture_default_str();
  sub->add_option("--materialize", o->materialize, "Dtype of intermediates between unfused parts (default: the graph's io dtype)");
  sub->add_flag("--no-verify", o->no_verify, "Skip the numerics gate (candidates become NotVerified)");
  sub->add_option("--store", o->store_path, "Plan store to write the winner to (and to read the incumbent from)");
  sub->add_flag("--use-store", o->use_store, "Use the default plan store ($KILN_STORE or ~/.cache/kiln/plans.db)");
  sub->add_option("--shapes", o->shapes_file,
                  "Tune each spec at the shapes a service recorded (kiln::Planner's recorder file), hottest first");
  sub->add_option("--hottest", o->hottest, "With --shapes: at most this many shapes per spec")->check(CLI::Range(1, 1000000));
  sub->add_option("--buckets", o->buckets,
                  "With --shapes: tune each recorded shape's bucket representative (e.g. 'batch=pow2;seq=ranges:1-64,65-512')");
  sub->add_flag("--untuned", o->untuned_only, "Only tune specs whose stored plan is untuned (e.g. from kiln compile)");
  sub->callback([run, o] { *run = [o] { return tune_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("tune", add_tune);

}  // namespace kiln::cli
