// The dynamic source (runtime/plan_sources.h DynamicSource): a dynamic-shape build, a stopgap.
#include "runtime/plan_sources.h"

namespace kiln::runtime_detail {

StatusOr<bool> DynamicSource::serve(SourceRequest& r, Built* out) {
  if (!r.stopgap()) return false;
  if (state_.static_is_cheap(r.sig.structure)) {
    r.why.push_back("dynamic: skipped, static builds of this structure take under 5 ms");
    return false;
  }
  auto dyn = state_.backend().build(r.g, r.sig, std::nullopt, PlanSource::kDynamic);
  if (!dyn.is_ok() || !*dyn) {
    r.why.push_back("dynamic: " + (dyn.is_ok() ? std::string("no plan") : dyn.status().message()));
    return false;
  }
  state_.note_dynamic(r.sig, r.g.name);
  r.why.push_back("dynamic: a stopgap, its static plan is being built");
  return r.serve(std::move(*dyn), PlanSource::kDynamic, out);
}

}  // namespace kiln::runtime_detail
