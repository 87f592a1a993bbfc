// kiln::Planner: the runtime's one owner of plans (docs/runtime.md). A long-lived object that holds the
// environment fingerprint (collected once), the plan store, a pool of cuDNN handles and an in-memory cache
// keyed by structure signature and shape key, and answers "a plan for this graph at this shape" from the
// cheapest source that has one:
//   memory      a plan this Planner already holds (a lookup, no lock held across a build)
//   store       the stored plan for exactly this key, when the environment check passes
//   split       (a stopgap, NewShapes::kStopgap) plans of smaller tuned shapes whose rows sum to the shape's
//               (or cover it, a few rows computed twice), each on its own rows of the caller's buffers
//               (kiln/runtime/padding.h "Split stopgaps");
//   padded      (a stopgap) the plan of a larger tuned shape (of the same bucket, or at most twice as large), run on
//               scratch copies where that is exact (kiln/runtime/padding.h); dynamic: a dynamic-shape build. For a
//               shape the structure's tuned shapes do not list, padded goes before the store (whose miss
//               was most of its cost): the promotion asks the store first (docs/runtime.md "Sources").
//   bucket      the tuned engine configuration of the nearest tuned shape in the same bucket
//               (kiln/runtime/bucket_policy.h), built directly for this shape: no heuristics, no tuning
//   heuristics  cuDNN's heuristics
// Concurrent misses for one key build once (single flight); a failure is not cached. Every plan says
// which source served it. Plans execute on the caller's buffers, bound by tensor name and checked first.
//
//   PlannerOptions o; o.store_path = "plans.db";
//   KILN_ASSIGN_OR_RETURN(auto planner, Planner::create(o));
//   KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file("model/conv.json"));
//   KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner->prepare(g));      // validated, signature computed once
//   KILN_ASSIGN_OR_RETURN(Obtained p, planner->obtain(pg, {{"batch", 24}}));
//   KILN_RETURN_IF_ERROR(p.plan->execute(stream, {{"x", {x_ptr, x_bytes}}, {"w", {w_ptr}}, {"y", {y_ptr}}}));
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/plan_types.h"
#include "kiln/runtime/planner_options.h"
#include "kiln/runtime/planner_stats.h"
#include "kiln/runtime/reshape_graph.h"

namespace kiln {

// The Planner's jobs (kiln/runtime/workshop.h) and its recorder (kiln/runtime/shape_recorder.h): include those
// headers to use them.
class Workshop;
class ShapeRecorder;

class Planner {
 public:
  // Needs a GPU (unless options.target): collects the environment once, opens the store, creates the
  // handle pool. InvalidArgument
  // for options that cannot hold: PromotionTuning bounds out of range (a negative top_k, a budget that is
  // negative or not finite), PromotionTuning::store with PromoteBy::kTune and no store_path, or split_max_parts
  // outside 2..64.
  static StatusOr<std::unique_ptr<Planner>> create(const PlannerOptions& options);
  // With another backend (host tests, benchmarks).
  static std::unique_ptr<Planner> create_with_backend(std::unique_ptr<PlanBackend> backend,
                                                      const PlannerOptions& options);
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  // Validates a copy of `graph` and computes its signature.
  StatusOr<PreparedGraph> prepare(const Graph& graph) const;
  // A plan for `graph` at `shape` (dynamic symbol -> value; empty: the graph's own values). A shape
  // other than the graph's own re-derives every extent from the new values; InvalidArgument for an unknown
  // symbol, a missing one, or a value below 1.
  StatusOr<Obtained> obtain(const PreparedGraph& graph, const std::map<std::string, int64_t>& shape = {});
  // obtain()'s memory hit alone: the plan this Planner holds for `graph` at `shape` (counted and recorded as
  // obtain() counts a hit), or nothing when obtain() would have to look further (a miss, a bad shape, a deviceless
  // Planner). Never builds, reads the store or waits for another thread's build: a caller holding a lock of its
  // own (Python's GIL) tries this first and releases its lock only for obtain() (python/src/py_runner.cc).
  std::optional<Obtained> obtain_held(const PreparedGraph& graph, const std::map<std::string, int64_t>& shape = {});
  // A plan built with exactly `config` (kiln run --pin, a spec's "pin"): no store, no stopgap, no heuristics;
  // held under its own key, beside the graph's other plans (PlanSource::kPinned). The build's error,
  // in Kiln's words, when cuDNN cannot build that configuration for this graph.
  StatusOr<Obtained> obtain_pinned(const PreparedGraph& graph, const EngineConfig& config,
                                   const std::map<std::string, int64_t>& shape = {});
  // prepare() then obtain() (hashes the graph on every call: prefer prepare once).
  StatusOr<Obtained> obtain(const Graph& graph);

  // Loads every plan the store holds for this structure (each tuned shape current in this environment)
  // into memory, so that those shapes are hits and new shapes get split or padded stopgaps
  // without loading anything: what a service does at start, for the graphs it will serve. A shape
  // already held is not loaded again; a record that does not load is skipped and counted. With `warm`,
  // each plan loaded also runs once on scratch buffers of its own (PlanBackend::warm_up), so that no
  // caller pays its kernels' first load; the backend makes its handles (PlanBackend::warm_concurrency); and
  // where padded stopgaps serve, one padded plan runs once (PreloadReport::padded_warmed). It also reads the structure's tuned shapes again (the Planner
  // reads them from the store once per structure, for the padded and bucket sources).
  StatusOr<PreloadReport> preload(const PreparedGraph& graph, bool warm = false);
  // Waits until create()'s loads of PlannerOptions::preload have finished and says what they loaded (one report for
  // every listed graph); an empty report when none were listed. obtain() never needs it: a shape being loaded is
  // waited for. The store's error when its tuned shapes could not be read.
  StatusOr<PreloadReport> wait_for_preload() const;

  // The jobs (tune, compile, re-tune), sharing this Planner's backend (kiln/runtime/workshop.h).
  Workshop& workshop();

  // Waits until every queued promotion has finished (benchmarks, tests, or before a latency-critical
  // phase); returns at once when none is queued.
  void wait_for_promotions();
  // Keeps every structure's kernel cache that holds kernels the store lacks (PlannerOptions::save_kernel_caches:
  // FailedPrecondition without it); the first error, after trying every structure.
  Status save_kernel_caches();

  PlannerStats stats() const;
  const PlannerOptions& options() const;
  // The counters this Planner's captured sequences add to (kiln/capture/capture.h); never null.
  std::shared_ptr<GraphCounters> graph_counters() const;
  const ShapeRecorder& recorder() const;
  const BucketPolicy& buckets() const;

 private:
  struct Impl;
  explicit Planner(std::unique_ptr<Impl> impl);
  // create_with_backend with the graphs of PlannerOptions::preload prepared once by the caller (`bad`: the first that
  // would not prepare, reported by wait_for_preload()).
  static std::unique_ptr<Planner> assemble(std::unique_ptr<PlanBackend> backend, const PlannerOptions& options,
                                           std::vector<PreparedGraph> preload, Status bad);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
