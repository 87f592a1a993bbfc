// kiln replay TRACE: runs a trace of requests (graph, shape) through kiln::Planner with N threads and
// reports per source the calls served, the time to first execution and the execution time, with latency
// percentiles (kiln/tools/replay.h; docs/runtime.md "Replaying a trace").
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/tools/replay.h"

namespace kiln::cli {
namespace {

struct ReplayCliOptions {
  ReplayJob job;
  std::string new_shapes = new_shapes_name(ReplayJob{}.new_shapes),
              promote_by = promote_by_name(ReplayJob{}.promote_by);
  bool no_promote = false, no_padded = false, no_split = false, no_split_overlap = false, json = false;
};

Status replay_cmd(ReplayCliOptions& o) {
  KILN_ASSIGN_OR_RETURN(o.job.new_shapes, parse_new_shapes(o.new_shapes));
  KILN_ASSIGN_OR_RETURN(o.job.promote_by, parse_promote_by(o.promote_by));
  o.job.promote = !o.no_promote;
  o.job.padded = !o.no_padded;
  o.job.split = !o.no_split;
  o.job.split_overlap = !o.no_split_overlap;
  KILN_ASSIGN_OR_RETURN(ReplayReport rep, run_replay(o.job));
  if (o.json)
    std::printf("%s\n", replay_report_json(rep).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else std::fputs(replay_report_text(rep).c_str(), stdout);
  return Status::ok();
}

void add_replay(CLI::App& app, Runner* run) {
  auto o = std::make_shared<ReplayCliOptions>();
  ReplayJob& job = o->job;
  CLI::App* sub = app.add_subcommand("replay", "Run a trace of requests through kiln::Planner and report per source");
  sub->add_option("trace", job.trace, "Trace file (JSON: format kiln-trace, see docs/runtime.md)")->required();
  sub->add_option("--store", job.store_path,
                  "Plan store the Planner reads (and writes, created when absent, with --save-kernel-caches)")
      ->check(non_empty_path());
  sub->add_option("--buckets", job.buckets, "Bucket policy (e.g. 'batch=pow2;seq=ranges:1-64,65-512')");
  sub->add_option("--threads", job.threads, "Threads sending requests")->capture_default_str();
  sub->add_option("--handles", job.handles, "cuDNN handles in the Planner's pool")->capture_default_str();
  sub->add_option("--new-shapes", o->new_shapes,
                  "A shape the store lacks: 'stopgap' (a split, padded or dynamic-shape plan now, its static plan "
                  "in the background) or 'build-now' (the static plan on the calling thread)")
      ->capture_default_str();
  sub->add_option("--record-shapes", job.record_shapes, "Write the shapes served to this file (kiln stats reads it)")
      ->check(non_empty_path());
  sub->add_flag("--no-promote", o->no_promote, "Keep stopgaps (no background static builds): to measure them");
  sub->add_option("--promote-by", o->promote_by,
                  "What replaces a stopgap in the background: 'build' (the bucket's tuned configuration built for "
                  "the shape) or 'tune' (the shape tuned, bounded by --tune-top-k and --tune-budget)")
      ->capture_default_str();
  CLI::Option* top_k = sub->add_option("--tune-top-k", job.tuning.top_k,
                                       "With --promote-by tune: the heuristic's first K candidates (0: all)")
                           ->capture_default_str();
  CLI::Option* budget =
      sub->add_option("--tune-budget", job.tuning.time_budget_s, "With --promote-by tune: seconds per shape (0: none)")
          ->capture_default_str();
  CLI::Option* share =
      sub->add_option("--tune-gpu-share", job.tuning.gpu_share,
                      "With --promote-by tune: the share of the GPU's time a tune may take, in (0, 1] (it rests "
                      "after each candidate's device work)")
          ->capture_default_str();
  sub->add_flag("--no-padded", o->no_padded,
                "No padded stopgaps (a new shape no split serves gets a dynamic-shape build instead; with "
                "--no-split too, every new shape does): to compare them");
  sub->add_flag("--no-split", o->no_split,
                "No split stopgaps (a new shape that is a sum of tuned ones, run as their plans on its rows, is "
                "padded instead): to compare them");
  sub->add_flag("--no-split-overlap", o->no_split_overlap,
                "No overlapping split stopgaps (a shape that is no sum of tuned ones, covered by parts that share a "
                "few rows, is padded instead): to compare them, or for callers whose outputs share memory with "
                "their inputs");
  CLI::Option* max_parts =
      sub->add_option("--split-max-parts", job.split_max_parts,
                      "The most tuned plans a split stopgap runs, 2..64 (a sum needing more is padded)")
          ->capture_default_str();
  sub->add_flag("--preload", job.preload,
                "Before the first request, load every stored plan of each traced spec's structure (what a service "
                "does at start; timed apart). With --warm, one padded plan runs once too, so that the first padded "
                "request does not pay its copies' first use");
  sub->add_flag("--warm", job.warm, "With --preload: run each preloaded plan once, so no request pays its first load");
  sub->add_flag("--save-kernel-caches", job.save_kernel_caches,
                "Keep each structure's dynamic-shape kernel cache in the store (--store, opened for writing), so "
                "that the next process does not compile its kernels again");
  sub->add_flag("--force", job.overwrite, "Write over an existing --record-shapes file");
  sub->add_option(
         "--shadow-every", job.shadow_every,
         "Shadow sampling: one request in N also runs its key's plan in shadow, if the store holds one, and the "
         "verdicts go to the store (0: none; default: the Planner's, 100; docs/rollout.md)")
      ->check(whole_number_at_least(0));
  sub->add_flag("--json", o->json, "Machine-readable report");
  sub->callback([run, o, top_k, budget, share, max_parts] {
    o->job.tune_bounds_given = top_k->count() > 0 || budget->count() > 0 || share->count() > 0;
    o->job.split_max_parts_given = max_parts->count() > 0;
    *run = [o] { return replay_cmd(*o); };
  });
}

}  // namespace

KILN_REGISTER_COMMAND("replay", add_replay);

}  // namespace kiln::cli
