// PlannerOptions' presets and builder (kiln/runtime/planner_options.h), and the check Planner::create makes.
#include "kiln/runtime/planner_options.h"

#include <cmath>

#include "runtime/planner_options_check.h"

namespace kiln {

PlannerOptions PlannerOptions::serving(std::string store_path) {
  PlannerOptions o;
  o.store_path = std::move(store_path);
  return o;
}

PlannerOptions PlannerOptions::tools(std::string store_path) {
  PlannerOptions o = offline(std::move(store_path));
  o.padded = false;
  o.split = false;
  o.cuda_graphs = false;
  return o;
}

PlannerOptions PlannerOptions::offline(std::string store_path) {
  PlannerOptions o = serving(std::move(store_path));
  o.store_writable = !o.store_path.empty();
  o.handles = 1;
  o.new_shapes = NewShapes::kBuildNow;
  o.promote = false;
  o.record_shapes = false;
  o.prime_cudnn = false;
  return o;
}

PlannerOptions& PlannerOptions::with_store(std::string path, bool writable) {
  store_path = std::move(path);
  store_writable = writable;
  return *this;
}
PlannerOptions& PlannerOptions::with_policy(const EnvPolicy& p) {
  policy = p;
  return *this;
}
PlannerOptions& PlannerOptions::with_buckets(const BucketPolicy& b) {
  buckets = b;
  return *this;
}
PlannerOptions& PlannerOptions::with_new_shapes(NewShapes n) {
  new_shapes = n;
  return *this;
}
PlannerOptions& PlannerOptions::with_promotion(bool on, PromoteBy by) {
  promote = on;
  promote_by = by;
  return *this;
}
PlannerOptions& PlannerOptions::with_tuning(const PromotionTuning& t) {
  tuning = t;
  return *this;
}
PlannerOptions& PlannerOptions::with_first_use(FirstUse mode, const CheckOptions& check) {
  first_use = mode;
  first_use_check = check;
  return *this;
}
PlannerOptions& PlannerOptions::with_handles(int n) {
  handles = n;
  return *this;
}
PlannerOptions& PlannerOptions::with_target(std::optional<DeviceProfile> profile) {
  target = std::move(profile);
  return *this;
}

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
  if (options.promote_by == PromoteBy::kTune && t.store && options.store_path.empty())
    return invalid_argument("PromotionTuning::store needs a store: set PlannerOptions::store_path");
  return Status::ok();
}

}  // namespace runtime_detail
}  // namespace kiln
