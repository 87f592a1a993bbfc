// The heuristics source (runtime/plan_sources.h HeuristicsSource): cuDNN's heuristic choice, the chain's last
// step, and the fall-through to its next choices when the first fails first-use verification.
#include <algorithm>
#include <chrono>

#include "kiln/lower/lower.h"
#include "runtime/plan_sources.h"
#include "runtime/shapes.h"

namespace kiln::runtime_detail {

StatusOr<bool> HeuristicsSource::serve(SourceRequest& r, Built* out) {
  const auto t0 = std::chrono::steady_clock::now();
  auto built = state_.backend().build(r.g, r.sig, std::nullopt, PlanSource::kHeuristics);
  if (built.is_ok() && *built) state_.note_static_cost(r.sig.structure, ms_since(t0));
  if (!built.is_ok()) return built.status().with_context("graph '" + r.g.name + "' (" + r.joined() + "; heuristics)");
  if (!*built) return internal_error("graph '" + r.g.name + "': the backend returned no plan from heuristics");
  return r.serve(std::move(*built), PlanSource::kHeuristics, out);
}

Status HeuristicsSource::admit_or_next(PlannerState& state, Built* built, const std::string& graph_name) {
  FirstUseGate& gate = state.first_use();
  Status admitted = gate.admit(*built->plan, built->source, graph_name);
  if (!admitted.is_ok() && admitted.code() == StatusCode::kCheckFailed && built->source == PlanSource::kStore)
    return roll_back_refused_store_plan(state, built, admitted, graph_name);
  if (admitted.is_ok() || admitted.code() != StatusCode::kCheckFailed || built->source != PlanSource::kHeuristics)
    return admitted;
  const ExecutablePlan& failed = *built->plan;
  StatusOr<std::vector<EngineConfig>> configs = state.backend().heuristic_configs(failed.graph());
  if (!configs.is_ok() || configs->empty()) return admitted;
  int tried = 0;
  std::vector<std::string> passed_over = {failed.identity()};
  for (const EngineConfig& c : *configs) {
    if (tried == kFallThrough) break;
    if (std::find(passed_over.begin(), passed_over.end(), c.identity()) != passed_over.end()) continue;
    ++tried;
    passed_over.push_back(c.identity());
    auto next = state.backend().build(failed.graph(), failed.signature(), c, PlanSource::kHeuristics);
    if (!next.is_ok() || !*next) continue;  // not buildable on this device: the next one
    Status ok = gate.admit(**next, PlanSource::kHeuristics, graph_name);
    if (ok.is_ok()) {
      state.counters().heuristic_fall_throughs.fetch_add(1, std::memory_order_relaxed);
      built->why += std::string(built->why.empty() ? "" : "; ") + "heuristics' choice " + failed.identity() +
                    " failed first-use verification, " + c.identity() + " (their choice " +
                    std::to_string(passed_over.size()) + ") passed";
      built->plan = std::move(*next);
      return Status::ok();
    }
    if (ok.code() != StatusCode::kCheckFailed) return ok;  // an error, not a verdict
  }
  // fp32 GEMMs: on the H200 every configuration offered for some (GEMVs) computes in TF32 (about 1e-3 off).
  const bool fp32_gemm = wants_fp32_gemm_math(failed.graph());
  return Status(admitted.code(),
                admitted.message() + "; so did the next " + std::to_string(tried) +
                    " configurations cuDNN's heuristics offer, or they did not build" +
                    (fp32_gemm ? " (an fp32 matmul or convolution: where TF32 precision is acceptable, "
                                 "PlannerOptions::first_use_check.allow_tf32 or `kiln run --allow-tf32` accepts it)"
                               : ""));
}

}  // namespace kiln::runtime_detail
