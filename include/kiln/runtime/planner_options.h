// PlannerOptions: what a Planner does, in groups (the store, new shapes and their stopgaps, promotions,
// first use, the process), with presets for the three kinds of caller and one builder every call site uses:
//
//   PlannerOptions o = PlannerOptions::serving("plans.db").with_buckets(b);   // a service
//   PlannerOptions o = PlannerOptions::tools("plans.db").with_policy(p);      // kiln run, kiln replay
//   PlannerOptions o = PlannerOptions::offline("plans.db");                   // kiln tune, kiln plans retune
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/lower/lower.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/shadow_rule.h"
#include "kiln/store/env_policy.h"
#include "kiln/validate/numerics.h"

namespace kiln {

// What replaces a stopgap in the background.
enum class PromoteBy {
  // The bucket's tuned configuration (else heuristics), built statically for the shape: milliseconds, but
  // the representative's configuration is not always the best one at this shape.
  kBuild,
  // The shape tuned like `kiln tune` does (candidates checked against a reference, timed, the winner rule),
  // within PromotionTuning's bounds; where the tune finds no winner, the kBuild plan replaces the stopgap.
  kTune,
};

// What obtain() does for a shape the store does not hold, in a graph with dynamic dims.
enum class NewShapes {
  // Serve a stopgap at once and build the static plan (the bucket's tuned configuration, else heuristics)
  // on a background thread; it replaces the stopgap in the cache when ready (stats: stopgaps, promotions).
  // The stopgap is, in this order:
  //   split    where plans of smaller tuned shapes (equal in the other dims) sum to the shape's rows, or
  //            else cover them with overlapping parts (split_overlap), in at most split_max_parts parts, and
  //            the rows are independent (kiln/runtime/padding.h "Split stopgaps"): those plans, each on its
  //            own rows of the caller's buffers; no copies, no build;
  //   padded   where the bucket has a tuned shape at least as large (or another bucket one at most twice
  //            as large in every dim) and the graph's rows along the dim are independent
  //            (kiln/runtime/padding.h): the nearest such shape's plan on scratch copies, no build at all;
  //   dynamic  a dynamic-shape build with the structure's kernel cache (milliseconds after the first
  //            shape), except where the structure's static builds have proved cheap (under 5 ms: a
  //            precompiled engine): its new shapes are then built statically at once.
  kStopgap,
  // Build the static plan on the calling thread (the bucket's tuned configuration, else heuristics).
  kBuildNow,
};

// PlannerOptions::first_use.
enum class FirstUse { kVerify, kOff };

struct PlannerOptions {
  // --- The store, and what happens when it cannot serve a key. ---
  std::string store_path;  // "" : no store (bucket and store sources then have nothing)
  // A server store (postgresql://...): the local SQLite mirror that keeps what was read, so that a restart loads
  // from disk and obtain() goes on serving while the server is unreachable (docs/fleet.md "Local mirror").
  // "auto": default_mirror_path(store_path); "": none. Not used for a SQLite store.
  std::string store_mirror = "auto";
  // How often (seconds) the Planner asks its store which keys others changed (a server store's NOTIFY; a SQLite
  // store's plan_history rows: plans stored, promoted, rolled back or put in shadow by another process), and drops
  // what it holds for them so that the next obtain() reads the new plan, as a promotion swaps a plan in. 0: never.
  double store_watch_s = 1;
  // Which environment differences a stored record may have, and what obtain() does when the store cannot
  // serve this exact key (a stale, corrupt or unloadable record; at the graph's own dims, the shape its spec
  // declares and `kiln tune SPEC` tunes, also a plain miss: other shapes are the other sources' work, and the
  // recorder's):
  //   kHeuristicsAndQueue  the next sources serve, and the key is queued for re-tune in the store
  //                        (store_writable; a read-only store says "not queued for re-tune: ..." in why)
  //   kRetune              tuned now on the calling thread within `tuning`'s bounds (PlanSource::kTuned,
  //                        stored with store_writable); a tune without a winner falls through to the next
  //                        sources, with why
  //   kFail                a stale record fails obtain() (FailedPrecondition naming the fields); a miss
  //                        falls through
  EnvPolicy policy;
  // --- New shapes: buckets, stopgaps and their promotion. ---
  BucketPolicy buckets;       // per dynamic dim (exact by default)
  bool record_shapes = true;  // count served shapes (recorder())
  int handles = 4;            // cuDNN handles in the pool (execute() takes one per call)
  NewShapes new_shapes = NewShapes::kStopgap;
  bool promote = true;  // false: stopgaps are kept (to measure them; stats count them as held)
  PromoteBy promote_by = PromoteBy::kBuild;
  PromotionTuning tuning;  // with PromoteBy::kTune
  bool padded = true;      // false: no padded stopgaps (a new shape that no split serves gets a dynamic-shape build)
  // false: no split stopgaps (a new shape gets a padded one, else a dynamic-shape build). A split runs one plan
  // per part, so a sum needing more than split_max_parts (2..64) is padded instead.
  bool split = true;
  int split_max_parts = 3;
  // Where no sum of tuned shapes makes the shape, a split may still cover it with overlapping parts (batch 6 as
  // the tuned 4 on rows 0..3 and again on rows 2..5; kiln/runtime/padding.h cover_extents): no copies, a few rows
  // computed twice. Such a plan refuses an execute whose output shares memory with an input (InvalidArgument).
  // On by default; false (callers that run in place should set it): a shape that is no sum gets the next stopgap
  // (padded, else dynamic). No effect with split = false.
  bool split_overlap = true;
  // --- The process: handles, CUDA graphs, cuDNN priming, kept kernel caches. ---
  // Sequences of this Planner's plans (kiln/capture/capture.h) replay from CUDA graphs; false: they launch on the
  // stream, step by step (a CaptureOptions may override it per sequence).
  bool cuda_graphs = true;
  // create() starts paying cuDNN's once-per-process first-use work (kiln/runtime/cudnn_primer.h) on a thread of its
  // own, beside the CUDA context's creation, and returns without waiting for it; false: the first plan
  // pays it (to measure that).
  bool prime_cudnn = true;
  // Keep each structure's dynamic-shape kernel cache in the store and read it back (docs/runtime.md "Kernel
  // caches kept in the store"): written after a dynamic stopgap is promoted and at save_kernel_caches(),
  // through a writable connection (as a tuned promotion's store does); read when the structure's cache is
  // made. Off by default: on cuDNN 9.19 (H200, 2026-12-03) a kept cache did not shorten a new process's
  // first dynamic build.
  bool save_kernel_caches = false;
  // --- The store again: writable (jobs), and first-use verification. ---
  // The store is also opened for writing (and created when absent), after the device check: a Planner
  // that could not start leaves no store behind. Needed by the workshop's tune and retune_queued.
  bool store_writable = false;
  // First-use verification. kVerify (default): a plan whose configuration has not passed the numerics gate in
  // this environment at this shape is run once on generated inputs and checked against the device reference
  // before any caller gets it; one that fails is refused (CheckFailed, exit 1, naming the plan and the gate's
  // summary) and never served by this Planner again. Known to pass without a run: plans tuned now (kTuned),
  // store records tuned and verified (Passed) in this environment, the split and padded stopgaps (they run
  // admitted plans), and chains whose parts were each admitted. Cost: one execution, the device reference and one comparison per new (structure, shape,
  // configuration), about the cost of `kiln run --verify` (docs/runtime.md "First-use verification").
  // kOff: plans serve unverified, as before (benchmarks of build cost; a caller that verifies itself).
  FirstUse first_use = FirstUse::kVerify;
  // A stored plan that fails first-use verification is the store's active plan for its key: with this on (the
  // default), the Planner rolls the store back to the key's previous plan (PlanStore::rollback: the failing plan
  // rejected, with the gate's summary as the reason; docs/rollout.md), and serves that plan if it passes the gate in
  // turn. Needs a store the Planner may write; where it cannot, or there is no previous plan, the refusal stands
  // and the next sources serve as before.
  bool rollback_on_first_use_failure = true;
  // Shadow sampling (docs/rollout.md "Shadow sampling"): where the store holds a plan in shadow for a key this Planner
  // serves from the store, one request in shadow.sample_every also runs it on a side stream, on copies of the inputs,
  // and the Planner's judge thread compares its outputs with the active plan's and times both; by shadow.rule
  // (kiln/runtime/shadow_rule.h) it promotes the shadow plan or rejects it in the store (for every host sharing it:
  // the store is opened for writing when a verdict is recorded). The caller always gets the active plan's output.
  // sample_every 0: shadow plans are not run.
  ShadowSampling shadow;
  // The gate's options for that check (allow_tf32: fp32 outputs may come from TF32 tensor cores, as
  // `kiln run --allow-tf32` says; without it an fp32 plan that uses them is refused).
  CheckOptions first_use_check;
  // --- Deviceless compilation. ---
  // Deviceless: plans are compiled for this recorded device (compile()), on a machine that may have no
  // GPU; the environment is the profile's (fingerprint_for_profile), the store is opened for writing, and
  // obtain(), preload() and the workshop's tune() and retune_queued() are FailedPrecondition.
  std::optional<DeviceProfile> target;
  // --- Start: the graphs whose stored plans create() starts loading. ---
  // create() starts loading these graphs' stored plans (each tuned shape current in this environment, as
  // preload(prepare(g), preload_warm) does) on up to preload_threads threads of its own, and returns without waiting.
  // An obtain() of a shape being loaded waits for that load rather than loading it again; a shape that does not load
  // is obtained as if it had never been listed. With preload_warm each plan also runs once on scratch buffers before
  // any caller gets it, so that no caller's first execution pays its kernels' load. What a service lists: the graphs
  // it will serve (docs/runtime.md "Cold start"); wait_for_preload() says what was loaded. A graph that fails
  // validation fails create() (InvalidArgument naming it). Not with a deviceless target.
  std::vector<Graph> preload;
  bool preload_warm = true;
  int preload_threads = 4;  // 1..64

  // Presets. serving: a long-lived service, the defaults above (a read-only store, stopgaps promoted in the
  // background, first-use verification, cuDNN primed at create). offline: a job (kiln tune, compile, plans
  // retune): the store opened for writing (when a path is given), one handle, new shapes built at once on the
  // calling thread, no promotion, no shape recording, no priming. tools: a command that runs one graph and exits
  // (kiln run): offline, and no split or padded stopgap and no CUDA graphs either.
  static PlannerOptions serving(std::string store_path = "");
  static PlannerOptions tools(std::string store_path = "");
  static PlannerOptions offline(std::string store_path = "");

  // The builder: each sets one option (or one group) and returns the options, so a call site reads as one
  // expression from a preset.
  PlannerOptions& with_store(std::string path, bool writable);
  PlannerOptions& with_mirror(std::string path);  // store_mirror
  PlannerOptions& with_policy(const EnvPolicy& p);
  PlannerOptions& with_buckets(const BucketPolicy& b);
  PlannerOptions& with_new_shapes(NewShapes n);
  PlannerOptions& with_promotion(bool on, PromoteBy by = PromoteBy::kBuild);
  PlannerOptions& with_tuning(const PromotionTuning& t);
  PlannerOptions& with_first_use(FirstUse mode, const CheckOptions& check = {});
  PlannerOptions& with_stopgaps(bool split_on, bool padded_on, bool overlap = true, int max_parts = 3);
  // Keep kernel caches in the store: the store is then opened for writing too.
  PlannerOptions& with_kernel_caches(bool save);
  PlannerOptions& with_handles(int n);
  PlannerOptions& with_target(std::optional<DeviceProfile> profile);
  PlannerOptions& with_preload(std::vector<Graph> graphs, bool warm = true);
};

}  // namespace kiln
