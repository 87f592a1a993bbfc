// PlannerStats::text (kiln/runtime/planner_stats.h).
#include "kiln/runtime/planner_stats.h"

namespace kiln {

std::string PlannerStats::text() const {
  std::string s;
  for (int i = 0; i < kPlanSourceCount; ++i)
    s += std::string(i ? ", " : "") + plan_source_name(static_cast<PlanSource>(i)) + " " + std::to_string(served[i]);
  s += "; " + std::to_string(builds) + " built, " + std::to_string(failures) + " failed, " + std::to_string(cached) +
       " held; " + std::to_string(stopgaps) + " stopgaps, " + std::to_string(promotions) + " promoted";
  if (promotions_tuned) s += ", " + std::to_string(promotions_tuned) + " by tuning";
  if (!last_tune_fallback.empty()) s += " (a tune fell back to a build: " + last_tune_fallback + ")";
  if (!last_tune_note.empty()) s += " (the last tuned winner: " + last_tune_note + ")";
  if (promotion_failures)
    s += ", " + std::to_string(promotion_failures) + " promotions failed (last: " + last_promotion_failure + ")";
  if (first_use_checks) s += "; " + std::to_string(first_use_checks) + " checked before first use";
  if (first_use_refused)
    s += ", " + std::to_string(first_use_refused) + " refused (last failure: " + last_first_use_failure + ")";
  if (heuristic_fall_throughs)
    s += "; " + std::to_string(heuristic_fall_throughs) + " served by a later heuristic configuration";
  if (first_use_rollbacks)
    s += "; " + std::to_string(first_use_rollbacks) + " stored plan" + (first_use_rollbacks == 1 ? "" : "s") +
         " rolled back";
  if (shadow_trials > 0)
    s += "; shadow: " + std::to_string(shadow_trials) + " in trial, " + std::to_string(shadow_samples) + " samples (" +
         std::to_string(shadow_disagreements) + " disagreed), " + std::to_string(shadow_promotions) + " promoted, " +
         std::to_string(shadow_rejections) + " rejected" +
         (shadow_unrecorded ? ", " + std::to_string(shadow_unrecorded) + " verdicts not recorded" : "");
  if (kernel_caches_loaded + kernel_caches_saved > 0 || !last_kernel_cache_note.empty())
    s += "; kernel caches: " + std::to_string(kernel_caches_loaded) + " loaded, " +
         std::to_string(kernel_caches_saved) + " kept" +
         (last_kernel_cache_note.empty() ? "" : " (last problem: " + last_kernel_cache_note + ")");
  if (store_notices > 0)
    s += "; " + std::to_string(store_notices) + " plan" + (store_notices == 1 ? "" : "s") +
         " stored elsewhere swapped in (the store's notices)";
  if (!store_unreachable.empty() || store_mirror_hits > 0)
    s += "; store: " + std::to_string(store_mirror_hits) + " served from its local mirror" +
         (store_unreachable.empty() ? " (the server answers again)"
                                    : " (the server is unreachable: " + store_unreachable + ")");
  if (graph_captures + graph_replays + graph_stream_runs + graph_updates + graph_reinstantiations == 0) return s;
  auto n = [](int64_t v, const char* one, const char* many) { return std::to_string(v) + " " + (v == 1 ? one : many); };
  return s + "; graphs: " + n(graph_captures, "capture", "captures") + ", " +
         n(graph_instantiations, "instantiation", "instantiations") + ", " + n(graph_replays, "replay", "replays") +
         ", " + n(graph_stream_runs, "stream run", "stream runs") + ", " + n(graph_updates, "update", "updates") +
         ", " + std::to_string(graph_update_refusals) + " refused, " +
         n(graph_reinstantiations, "re-instantiation", "re-instantiations");
}

}  // namespace kiln
