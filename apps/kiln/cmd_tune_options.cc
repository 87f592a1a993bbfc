// kiln tune's flags, their checks and the graphs they select (tune_cli.h); the command is cmd_tune.cc.
#include <cmath>
#include <cstdio>
#include <set>

#include "commands.h"
#include "kiln/graph/advice.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/tuner.h"
#include "tune_cli.h"
#include "tune_isolation.h"

namespace kiln::cli {

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

StatusOr<TuneJob> tune_job_from(const TuneCliOptions& o, const std::atomic<bool>* cancel) {
  // Numbers that mean nothing are refused here, naming the flag (not later, as a stopping rule).
  if (!std::isfinite(o.budget_s) || o.budget_s < 0)
    return invalid_argument("--budget must be a number of seconds >= 0 (0: no budget), got " +
                            std::to_string(o.budget_s));
  if (!std::isfinite(o.candidate_budget_ms) || o.candidate_budget_ms <= 0)
    return invalid_argument("--candidate-budget-ms must be a number of milliseconds > 0, got " +
                            std::to_string(o.candidate_budget_ms));
  if (!std::isfinite(o.target_noise) || o.target_noise < 0)
    return invalid_argument("--target-noise must be a number >= 0, got " + std::to_string(o.target_noise));
  if (!std::isfinite(o.workspace_tolerance) || o.workspace_tolerance < 0)
    return invalid_argument("--workspace-tolerance must be a number >= 0, got " +
                            std::to_string(o.workspace_tolerance));
  if (o.top_k < 0) return invalid_argument("--top-k must be >= 0 (0: every candidate), got " + std::to_string(o.top_k));
  TuneJob job;
  TuneOptions& to = job.tune;
  if (!o.pin.empty()) {
    KILN_ASSIGN_OR_RETURN(to.pin, EngineConfig::parse(o.pin));
  }
  to.top_k = o.top_k;
  to.budget.exhaustive = o.exhaustive;
  to.budget.first = o.compile_first;
  to.budget.patience = o.compile_patience;
  to.max_workspace_bytes = o.max_workspace;
  to.exclude = o.exclude;
  to.measure.hot_cache = o.hot_cache;
  to.measure.settle_us = o.settle_us;
  to.graph_replay = o.graph_replay;
  to.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  to.measure.stopping.target_rel_error = o.target_noise;
  KILN_ASSIGN_OR_RETURN(to.winner.objective, parse_objective(o.objective));
  to.winner.workspace_tolerance = o.workspace_tolerance;
  to.seed = o.seed;
  to.inputs_dir = o.inputs_dir;
  to.verify = !o.no_verify;
  to.cancel = cancel;
  KILN_ASSIGN_OR_RETURN(job.fusion_policy, parse_fusion_policy(o.fusion_policy));
  if (!o.materialize.empty()) {
    auto m = parse_dtype(o.materialize);
    if (!m.is_ok()) return m.status().with_context("--materialize");
    job.materialized = *m;
  }
  job.untuned_only = o.untuned_only;
  job.unfused = !o.no_unfused;
  auto rollout = parse_rollout_policy(o.rollout);
  if (!rollout.is_ok()) return rollout.status().with_context("--rollout");
  job.rollout = *rollout;
  // In a worker process by default: a candidate that crashes it is Failed, and the tune goes on.
  job.tuner = o.no_isolate ? tune_graph : tune_isolated;
  to.build_helpers = cli_build_helpers(o.build_helpers);
  return job;
}

namespace {

void add_tune(CLI::App& app, Runner* run) {
  auto o = std::make_shared<TuneCliOptions>();
  CLI::App* sub =
      app.add_subcommand("tune", "Time every engine configuration, reject wrong ones, pick and store the winner");
  sub->add_option("specs", o->specs, "Spec JSON files")->required();
  sub->add_flag("--list", o->list, "List candidates (engine + knobs, modes, behaviour notes) without timing");
  sub->add_flag("--json", o->json, "Machine-readable report");
  sub->add_option("--pin", o->pin, "Build, check and time exactly this engine configuration (e.g. eng12_k2=1)");
  sub->add_option("--top-k", o->top_k, "Only the heuristic's first k configurations (quick tuning)")
      ->check(whole_number_at_least(0));
  sub->add_flag(
      "--exhaustive", o->exhaustive,
      "Compile and time every runtime-compiled candidate (default: the candidate budget compiles them in rank "
      "order and stops when the last 2 timed did not beat the best by more than the noise; docs/measure.md)");
  sub->add_option(
         "--compile-first", o->compile_first,
         "The candidate budget: runtime-compiled candidates always compiled, in rank order, per build lane (the "
         "tune's process and each build helper)")
      ->check(whole_number_at_least(1))
      ->capture_default_str();
  sub->add_option("--compile-patience", o->compile_patience,
                  "The candidate budget: stop when none of the last N timed beat the best by more than the noise")
      ->check(whole_number_at_least(1))
      ->capture_default_str();
  add_build_helpers_flag(sub, &o->build_helpers);
  sub->add_option("--max-workspace", o->max_workspace, "Reject plans needing more workspace bytes")
      ->check(whole_number_at_least(0));
  sub->add_option(
      "--exclude", o->exclude,
      "Identities, engines (engN, bltN, knlN), blt (every cuBLASLt algorithm) or knl (every Kiln kernel) to skip");
  sub->add_option("--budget", o->budget_s,
                  "Time budget for the whole run, seconds (0: none): builds, references and the unfused alternative "
                  "included; the best verified result within it is stored")
      ->check(number_at_least(0));
  sub->add_option("--candidate-budget-ms", o->candidate_budget_ms, "Sampling budget per candidate, ms")
      ->check(positive_number())
      ->capture_default_str();
  sub->add_option("--target-noise", o->target_noise, "Stop sampling at this relative standard error of the median")
      ->check(number_at_least(0))
      ->capture_default_str();
  sub->add_flag("--hot-cache", o->hot_cache, "Do not flush L2 between samples (graphs that run back-to-back)");
  sub->add_option("--settle-us", o->settle_us,
                  "Idle time of the GPU after each L2 flush, before the sample starts (the flush's write-backs drain; "
                  "docs/measure.md)")
      ->check(CLI::Range(0.0, 1e5))
      ->capture_default_str();
  sub->add_flag("--graph-replay", o->graph_replay,
                "Time candidates replayed from a CUDA graph (default: stream launches); for plans an application "
                "replays (kiln/capture/capture.h)");
  sub->add_option("--objective", o->objective,
                  "time | workspace (smallest workspace within --workspace-tolerance of the best)")
      ->capture_default_str();
  sub->add_option("--workspace-tolerance", o->workspace_tolerance,
                  "Fraction of the best time allowed for --objective workspace")
      ->check(number_at_least(0))
      ->capture_default_str();
  add_seed_option(sub, &o->seed, "Seed of the random inputs");
  sub->add_option(
      "--inputs", o->inputs_dir,
      "Recorded inputs to gate candidates on: DIR/<tensor>.bin for each graph input (as kiln run --inputs)");
  sub->add_flag("--no-unfused", o->no_unfused,
                "Do not time the unfused alternatives (each node alone, and the graph cut once at each node)");
  sub->add_flag("--no-isolate", o->no_isolate,
                "Tune in this process instead of a supervised worker (a crashing candidate then ends the run)");
  sub->add_option("--fusion-policy", o->fusion_policy,
                  "faster | always_fused | always_unfused: which side the report chooses")
      ->capture_default_str();
  sub->add_option("--materialize", o->materialize,
                  "Dtype of intermediates between unfused parts (default: the graph's io dtype)");
  sub->add_flag("--no-verify", o->no_verify, "Skip the numerics gate (candidates become NotVerified)");
  sub->add_option("--store", o->store_path, "Plan store to write the winner to (and to read the incumbent from)")
      ->check(non_empty_path());
  sub->add_flag("--use-store", o->use_store, "Use the default plan store ($KILN_STORE or ~/.cache/kiln/plans.db)");
  sub->add_option("--shapes", o->shapes_file,
                  "Tune each spec at the shapes a service recorded (kiln::Planner's recorder file), hottest first");
  sub->add_option("--hottest", o->hottest, "With --shapes: at most this many shapes per spec")
      ->check(CLI::Range(1, 1000000));
  sub->add_option(
      "--buckets", o->buckets,
      "With --shapes: tune each recorded shape's bucket representative (e.g. 'batch=pow2;seq=ranges:1-64,65-512')");
  sub->add_flag("--untuned", o->untuned_only, "Only tune specs whose stored plan is untuned (e.g. from kiln compile)");
  sub->add_option("--rollout", o->rollout,
                  "How a winner replaces a stored plan of another configuration: immediate, verify (a candidate until "
                  "'kiln plans promote') or shadow (sampled beside it by serving Planners); docs/rollout.md")
      ->capture_default_str();
  sub->callback([run, o] { *run = [o] { return tune_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("tune", add_tune);

}  // namespace kiln::cli
