// The check Planner::create makes of its options (runtime/planner_options_check.h).
#include "runtime/planner_options_check.h"

#include <cmath>
#include <string>

namespace kiln {

namespace runtime_detail {

Status check_planner_options(const PlannerOptions& options) {
  const PromotionTuning& t = options.tuning;
  if (t.top_k < 0) return invalid_argument("PromotionTuning::top_k must be >= 0, got " + std::to_string(t.top_k));
  if (!std::isfinite(t.time_budget_s) || t.time_budget_s < 0)
    return invalid_argument("PromotionTuning::time_budget_s must be finite and >= 0 (0: none)");
  if (!(t.gpu_share > 0 && t.gpu_share <= 1))
    return invalid_argument("PromotionTuning::gpu_share must be in (0, 1], got " + std::to_string(t.gpu_share));
  if (!std::isfinite(t.candidate_budget_ms) || t.candidate_budget_ms < 0)
    return invalid_argument("PromotionTuning::candidate_budget_ms must be finite and >= 0 (0: the tuner's own)");
  if (t.build_threads < 1)
    return invalid_argument("PromotionTuning::build_threads must be >= 1, got " + std::to_string(t.build_threads));
  if (options.split_max_parts < 2 || options.split_max_parts > 64)
    return invalid_argument("PlannerOptions::split_max_parts must be 2..64 (one part is the shape itself), got " +
                            std::to_string(options.split_max_parts));
  if (options.shadow.sample_every < 0)
    return invalid_argument("PlannerOptions::shadow.sample_every must be >= 0 (0: shadow plans are not run), got " +
                            std::to_string(options.shadow.sample_every));
  if (std::string bad = check_shadow_rule(options.shadow.rule); !bad.empty())
    return invalid_argument("PlannerOptions::shadow.rule: " + bad);
  if (options.promote_by == PromoteBy::kTune && t.store && options.store_path.empty())
    return invalid_argument("PromotionTuning::store needs a store: set PlannerOptions::store_path");
  if (options.preload_threads < 1 || options.preload_threads > 64)
    return invalid_argument("PlannerOptions::preload_threads must be 1..64, got " +
                            std::to_string(options.preload_threads));
  if (!options.preload.empty() && options.target)
    return invalid_argument("PlannerOptions::preload needs a device: a deviceless Planner (target " +
                            options.target->gpu_name + ") serves no plans to load");
  return Status::ok();
}

}  // namespace runtime_detail
}  // namespace kiln
