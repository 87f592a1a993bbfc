// First-use verification (PlannerOptions::first_use): the Planner's gate between a plan made for a caller
// and the caller. Private to the runtime layer; the Planner owns one.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "kiln/runtime/planner_options.h"
#include "kiln/validate/numerics.h"

namespace kiln::runtime_detail {

// `plan` run once on its own device buffers, its inputs drawn on the device from `seed` as the tuner's are,
// its outputs poisoned first (so an output it never writes fails), then checked against the device
// reference through the numerics gate with `check` (kiln/validate/device_check.h): what `kiln run --verify`
// does, on buffers of its own. Needs the GPU; synchronizes the device once and its own stream.
StatusOr<CheckReport> check_plan_on_device(const ExecutablePlan& plan, const CheckOptions& check, uint64_t seed);

// What a first-use verdict is kept under: structure|shape key|the plan's identity (its configuration).
std::string first_use_key(const ExecutablePlan& plan);

class FirstUseGate {
 public:
  FirstUseGate(FirstUse mode, PlanBackend* backend) : mode_(mode), backend_(backend) {}

  // OK when `plan`, obtained from `source` for graph `graph_name`, may serve: it is known to pass (a tune
  // made it, or a split or padded stopgap runs tuned plans), or its verdict for (structure, shape,
  // configuration) is a pass, or it is checked now and passes. CheckFailed naming the plan, where it came
  // from and the gate's summary when it fails (now or before: a failed verdict is kept, and the plan is
  // never checked or served again by this gate). A backend error is returned as it is and not kept.
  Status admit(const ExecutablePlan& plan, PlanSource source, const std::string& graph_name);

  int64_t checks() const { return checks_.load(std::memory_order_relaxed); }
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  std::string last_failure() const;

 private:
  const FirstUse mode_;
  PlanBackend* const backend_;
  mutable std::mutex mu_;
  std::map<std::string, FirstUseVerdict> verdicts_;  // structure|shape key|identity -> verdict
  std::string last_failure_;                         // under mu_
  std::atomic<int64_t> checks_{0}, refused_{0};
};

}  // namespace kiln::runtime_detail
