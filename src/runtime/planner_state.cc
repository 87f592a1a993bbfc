// What a Planner's sources share (runtime/planner_state.h).
#include "runtime/planner_state.h"

namespace kiln::runtime_detail {

PlannerState::PlannerState(std::unique_ptr<PlanBackend> backend, const PlannerOptions& options)
    : backend_(std::move(backend)), options_(options), first_use_(options.first_use, backend_.get()) {}

StatusOr<std::vector<TunedShape>> PlannerState::tuned_shapes(const GraphSignature& sig, bool refresh) {
  if (!refresh) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tuned_by_structure_.find(sig.structure);
    if (it != tuned_by_structure_.end()) return it->second;
  }
  const uint64_t gen = cache_.generation();
  KILN_ASSIGN_OR_RETURN(std::vector<TunedShape> t, backend_->tuned_shapes(sig));  // a failure is not kept
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.generation() == gen) tuned_by_structure_[sig.structure] = t;  // else read before a job's store
  return t;
}

void PlannerState::note_static_cost(const std::string& structure, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  BuildCosts& c = costs_[structure];
  c.static_ema_ms = c.static_builds++ == 0 ? ms : 0.5 * c.static_ema_ms + 0.5 * ms;
}

bool PlannerState::static_is_cheap(const std::string& structure) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = costs_.find(structure);
  return it != costs_.end() && it->second.static_ema_ms < kCheapStaticBuildMs;  // an entry has one build at least
}

void PlannerState::note_dynamic(const GraphSignature& sig, const std::string& graph_name) {
  std::lock_guard<std::mutex> lock(mu_);
  dynamic_structures_.emplace(sig.structure, std::make_pair(sig, graph_name));
}

std::map<std::string, std::pair<GraphSignature, std::string>> PlannerState::dynamic_structures() {
  std::lock_guard<std::mutex> lock(mu_);
  return dynamic_structures_;
}

bool PlannerState::known_fusable(const std::string& structure) {
  std::lock_guard<std::mutex> lock(mu_);
  return fusable_.count(structure) > 0;
}

void PlannerState::note_fusable(const std::string& structure) {
  std::lock_guard<std::mutex> lock(mu_);
  fusable_.insert(structure);
}

void PlannerState::forget(const GraphSignature& sig) { forget_structure(sig.structure); }

void PlannerState::forget_structure(const std::string& structure) {
  cache_.forget(structure);
  std::lock_guard<std::mutex> lock(mu_);
  if (structure.empty()) tuned_by_structure_.clear();
  else tuned_by_structure_.erase(structure);
}

const char* PlannerState::stopgap_fate() const {
  if (!options_.promote) return "kept: promotion is off";
  return options_.promote_by == PromoteBy::kTune ? "its own plan is being tuned" : "its own plan is being built";
}

}  // namespace kiln::runtime_detail
