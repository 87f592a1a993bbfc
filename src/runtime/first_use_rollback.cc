// A stored plan that fails first-use verification rolls its store back (kiln/runtime/planner_options.h
// rollback_on_first_use_failure, docs/rollout.md "Automatic rollback"): the plan is its key's active plan, so the
// key's previous plan is restored for every host that shares the store, and this Planner serves it if it passes.
#include "kiln/core/engine_config.h"
#include "kiln/core/log.h"
#include "kiln/store/plan_store.h"
#include "runtime/plan_sources.h"

namespace kiln::runtime_detail {

Status roll_back_refused_store_plan(PlannerState& state, Built* built, const Status& refusal,
                                    const std::string& graph_name) {
  if (!state.options().rollback_on_first_use_failure) return refusal;
  const ExecutablePlan& failed = *built->plan;
  if (!failed.parts().empty()) return refusal;  // a stored unfused chain: its parts are their own keys
  StatusOr<EnvFingerprint> env = state.backend().environment();
  if (!env.is_ok()) return refusal;
  const StoredPlanKey key{failed.signature().structure, failed.signature().shape_key, fingerprint_key(*env)};
  const std::string config = failed.identity();
  std::string restored;
  Status rolled = state.backend().with_writable_store([&](PlanStore& store) -> Status {
    KILN_ASSIGN_OR_RETURN(PlanRecord back,
                          store.rollback(key, "first-use verification failed: " + refusal.message(), config));
    restored = plan_identity(back.engine_id, back.knobs);
    return Status::ok();
  });
  if (!rolled.is_ok()) {
    KILN_LOG(kWarn, "graph '" << graph_name << "': the store's plan " << config
                              << " failed first-use verification and was not rolled back: " << rolled.message());
    return refusal;
  }
  state.counters().first_use_rollbacks.fetch_add(1, std::memory_order_relaxed);
  KILN_LOG(kWarn, "graph '" << graph_name << "': the store's plan " << config
                            << " failed first-use verification: the store is rolled back to " << restored);
  std::string miss;
  StatusOr<std::shared_ptr<const ExecutablePlan>> again =
      plan_from_store(state, failed.graph(), failed.signature(), &miss);
  if (!again.is_ok()) return again.status();
  if (!*again) return refusal;
  KILN_RETURN_IF_ERROR(state.first_use().admit(**again, PlanSource::kStore, graph_name));
  built->why += std::string(built->why.empty() ? "" : "; ") + "store: its plan " + config +
                " failed first-use verification; the store was rolled back to " + (*again)->identity();
  built->plan = std::move(*again);
  return Status::ok();
}

}  // namespace kiln::runtime_detail
