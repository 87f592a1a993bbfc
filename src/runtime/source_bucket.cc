// The bucket source (runtime/plan_sources.h BucketSource): the nearest tuned shape's configuration, built for
// this shape.
#include <chrono>

#include "runtime/plan_sources.h"
#include "runtime/shapes.h"

namespace kiln::runtime_detail {

StatusOr<bool> BucketSource::serve(SourceRequest& r, Built* out) {
  if (r.shape.empty()) return false;
  const auto& tuned = r.tuned();
  if (!tuned.is_ok()) {
    r.why.push_back("bucket: " + tuned.status().message());
    return false;
  }
  const BucketPolicy& buckets = state_.options().buckets;
  const TunedShape* best = nullptr;
  double best_d = 0;
  for (const TunedShape& t : *tuned) {
    if (t.shape_key == r.sig.shape_key || !buckets.same_bucket(t.shape, r.shape)) continue;
    const double d = shape_distance(t.shape, r.shape);
    if (!best || d < best_d || (d == best_d && t.shape_key < best->shape_key)) {
      best = &t;
      best_d = d;
    }
  }
  if (!best) {
    r.why.push_back("bucket " + buckets.bucket_key(r.shape) + ": no tuned shape");
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto built = state_.backend().build(r.g, r.sig, best->config, PlanSource::kBucket);
  if (!built.is_ok() || !*built) {
    r.why.push_back("bucket: " + best->config.identity() + " (tuned for " + best->shape_key +
                    ") does not build here: " + (built.is_ok() ? std::string("no plan") : built.status().message()));
    return false;
  }
  state_.note_static_cost(r.sig.structure, ms_since(t0));
  r.why.push_back("bucket " + buckets.bucket_key(r.shape) + ": " + best->config.identity() + " tuned for " +
                  best->shape_key);
  return r.serve(std::move(*built), PlanSource::kBucket, out);
}

}  // namespace kiln::runtime_detail
