// PlannerOptions' presets and builder (kiln/runtime/planner_options.h), and the check Planner::create makes.
#include "kiln/runtime/planner_options.h"

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
PlannerOptions& PlannerOptions::with_mirror(std::string path) {
  store_mirror = std::move(path);
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
PlannerOptions& PlannerOptions::with_stopgaps(bool split_on, bool padded_on, bool overlap, int max_parts) {
  split = split_on;
  padded = padded_on;
  split_overlap = overlap;
  split_max_parts = max_parts;
  return *this;
}
PlannerOptions& PlannerOptions::with_kernel_caches(bool save) {
  save_kernel_caches = save;
  store_writable = save;
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
PlannerOptions& PlannerOptions::with_preload(std::vector<Graph> graphs, bool warm) {
  preload = std::move(graphs);
  preload_warm = warm;
  return *this;
}

}  // namespace kiln
