// The store source (runtime/plan_sources.h StoreSource): the stored plan for exactly this key, or the unfused
// chain its fusion decision names.
#include "kiln/core/log.h"
#include "kiln/runtime/unfused_plan.h"
#include "runtime/plan_sources.h"
#include "runtime/shadow_trial.h"

namespace kiln::runtime_detail {
namespace {

// The decomposition of `g` (one of unfused_groupings: each node alone, or cut once) whose parts have the
// signatures decision `d` lists, in its order; NotFound with what differs where none has (the graph or Kiln changed).
StatusOr<std::vector<GraphPart>> decision_parts(const Graph& g, DataType dtype, const FusionRecord& d) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groupings, unfused_groupings(g));
  for (const std::vector<int>& groups : groupings) {
    auto parts = partition_graph(g, groups, dtype);
    if (!parts.is_ok() || parts->size() != d.parts.size()) continue;
    bool same = true;
    for (size_t i = 0; i < parts->size() && same; ++i) {
      auto psig = compute_signature((*parts)[i].graph);
      same = psig.is_ok() && psig->structure == d.parts[i].structure_sig && psig->shape_key == d.parts[i].shape_key;
    }
    if (same) return std::move(parts).value();
  }
  return not_found("no decomposition of the graph has the " + std::to_string(d.parts.size()) +
                   " parts the decision lists, by their signatures (the graph or Kiln changed)");
}

// The unfused chain of the parts' stored plans that decision `d` names; null with the reason in `refused`.
std::shared_ptr<const ExecutablePlan> unfused_from_store(PlannerState& state, const Graph& g, const GraphSignature& sig,
                                                         const FusionRecord& d, std::string* refused) {
  auto dtype = parse_dtype(d.materialized);
  if (!dtype.is_ok()) {
    *refused = "its intermediates' dtype '" + d.materialized + "' is unknown";
    return nullptr;
  }
  auto parts = decision_parts(g, *dtype, d);
  if (!parts.is_ok()) {
    *refused = parts.status().message();
    return nullptr;
  }
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  for (size_t i = 0; i < parts->size(); ++i) {
    const Graph& pg = (*parts)[i].graph;
    auto psig = compute_signature(pg);
    if (!psig.is_ok()) {
      *refused = psig.status().message();
      return nullptr;
    }
    std::string miss;
    auto plan = state.backend().from_store(pg, *psig, &miss);
    if (!plan.is_ok() || !*plan) {
      *refused = "part '" + pg.name +
                 "': " + (plan.is_ok() ? (miss.empty() ? std::string("no record") : miss) : plan.status().message());
      return nullptr;
    }
    // Each part passes the gate (first use) before the chain made of them may serve.
    if (Status admitted = state.first_use().admit(**plan, PlanSource::kStore, pg.name); !admitted.is_ok()) {
      *refused = "part '" + pg.name + "': " + admitted.message();
      return nullptr;
    }
    plans.push_back(std::move(*plan));
  }
  auto chain = make_unfused_plan(g, sig, *parts, std::move(plans), PlanSource::kStore);
  if (!chain.is_ok()) {
    *refused = chain.status().message();
    return nullptr;
  }
  return std::move(chain).value();
}

}  // namespace

StatusOr<std::shared_ptr<const ExecutablePlan>> plan_from_store(PlannerState& state, const Graph& g,
                                                                const GraphSignature& sig, std::string* why,
                                                                std::string* note) {
  // The fused record first: a decision is asked for only where the store answered (a hit, or a miss that may be
  // a chain's key whose fused graph had no correct plan), not after an error.
  auto fused = state.backend().from_store(g, sig, why);
  if (!fused.is_ok()) return fused;
  auto decision = state.backend().fusion_record(sig);
  std::string refused;
  if (!decision.is_ok()) {
    refused = "its fusion decision could not be read: " + decision.status().message();
  } else if (!*decision) {
    return fused;
  } else if (auto chain = unfused_from_store(state, g, sig, **decision, &refused)) {
    return chain;
  }
  const std::string line = "the store's unfused decision for graph '" + g.name + "' at " +
                           (sig.shape_key.empty() ? std::string("its shape") : sig.shape_key) + " was not served (" +
                           refused + ")";
  if (!*fused) {  // no fused plan either: a miss, with both reasons
    *why += (why->empty() ? "" : "; ") + line;
    return fused;
  }
  KILN_LOG(kWarn, line << ": the fused plan serves");
  if (note) *note = line + ": the fused plan serves";
  return fused;
}

std::shared_ptr<const ExecutablePlan> load_stored(PlannerState& state, const Graph& g, std::string* why) {
  auto sig = compute_signature(g);
  if (!sig.is_ok()) {
    *why = sig.status().message();
    return nullptr;
  }
  std::string miss;
  auto stored = plan_from_store(state, g, *sig, &miss);
  if (!stored.is_ok() || !*stored) {
    *why = stored.is_ok() ? (miss.empty() ? std::string("no record") : miss) : stored.status().message();
    return nullptr;
  }
  state.counters().builds.fetch_add(1, std::memory_order_relaxed);
  if (Status admitted = state.first_use().admit(**stored, PlanSource::kStore, g.name); !admitted.is_ok()) {
    *why = admitted.message();
    return nullptr;
  }
  Built built{std::move(*stored), PlanSource::kStore, ""};
  shadow_if_any(state, &built, g.name);
  return std::move(built.plan);
}

std::shared_ptr<const ExecutablePlan> hold_stored(PlannerState& state, const std::string& key, const Graph& g,
                                                  std::string* why, bool* inserted) {
  std::shared_ptr<const ExecutablePlan> plan = load_stored(state, g, why);
  if (!plan) return nullptr;
  return state.cache().hold(key, std::move(plan), PlanCache::kAnyGeneration, inserted);
}

StatusOr<bool> StoreSource::serve(SourceRequest& r, Built* out) {
  if (r.store_after_stopgaps() != after_stopgaps_) return false;  // the other store step asks it
  if (r.store_asked) {
    r.why.push_back("store: asked just before (no plan)");
    return false;
  }
  std::string miss, note;
  auto stored = plan_from_store(state_, r.g, r.sig, &miss, &note);
  if (stored.is_ok() && *stored) {
    if (!note.empty()) r.why.push_back("store: " + note);
    return r.serve(std::move(*stored), PlanSource::kStore, out);
  }
  if (stored.is_ok() && miss.empty()) miss = "no record";
  r.why.push_back("store: " + (stored.is_ok() ? miss : stored.status().message()));
  // kFail: the store refuses a stale record itself (PlanStore::get: FailedPrecondition naming the fields). It
  // holds for a promotion too: a padded stopgap's shape whose record is stale keeps its stopgap (the promotion
  // fails, saying why) rather than being replaced by a build.
  const PlannerOptions& o = state_.options();
  if (!stored.is_ok() && o.policy.on_mismatch == MismatchPolicy::kFail &&
      stored.status().code() == StatusCode::kFailedPrecondition)
    return stored.status().with_context("graph '" + r.g.name + "' (mismatch policy: fail)");
  // A store that could not be read is a miss; a promotion's miss was obtain()'s to act on.
  if (!stored.is_ok() || !r.allow_stopgap || o.store_path.empty()) return false;
  KILN_ASSIGN_OR_RETURN(Built tuned, tuned_.after_store_miss(r, miss));
  if (!tuned.plan) return false;
  return r.serve(std::move(tuned.plan), tuned.source, out);
}

}  // namespace kiln::runtime_detail
