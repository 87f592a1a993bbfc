// The Planner's plan sources (kiln/runtime/source_chain.h): one small class per source, each answering one
// question for a request: can it serve this key, and at what cost? SourceChain walks them in kSourceChain's
// order. Private to the runtime layer; each source's code is in source_<name>.cc and its tests beside it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/planner_state.h"

namespace kiln::runtime_detail {

// A validated graph with its signature, computed once (Planner::prepare).
StatusOr<PreparedGraph> prepare_graph(const Graph& graph);

// One walk of the chain: a plan for `pg` at `shape`.
class SourceRequest {
 public:
  // allow_stopgap: a stopgap may serve (obtain()); false: static plans only (promotions, segments).
  // store_asked: the caller asked the store for this key just before (a tuned promotion's fallback).
  SourceRequest(PlannerState& state, const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                bool allow_stopgap, bool store_asked);
  // The graph at the shape and its signature; decides whether the store is asked after the stopgaps.
  Status init();

  const PreparedGraph& pg;
  const std::map<std::string, int64_t>& shape;
  Graph g;
  GraphSignature sig;
  const bool allow_stopgap;
  const bool store_asked;

  // A stopgap may serve: obtain() of a new shape under NewShapes::kStopgap.
  bool stopgap() const { return stopgap_; }
  // The stopgaps that need no build (split, padded) may serve.
  bool unbuilt() const { return unbuilt_; }
  // The store is asked after those stopgaps (SourceStep::kStoreAfterStopgaps), not before.
  bool store_after_stopgaps() const { return store_after_stopgaps_; }
  // The structure's tuned shapes, asked once per request.
  const StatusOr<std::vector<TunedShape>>& tuned();

  // Why each source asked did not serve (and notes of the one that did), in order.
  std::vector<std::string> why;
  std::string joined() const;
  // A plan served: `out` filled from it, its why the notes so far.
  bool serve(std::shared_ptr<const ExecutablePlan> plan, PlanSource source, Built* out) const;
  // A stopgap that needs no build (split, padded), or null: `why` (what it found) noted, and where the store is
  // asked after these stopgaps, that it was not asked first.
  bool serve_unbuilt(std::shared_ptr<const ExecutablePlan> plan, PlanSource source, const std::string& why, Built* out);

 private:
  PlannerState& state_;
  bool stopgap_ = false, unbuilt_ = false, store_after_stopgaps_ = false;
  std::optional<StatusOr<std::vector<TunedShape>>> tuned_;
};

class Source {
 public:
  explicit Source(PlannerState& state) : state_(state) {}
  virtual ~Source() = default;
  // True with `out` set when it serves `r`; false when it cannot (why in r.why, unless the step does not apply
  // to the request); an error ends the walk (obtain() returns it).
  virtual StatusOr<bool> serve(SourceRequest& r, Built* out) = 0;

 protected:
  PlannerState& state_;
};

// ---- the asked-for sources -----------------------------------------------------------------------

// kTuned: a key tuned now. After the store could not serve a key (`miss`: why), what the mismatch policy says
// (kRetune tunes on the calling thread; kHeuristicsAndQueue queues a re-tune in the store), and a promotion's
// tune under PromoteBy::kTune.
class TunedSource {
 public:
  explicit TunedSource(PlannerState& state) : state_(state) {}
  // A Built with a plan when the policy tuned one; notes go to r.why. At the graph's own dims (the shape its spec
  // declares, the one `kiln tune SPEC` tunes) a plain miss counts too; at another shape only a stale, corrupt or
  // unloadable record does (a new shape is the other sources' work).
  StatusOr<Built> after_store_miss(SourceRequest& r, const std::string& miss);
  // PromoteBy::kTune: the plan stored for exactly this key (another process may have tuned it), else this shape
  // tuned by the backend. A Built without a plan (the reason in `why`) where neither gave one.
  StatusOr<Built> tune_for(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, std::string* why);

 private:
  PlannerState& state_;
};

// kPinned: a plan built with exactly the configuration the caller named: no store, no stopgap, no heuristics.
class PinnedSource {
 public:
  explicit PinnedSource(PlannerState& state) : state_(state) {}
  StatusOr<Built> build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                        const EngineConfig& config);

 private:
  PlannerState& state_;
};

// ---- the sources in the order ------------------------------------------------------------------

class SourceChain;

// kSegments: a graph cuDNN cannot fuse whole (PlanBackend::segments), run as its segments, each obtained through
// the chain like a graph of its own (static sources only), as one chain (PlanSource::kSegments).
class SegmentsSource : public Source {
 public:
  SegmentsSource(PlannerState& state, SourceChain& chain) : Source(state), chain_(chain) {}
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;

 private:
  SourceChain& chain_;
};

// kStore: the stored plan for exactly this key, or the unfused chain of its parts' stored plans where the store
// holds a fusion decision for it; on a miss, the mismatch policy (TunedSource::after_store_miss). `after_stopgaps`:
// the step after the stopgaps (asked only where the request defers the store to it).
class StoreSource : public Source {
 public:
  StoreSource(PlannerState& state, TunedSource& tuned, bool after_stopgaps)
      : Source(state), tuned_(tuned), after_stopgaps_(after_stopgaps) {}
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;

 private:
  TunedSource& tuned_;
  const bool after_stopgaps_;
};

// The store's plan for exactly `g`'s key, as the backend loads it, or, where the store holds a fusion decision
// for the key (kiln/store/fusion_record.h), the unfused chain of the parts' stored plans (each admitted by the
// first-use gate). Null with `why` on a miss. When the decision could not be served (a part missing or stale, a
// signature that changed), the fused plan serves and `note` says why (also logged): an upgrade never silently
// changes what runs.
StatusOr<std::shared_ptr<const ExecutablePlan>> plan_from_store(PlannerState& state, const Graph& g,
                                                                const GraphSignature& sig, std::string* why,
                                                                std::string* note = nullptr);
// The stored plan for exactly `g`'s shape, loaded and admitted (with its shadow trial, if the store holds one), not
// held: null with the reason in `why`. What Planner::preload loads with (it warms the plan before holding it).
std::shared_ptr<const ExecutablePlan> load_stored(PlannerState& state, const Graph& g, std::string* why);
// load_stored, then held under `key`: the plan held (a concurrent obtain of that shape may have been first;
// `inserted` says whether this call's went in), or null with the reason in `why`. What the split and padded
// sources load tuned shapes with.
std::shared_ptr<const ExecutablePlan> hold_stored(PlannerState& state, const std::string& key, const Graph& g,
                                                  std::string* why, bool* inserted = nullptr);

// kSplit: plans of smaller tuned shapes whose rows sum to (or cover) this shape's, each on its own rows of the
// caller's buffers (kiln/runtime/padding.h "Split stopgaps").
class SplitSource : public Source {
 public:
  using Source::Source;
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;
  // The split plan for `r`, or null with the reason in `why`.
  std::shared_ptr<const ExecutablePlan> split_plan(SourceRequest& r, const std::vector<TunedShape>& tuned,
                                                   std::string* why);
};

// kPadded: the plan of a larger tuned shape (of the bucket, or at most twice as large) on scratch copies
// (kiln/runtime/padding.h).
class PaddedSource : public Source {
 public:
  using Source::Source;
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;
  std::shared_ptr<const ExecutablePlan> padded_plan(const PreparedGraph& pg, const Graph& g, const GraphSignature& sig,
                                                    const std::map<std::string, int64_t>& shape,
                                                    const std::vector<TunedShape>& tuned, std::string* why);
  // Planner::preload's warm-up of the padded path: a padded plan for a shape one below a tuned shape (the one
  // nearest the graph's own shape that has such a shape untuned) runs once on scratch buffers of its own, and is
  // not kept. False with the reason in `why` where it could not run; false and `why` empty where no tuned shape
  // has such a neighbour.
  bool warm(const PreparedGraph& pg, const std::vector<TunedShape>& tuned, std::string* why);
};

// kDynamic: a dynamic-shape build sharing the structure's kernel cache; its static plan is built in the
// background (promotion). Skipped where the structure's static builds have proved cheap.
class DynamicSource : public Source {
 public:
  using Source::Source;
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;
};

// kBucket: the nearest tuned shape of the structure in the same bucket, its configuration built for this shape.
class BucketSource : public Source {
 public:
  using Source::Source;
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;
};

// kHeuristics: cuDNN's heuristics; the last step, so its failure is the walk's error, with every source's why.
class HeuristicsSource : public Source {
 public:
  using Source::Source;
  StatusOr<bool> serve(SourceRequest& r, Built* out) override;
  // The first-use gate for a plan just built. A heuristic plan that fails it gives way to the next configurations
  // cuDNN's heuristics offer for its graph (at most kFallThrough of them, each built pinned and put through the
  // gate): `built` becomes the first that passes, its why saying what was passed over. The refusal stands, saying
  // how many were tried, when none passes.
  static constexpr int kFallThrough = 8;
  static Status admit_or_next(PlannerState& state, Built* built, const std::string& graph_name);
};

// A stored plan refused by the first-use gate (`refusal`) is its key's active plan in the store: with
// PlannerOptions::rollback_on_first_use_failure, the store is rolled back (the plan rejected, the key's previous plan
// active again: PlanStore::rollback, guarded by the refused plan's configuration) and the restored plan, read again
// and put through the gate, becomes `built`'s, its why saying so (runtime/first_use_rollback.cc). The refusal
// stands where the rollback cannot be made or the restored plan fails too.
Status roll_back_refused_store_plan(PlannerState& state, Built* built, const Status& refusal,
                                    const std::string& graph_name);

// The sources in kSourceChain's order (memory aside: the Planner looks in it before a walk).
class SourceChain {
 public:
  explicit SourceChain(PlannerState& state);
  // The first source that serves `pg` at `shape`.
  StatusOr<Built> build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, bool allow_stopgap,
                        bool store_asked = false);
  TunedSource& tuned() { return tuned_; }
  PinnedSource& pinned() { return pinned_; }
  PaddedSource& padded() { return *padded_; }

 private:
  PlannerState& state_;
  TunedSource tuned_;
  PinnedSource pinned_;
  PaddedSource* padded_ = nullptr;              // one of steps_
  std::vector<std::unique_ptr<Source>> steps_;  // kSourceChain's order, memory aside
};

}  // namespace kiln::runtime_detail
