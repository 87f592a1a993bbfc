// The tuned source (runtime/plan_sources.h TunedSource): a key tuned now, where the store's mismatch policy or a
// PromoteBy::kTune promotion asks for it.
#include "kiln/store/plan_store.h"
#include "runtime/plan_sources.h"
#include "runtime/shapes.h"

namespace kiln::runtime_detail {

StatusOr<Built> TunedSource::after_store_miss(SourceRequest& r, const std::string& miss) {
  Built none;
  const PlannerOptions& o = state_.options();
  const MismatchPolicy policy = o.policy.on_mismatch;
  // A shape other than the graph's own is the other sources' work (and the recorder's), not a mismatch.
  const bool own_shape = r.shape == r.pg.shape;
  const bool plain_miss = miss.rfind(lookup_outcome_name(LookupOutcome::kMiss), 0) == 0 || miss == "no record";
  if (!own_shape && plain_miss) return none;
  if (policy == MismatchPolicy::kHeuristicsAndQueue) {
    std::string note;
    state_.backend().queue_retune(r.g, r.sig, miss, &note);
    if (!note.empty()) r.why.push_back(note);
    return none;
  }
  if (policy != MismatchPolicy::kRetune) return none;
  PromotionTuning now = o.tuning;
  now.store = o.store_writable;
  std::string tw;
  StatusOr<std::shared_ptr<const ExecutablePlan>> tuned =
      state_.backend().tune(r.g, r.sig, now, &state_.cancel_tunes(), &tw);
  if (!tuned.is_ok() || !*tuned) {
    r.why.push_back("re-tune failed, the next sources serve: " + (tuned.is_ok() ? tw : tuned.status().message()));
    return none;
  }
  r.why.push_back("re-tuned now: " + (*tuned)->identity());
  if (!now.store) r.why.push_back("tuned plan not stored: the Planner's store is read-only (store_writable)");
  else if (!tw.empty()) r.why.push_back(tw);
  else r.why.push_back("stored in " + o.store_path);
  Built out;
  out.plan = std::move(*tuned);
  out.source = PlanSource::kTuned;
  return out;
}

StatusOr<Built> TunedSource::tune_for(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                                      std::string* why) {
  Graph g;
  GraphSignature sig;
  KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
  Built out;
  std::string miss;
  auto stored = plan_from_store(state_, g, sig, &miss);  // an error is a miss, as in the store source
  if (stored.is_ok() && *stored) {
    out.plan = std::move(*stored);
    out.source = PlanSource::kStore;
    return out;
  }
  KILN_ASSIGN_OR_RETURN(out.plan, state_.backend().tune(g, sig, state_.options().tuning, &state_.cancel_tunes(), why));
  out.source = PlanSource::kTuned;
  if (!out.plan && why->empty()) *why = "the tune gave no plan";
  return out;
}

}  // namespace kiln::runtime_detail
