// The pinned source (runtime/plan_sources.h PinnedSource): exactly the configuration the caller named.
#include "runtime/plan_sources.h"
#include "runtime/shapes.h"

namespace kiln::runtime_detail {

StatusOr<Built> PinnedSource::build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                                    const EngineConfig& config) {
  Graph g;
  GraphSignature sig;
  KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
  Built out;
  KILN_ASSIGN_OR_RETURN(out.plan, catch_exceptions("building a pinned plan for graph '" + pg.graph->name + "'", [&] {
                          return state_.backend().build(g, sig, config, PlanSource::kPinned);
                        }));
  if (!out.plan)
    return internal_error("graph '" + pg.graph->name + "': the backend returned no plan for " + config.identity());
  out.source = PlanSource::kPinned;
  out.why = "pinned: " + config.identity() + " as asked (no store, no heuristics)";
  state_.counters().builds.fetch_add(1, std::memory_order_relaxed);
  KILN_RETURN_IF_ERROR(state_.first_use().admit(*out.plan, PlanSource::kPinned, pg.graph->name));
  return out;
}

}  // namespace kiln::runtime_detail
