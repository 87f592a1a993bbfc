// The padded source (runtime/plan_sources.h PaddedSource): a larger tuned shape's plan on scratch copies
// (kiln/runtime/padding.h).
#include <algorithm>
#include <optional>

#include "kiln/runtime/reshape_graph.h"
#include "runtime/plan_sources.h"
#include "runtime/shadow_trial.h"
#include "runtime/shapes.h"
#include "runtime/stopgap_executors.h"

namespace kiln::runtime_detail {

StatusOr<bool> PaddedSource::serve(SourceRequest& r, Built* out) {
  const PlannerOptions& o = state_.options();
  if (!r.unbuilt() || !o.padded) return false;
  const auto& tuned = r.tuned();
  if (!tuned.is_ok()) {
    if (!o.split) r.why.push_back("tuned shapes: " + tuned.status().message());  // else the split source said so
    return false;
  }
  std::string why;
  std::shared_ptr<const ExecutablePlan> plan = padded_plan(r.pg, r.g, r.sig, r.shape, *tuned, &why);
  return r.serve_unbuilt(std::move(plan), PlanSource::kPadded, why, out);
}

std::shared_ptr<const ExecutablePlan> PaddedSource::padded_plan(const PreparedGraph& pg, const Graph& g,
                                                                const GraphSignature& sig,
                                                                const std::map<std::string, int64_t>& shape,
                                                                const std::vector<TunedShape>& tuned,
                                                                std::string* why) {
  // Every tuned shape at least as large, of the bucket or at most twice as large in every dim (a shape below
  // its bucket's smallest tuned one, batch 2 against a tuned 4), nearest first: the first that pads exactly.
  std::vector<std::pair<double, const TunedShape*>> covering;
  for (const TunedShape& t : tuned) {
    if (t.shape_key == sig.shape_key || t.shape.size() != shape.size()) continue;
    bool covers = true, within_twice = true;
    for (const auto& [sym, v] : shape) {
      auto it = t.shape.find(sym);
      covers = covers && it != t.shape.end() && it->second >= v;
      within_twice = within_twice && covers && it->second - v <= v;
    }
    if (covers && (within_twice || state_.options().buckets.same_bucket(t.shape, shape)))
      covering.emplace_back(shape_distance(t.shape, shape), &t);
  }
  std::sort(covering.begin(), covering.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->shape_key < b.second->shape_key;
  });
  if (covering.empty()) {
    *why = "padded: no tuned shape at least as large in bucket " + state_.options().buckets.bucket_key(shape) +
           ", nor one at most twice as large outside it";
    return nullptr;
  }
  const TunedShape* best = nullptr;
  std::shared_ptr<const ExecutablePlan> larger;  // the best one's plan, when held already
  std::optional<Graph> larger_g;                 // the best one's graph, reshaped, when its plan is not held
  std::optional<PaddingLayout> layout;
  std::string first_refusal;
  for (const auto& [d, t] : covering) {
    // A held plan carries its graph at that shape: read in place, no reshape and no copy for it.
    std::shared_ptr<const ExecutablePlan> held = state_.cache().find(PlanCache::key(pg, t->shape));
    std::optional<StatusOr<Graph>> reshaped;
    if (!held) reshaped.emplace(reshape_graph(*pg.graph, t->shape));
    StatusOr<PaddingLayout> pl = held                ? plan_padding(g, held->graph())
                                 : reshaped->is_ok() ? plan_padding(g, **reshaped)
                                                     : StatusOr<PaddingLayout>(reshaped->status());
    if (pl.is_ok()) {
      best = t;
      larger = std::move(held);
      if (reshaped) larger_g = std::move(**reshaped);
      layout = std::move(*pl);
      break;
    }
    if (first_refusal.empty()) first_refusal = t->shape_key + ": " + pl.status().message();
  }
  if (!best) {
    *why = "padded: " + first_refusal;
    return nullptr;
  }
  // The larger shape's plan: held already, or loaded from the store and held from now on.
  if (!larger) {
    std::string miss;
    larger = hold_stored(state_, PlanCache::key(pg, best->shape), *larger_g, &miss);
    if (!larger) {
      *why = "padded: the plan tuned for " + best->shape_key + " did not load: " + miss;
      return nullptr;
    }
  }
  larger = without_shadow(std::move(larger));  // run on padded scratch, it is never a shadow sample
  const int64_t workspace = static_cast<int64_t>(layout->scratch_bytes) + larger->workspace_bytes();
  *why = "padded: runs the plan tuned for " + best->shape_key + " on scratch (" + layout->text() + "), " +
         state_.stopgap_fate();
  EngineConfig config = larger->config();
  return std::make_shared<ExecutablePlan>(
      g, sig, std::move(config), workspace, PlanSource::kPadded,
      std::make_unique<PaddedExecutor>(larger, std::move(*layout), state_.backend().device_copy()));
}

bool PaddedSource::warm(const PreparedGraph& pg, const std::vector<TunedShape>& tuned, std::string* why) {
  std::vector<std::pair<double, const TunedShape*>> near;
  for (const TunedShape& t : tuned)
    if (t.shape.size() == pg.shape.size()) near.emplace_back(shape_distance(t.shape, pg.shape), &t);
  std::sort(near.begin(), near.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->shape_key < b.second->shape_key;
  });
  for (const auto& [d, t] : near) {
    std::map<std::string, int64_t> below = t->shape;
    bool smaller = false;
    for (auto& [sym, v] : below)
      if (v > 1) {
        --v;
        smaller = true;
      }
    if (!smaller) continue;  // one below is at most twice as large: padded_plan serves it from any bucket
    const std::string below_key = shape_key_text(below);
    if (std::any_of(tuned.begin(), tuned.end(), [&](const TunedShape& o) { return o.shape_key == below_key; }))
      continue;
    Graph g;
    GraphSignature sig;
    Status at = graph_at(pg, below, &g, &sig);
    if (!at.is_ok()) continue;  // e.g. a declared extent that does not fit that shape
    std::string miss;
    std::shared_ptr<const ExecutablePlan> padded = padded_plan(pg, g, sig, below, tuned, &miss);
    if (!padded) continue;
    Status w = state_.backend().warm_up(*padded);
    if (!w.is_ok()) {
      *why = below_key + ": " + w.message();
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace kiln::runtime_detail
