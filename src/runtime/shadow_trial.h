// The Planner's shadow sampling (docs/rollout.md "Shadow sampling"): where the store holds a plan in shadow for a key
// the Planner serves from the store, the plan obtain() hands out runs the active plan on every request and, on one in
// ShadowSampling::sample_every (one at a time), copies the request's inputs and the active plan's outputs into the
// key's lane; on a side stream, the shadow plan runs on those inputs into scratch outputs, and so does the active plan
// again (its outputs unused), the two in alternating order, so that both times are taken alike (beside the same
// traffic on the caller's stream). The judge thread compares the shadow plan's outputs with those the caller got,
// applies the shadow rule (kiln/runtime/shadow_rule.h) to both times, and records the verdict in the store
// (PlanRollout::transition), for every host that shares it. The caller always gets the active plan's output.
// Private to the runtime layer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime/shadow_lane.h"
#include "kiln/runtime/shadow_rule.h"
#include "kiln/store/plan_lookup.h"
#include "runtime/planner_state.h"

namespace kiln::runtime_detail {

class ShadowJudge;

// A tensor the caller binds, where a sample keeps it: device copies (an input's, the active plan's output), the
// shadow plan's output, and both outputs read back to the host.
struct ShadowTensor {
  int index = -1;
  std::string name;
  size_t bytes = 0;
  bool output = false;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> dims, strides;
  size_t copy_at = 0, shadow_at = 0, timing_at = 0;  // offsets in the lane's device scratch (timing_at: the side
                                                     // stream's run of the active plan)
  size_t host_active = 0, host_shadow = 0;           // offsets in its host scratch (outputs)
};

// One key in shadow: its active and shadow plans, its lane and its samples.
class ShadowTrial : public std::enable_shared_from_this<ShadowTrial> {
 public:
  ShadowTrial(StoredPlanKey key, std::string graph_name, std::shared_ptr<const ExecutablePlan> active,
              std::shared_ptr<const ExecutablePlan> shadow, std::unique_ptr<ShadowLane> lane,
              std::vector<ShadowTensor> tensors, size_t workspace_at, const ShadowSampling& sampling,
              std::weak_ptr<ShadowJudge> judge);

  // A request (any thread): the active plan on the caller's pointers; on a sampled request, the shadow plan too.
  // The caller's result is the active plan's whatever happens to the sample; an error only when the active plan's.
  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace);

  // The judge thread: waits for the sample in the lane and compares it (false: a launch failure that may pass, the
  // sample dropped); adds it to the samples and decides.
  bool read_sample(ShadowSample* sample);
  ShadowDecision add(ShadowSample sample);
  void release() { busy_.store(false, std::memory_order_release); }  // the next sampled request may take the lane
  void finish() { done_.store(true, std::memory_order_release); }    // decided: nothing more is sampled

  const StoredPlanKey& key() const { return key_; }
  const std::string& graph_name() const { return graph_name_; }
  const std::shared_ptr<const ExecutablePlan>& active_plan() const { return active_; }
  const ExecutablePlan& shadow() const { return *shadow_; }
  // The plan that runs this trial (what the Planner's cache holds): compared, never used.
  void set_wrapper(const ExecutablePlan* wrapper) { wrapper_ = wrapper; }
  const ExecutablePlan* wrapper() const { return wrapper_; }

 private:
  bool claim(cudaStream_t stream);
  Status enqueue_shadow(cudaStream_t stream, const std::map<int, void*>& pointers, bool inputs_copied);
  Status run_on_side(bool active_outside);
  bool outputs_alias_inputs(const std::map<int, void*>& pointers) const;

  const StoredPlanKey key_;
  const std::string graph_name_;
  const std::shared_ptr<const ExecutablePlan> active_, shadow_;
  const std::unique_ptr<ShadowLane> lane_;
  const std::vector<ShadowTensor> tensors_;
  const size_t workspace_at_;
  const int sample_every_;
  const ShadowRule rule_;
  const std::weak_ptr<ShadowJudge> judge_;  // the Planner owns it; gone with the Planner
  const ExecutablePlan* wrapper_ = nullptr;
  std::atomic<uint64_t> calls_{0};
  std::atomic<bool> busy_{false}, done_{false};
  uint64_t sampled_ = 0;        // samples enqueued (ABBA and BAAB alternate with it)
  bool active_outside_ = true;  // the sample in the lane ran the active plan first and last (ABBA)
  std::string launch_error_;    // the shadow plan's launch error in the sample in the lane (judge reads after submit)
  int launch_failures_ = 0;     // in a row (the judge's)
  std::vector<ShadowSample> samples_;  // the judge's thread alone
};

// The thread that judges samples and records verdicts: one per Planner, started with its first sample, stopped
// (joined, later samples dropped) before the Planner's state goes.
class ShadowJudge {
 public:
  explicit ShadowJudge(PlannerState& state);
  ~ShadowJudge() { stop(); }
  // False when stopped: the trial keeps its lane busy, so that nothing more is sampled.
  bool submit(std::shared_ptr<ShadowTrial> trial);
  void stop();

 private:
  void loop();
  void judge(ShadowTrial& trial);
  void record(ShadowTrial& trial, const ShadowDecision& decision);

  PlannerState& state_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ShadowTrial>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// The active plan inside a plan that runs a shadow trial, or `plan` itself: what the padded and split stopgaps run
// (on scratch, or on rows of a larger call), never sampled.
std::shared_ptr<const ExecutablePlan> without_shadow(std::shared_ptr<const ExecutablePlan> plan);

// After `built` (a stored plan, admitted) was obtained: where the store holds a plan in shadow for its key and
// sampling is on, `built->plan` becomes the plan that runs it beside the active one, and `why` says so. Anything that
// keeps the shadow from running (it does not build here, no lane) is said in `why`; the active plan serves alone.
void shadow_if_any(PlannerState& state, Built* built, const std::string& graph_name);

}  // namespace kiln::runtime_detail
