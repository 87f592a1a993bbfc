// What a Planner's sources share: the backend, the options, the first-use gate, the memory source, the tuned
// shapes read from the store, what static builds cost, and the counters. The Planner owns one; each source holds
// a reference. Private to the runtime layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/plan_types.h"
#include "kiln/runtime/planner_options.h"
#include "runtime/first_use.h"
#include "runtime/plan_cache.h"

namespace kiln::runtime_detail {

// obtain() calls answered by each source, builds, failures and what promotions did (PlannerStats).
struct PlannerCounters {
  std::atomic<int64_t> served[kPlanSourceCount] = {};
  std::atomic<int64_t> builds{0}, failures{0};
  std::atomic<int64_t> heuristic_fall_throughs{0};  // heuristic plans served in place of one that failed the gate
  std::atomic<int64_t> first_use_rollbacks{0};      // stored plans that failed it, the store rolled back
  std::atomic<int64_t> promotions{0}, promotions_tuned{0}, promotion_failures{0};
  std::atomic<int64_t> shadow_trials{0}, shadow_samples{0}, shadow_disagreements{0}, shadow_promotions{0},
      shadow_rejections{0}, shadow_unrecorded{0};
};

class ShadowJudge;

class PlannerState {
 public:
  PlannerState(std::unique_ptr<PlanBackend> backend, const PlannerOptions& options);

  PlanBackend& backend() { return *backend_; }
  const PlannerOptions& options() const { return options_; }
  FirstUseGate& first_use() { return first_use_; }
  PlanCache& cache() { return cache_; }
  PlannerCounters& counters() { return counters_; }
  // Set when the Planner is being destroyed: a tune in progress stops after its current candidate.
  std::atomic<bool>& cancel_tunes() { return cancel_tunes_; }

  // The tuned shapes of a structure, read from the store once (`refresh`: again): the split, padded and bucket
  // sources ask on every miss, and a store query per miss was most of a padded stopgap's cost. A shape tuned
  // by another process meanwhile is still found by its exact key (the store source). A failure is not kept.
  StatusOr<std::vector<TunedShape>> tuned_shapes(const GraphSignature& sig, bool refresh = false);

  // What static builds of a structure cost, to serve each new shape by the cheaper path: a stopgap pays off
  // where a static build is dear (a runtime-compiled engine: 30-50 ms on the H200); where static builds already
  // cost a few milliseconds (a precompiled engine), building at once gives the static plan as fast. Dynamic
  // builds are no guide: any of them may compile a new kernel into the cache (30-470 ms).
  static constexpr double kCheapStaticBuildMs = 5.0;
  void note_static_cost(const std::string& structure, double ms);
  bool static_is_cheap(const std::string& structure);

  // Structures a dynamic stopgap was built for (their kernel caches hold kernels): structure -> its signature
  // and a graph name, for Planner::save_kernel_caches().
  void note_dynamic(const GraphSignature& sig, const std::string& graph_name);
  std::map<std::string, std::pair<GraphSignature, std::string>> dynamic_structures();

  // Structures cuDNN fuses whole (PlanBackend::segments said so once): not asked again.
  bool known_fusable(const std::string& structure);
  void note_fusable(const std::string& structure);

  // After a job stored a plan for a structure: its plans and tuned shapes are dropped, so the next obtain() of
  // any of its shapes reads the store again.
  void forget(const GraphSignature& sig);
  // The same for a structure by its signature ("": every structure), for a store's change notice.
  void forget_structure(const std::string& structure);

  // What becomes of a stopgap served now, for its `why`: "its own plan is being built" (or tuned), or "kept:
  // promotion is off".
  const char* stopgap_fate() const;
  // The thread that judges shadow samples (runtime/shadow_trial.h): the Planner makes it, and stops it before this
  // state goes. Null in a state without a Planner (no shadow sampling then).
  void set_shadow_judge(std::shared_ptr<ShadowJudge> judge) { judge_ = std::move(judge); }
  const std::shared_ptr<ShadowJudge>& shadow_judge() const { return judge_; }

 private:
  struct BuildCosts {
    int static_builds = 0;
    double static_ema_ms = 0;
  };
  std::unique_ptr<PlanBackend> backend_;
  const PlannerOptions options_;
  FirstUseGate first_use_;
  PlanCache cache_;
  PlannerCounters counters_;
  std::atomic<bool> cancel_tunes_{false};
  std::mutex mu_;  // the maps below
  std::unordered_map<std::string, std::vector<TunedShape>> tuned_by_structure_;
  std::unordered_map<std::string, BuildCosts> costs_;
  std::map<std::string, std::pair<GraphSignature, std::string>> dynamic_structures_;
  std::set<std::string> fusable_;
  std::shared_ptr<ShadowJudge> judge_;  // set once, before any request
};

}  // namespace kiln::runtime_detail
