// Shadow sampling (runtime/shadow_trial.h): the trial a request runs through, the judge thread, and the wrapping of a
// stored plan whose key has a plan in shadow.
#include "runtime/shadow_trial.h"

#include <algorithm>
#include <utility>

#include "kiln/core/engine_config.h"
#include "kiln/core/log.h"
#include "kiln/store/plan_store.h"
#include "kiln/validate/host_tensor.h"
#include "runtime/bound_tensors.h"

namespace kiln::runtime_detail {
namespace {

constexpr size_t kShadowAlign = 256;
size_t aligned(size_t n) { return (n + kShadowAlign - 1) / kShadowAlign * kShadowAlign; }
// A shadow plan that fails to launch this many samples in a row is rejected; fewer are dropped (a launch can fail
// for a passing reason: out of memory, a capture in progress elsewhere).
constexpr int kLaunchFailuresToReject = 3;

// Runs every request through its trial.
class ShadowExecutor : public PlanExecutor {
 public:
  explicit ShadowExecutor(std::shared_ptr<ShadowTrial> trial) : trial_(std::move(trial)) {}
  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    return trial_->run(stream, pointers, workspace);
  }
  const ShadowTrial& trial() const { return *trial_; }

 private:
  std::shared_ptr<ShadowTrial> trial_;
};

}  // namespace

ShadowTrial::ShadowTrial(StoredPlanKey key, std::string graph_name, std::shared_ptr<const ExecutablePlan> active,
                         std::shared_ptr<const ExecutablePlan> shadow, std::unique_ptr<ShadowLane> lane,
                         std::vector<ShadowTensor> tensors, size_t workspace_at, const ShadowSampling& sampling,
                         std::weak_ptr<ShadowJudge> judge)
    : key_(std::move(key)),
      graph_name_(std::move(graph_name)),
      active_(std::move(active)),
      shadow_(std::move(shadow)),
      lane_(std::move(lane)),
      tensors_(std::move(tensors)),
      workspace_at_(workspace_at),
      sample_every_(std::max(1, sampling.sample_every)),
      rule_(sampling.rule),
      judge_(std::move(judge)) {}

bool ShadowTrial::claim(cudaStream_t stream) {
  if (done_.load(std::memory_order_acquire)) return false;
  // The sample_every-th request first (a preload's warm-up run is not a sample).
  if ((calls_.fetch_add(1, std::memory_order_relaxed) + 1) % static_cast<uint64_t>(sample_every_) != 0) return false;
  bool idle = false;
  if (!busy_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) return false;
  if (lane_->capturing(stream)) {  // a CUDA graph capture: the sample would join it
    release();
    return false;
  }
  return true;
}

// Whether an output the caller bound overlaps an input: the inputs must then be copied before the active plan
// writes over them.
bool ShadowTrial::outputs_alias_inputs(const std::map<int, void*>& pointers) const {
  for (const ShadowTensor& o : tensors_) {
    if (!o.output) continue;
    const char* ob = static_cast<const char*>(pointers.at(o.index));
    for (const ShadowTensor& i : tensors_) {
      if (i.output) continue;
      const char* ib = static_cast<const char*>(pointers.at(i.index));
      if (ob < ib + i.bytes && ib < ob + o.bytes) return true;
    }
  }
  return false;
}

Status ShadowTrial::run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) {
  if (!claim(stream)) return active_->run_unchecked(stream, pointers, workspace);
  for (const ShadowTensor& t : tensors_)
    if (!pointers.count(t.index) || !pointers.at(t.index)) {
      release();
      return active_->run_unchecked(stream, pointers, workspace);
    }
  char* dev = lane_->device();
  const bool copy_first = outputs_alias_inputs(pointers);
  Status pre = Status::ok();
  for (const ShadowTensor& t : tensors_)
    if (copy_first && !t.output && pre.is_ok())
      pre = lane_->copy(dev + t.copy_at, pointers.at(t.index), t.bytes, stream);
  Status ran = active_->run_unchecked(stream, pointers, workspace);
  if (!ran.is_ok()) {
    // Copies into the lane may still be pending on the caller's stream: the lane is not handed to another sample.
    if (copy_first) finish();
    else release();
    return ran;
  }
  Status side = pre.is_ok() ? enqueue_shadow(stream, pointers, copy_first) : pre;
  if (!side.is_ok()) {
    // The lane failed (not the shadow plan): nothing more is sampled by this Planner; the active plan serves.
    finish();
    KILN_LOG(kWarn, "graph '" << graph_name_ << "': shadow sampling of " << shadow_->identity()
                              << " stopped: " << side.message());
    return Status::ok();
  }
  bool submitted = false;
  if (std::shared_ptr<ShadowJudge> judge = judge_.lock()) {
    try {
      submitted = judge->submit(shared_from_this());
    } catch (const std::exception& e) {  // the judge's thread could not start
      KILN_LOG(kWarn, "graph '" << graph_name_ << "': shadow sampling stopped: " << e.what());
    }
  }
  if (!submitted) finish();  // the Planner is going: nothing more is sampled
  return Status::ok();
}

// On the caller's stream: the inputs (unless copied before the active plan ran) and the active plan's outputs into the
// lane; then the side stream takes over.
Status ShadowTrial::enqueue_shadow(cudaStream_t stream, const std::map<int, void*>& pointers, bool inputs_copied) {
  char* dev = lane_->device();
  for (const ShadowTensor& t : tensors_)
    if (t.output || !inputs_copied)
      KILN_RETURN_IF_ERROR(lane_->copy(dev + t.copy_at, pointers.at(t.index), t.bytes, stream));
  KILN_RETURN_IF_ERROR(lane_->fork(stream));
  return run_on_side(sampled_++ % 2 == 0);
}

// On the side stream, held until all is enqueued (ShadowLane::hold): both plans twice on the copied inputs, each run
// between its two marks (the active plan's outputs to timing scratch), in the order A B B A or B A A B (alternating
// with the samples); then the outputs to compare (the caller's, the shadow plan's) to the host.
Status ShadowTrial::run_on_side(bool active_outside) {
  char* dev = lane_->device();
  char* host = lane_->host();
  cudaStream_t side = lane_->side();
  std::map<int, void*> for_active, for_shadow;
  for (const ShadowTensor& t : tensors_) {
    for_active[t.index] = dev + (t.output ? t.timing_at : t.copy_at);
    for_shadow[t.index] = dev + (t.output ? t.shadow_at : t.copy_at);
  }
  void* ws = dev + workspace_at_;
  auto run = [&](bool active, int first_mark) -> Status {
    KILN_RETURN_IF_ERROR(lane_->mark(first_mark, side));
    if (active) {
      KILN_RETURN_IF_ERROR(active_->run_unchecked(side, for_active, active_->workspace_bytes() > 0 ? ws : nullptr));
    } else {
      Status launched = shadow_->run_unchecked(side, for_shadow, shadow_->workspace_bytes() > 0 ? ws : nullptr);
      if (!launched.is_ok()) launch_error_ = launched.message();
    }
    return lane_->mark(first_mark + 1, side);
  };
  launch_error_.clear();
  active_outside_ = active_outside;
  KILN_RETURN_IF_ERROR(lane_->hold());
  Status st = Status::ok();
  for (int i = 0; i < 4 && st.is_ok(); ++i) {
    const bool outside = i == 0 || i == 3;  // runs 0 and 3 are the outer pair, 1 and 2 the inner one
    st = run(outside == active_outside, 2 * i);
  }
  lane_->release();  // on every path: a held stream would wait out the hold's timeout
  KILN_RETURN_IF_ERROR(st);
  for (const ShadowTensor& t : tensors_) {
    if (!t.output) continue;
    KILN_RETURN_IF_ERROR(lane_->copy(host + t.host_active, dev + t.copy_at, t.bytes, side));
    KILN_RETURN_IF_ERROR(lane_->copy(host + t.host_shadow, dev + t.shadow_at, t.bytes, side));
  }
  return Status::ok();
}

bool ShadowTrial::read_sample(ShadowSample* sample) {
  ShadowSample& s = *sample;
  s.shape_key = key_.shape_key;
  Status waited = lane_->wait();
  if (!waited.is_ok()) {  // an error on the side stream after launch: the shadow plan faulted
    s.agreed = false;
    s.disagreement = "the shadow plan failed on the device: " + waited.message();
    return true;
  }
  if (!launch_error_.empty()) {
    if (++launch_failures_ < kLaunchFailuresToReject) {
      KILN_LOG(kWarn, "graph '" << graph_name_ << "': a shadow sample of " << shadow_->identity()
                                << " was dropped: it did not launch (" << launch_error_ << ")");
      return false;
    }
    s.agreed = false;
    s.disagreement =
        "the shadow plan failed to run " + std::to_string(launch_failures_) + " times in a row: " + launch_error_;
    return true;
  }
  launch_failures_ = 0;
  // Each plan's time: the mean of its two runs (the outer pair's marks 0-1 and 6-7, the inner pair's 2-3 and 4-5).
  auto pair_ms = [&](bool outer) {
    StatusOr<double> x = outer ? lane_->elapsed_ms(0, 1) : lane_->elapsed_ms(2, 3);
    StatusOr<double> y = outer ? lane_->elapsed_ms(6, 7) : lane_->elapsed_ms(4, 5);
    return x.is_ok() && y.is_ok() ? (*x + *y) / 2 : 0.0;
  };
  s.active_ms = pair_ms(active_outside_);
  s.candidate_ms = pair_ms(!active_outside_);
  const char* host = lane_->host();
  for (const ShadowTensor& t : tensors_) {
    if (!t.output) continue;
    StatusOr<HostTensor> av = HostTensor::decode(t.dtype, t.dims, host + t.host_active, t.bytes, t.strides);
    StatusOr<HostTensor> cv = HostTensor::decode(t.dtype, t.dims, host + t.host_shadow, t.bytes, t.strides);
    if (!av.is_ok() || !cv.is_ok()) {
      s.agreed = false;
      s.disagreement = "tensor '" + t.name + "' could not be read: " + (av.is_ok() ? cv : av).status().message();
      return true;
    }
    ShadowComparison cmp = compare_shadow_outputs(*av, *cv);
    if (!cmp.agreed) {
      s.agreed = false;
      s.disagreement = "tensor '" + t.name + "': " + cmp.summary;
      return true;
    }
  }
  return true;
}

ShadowDecision ShadowTrial::add(ShadowSample sample) {  // the judge's thread alone
  samples_.push_back(std::move(sample));
  return decide_shadow(samples_, rule_);
}

ShadowJudge::ShadowJudge(PlannerState& state) : state_(state) {}

bool ShadowJudge::submit(std::shared_ptr<ShadowTrial> trial) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(trial));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });  // the Planner's first sample
  }
  cv_.notify_one();
  return true;
}

void ShadowJudge::stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const std::shared_ptr<ShadowTrial>& t : queue_) t->finish();
    queue_.clear();
    thread = std::move(thread_);  // joined once, by whoever stops first
  }
  cv_.notify_all();
  if (thread.joinable()) {
    // The judge's own thread never stops it (it holds no reference to the judge: trials hold weak ones, the Planner's
    // state the one strong one); detached rather than left joinable should that ever change.
    if (thread.get_id() == std::this_thread::get_id()) thread.detach();
    else thread.join();
  }
}

void ShadowJudge::loop() {
  for (;;) {
    std::shared_ptr<ShadowTrial> trial;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      trial = std::move(queue_.front());
      queue_.pop_front();
    }
    judge(*trial);
  }
}

void ShadowJudge::judge(ShadowTrial& trial) {
  try {
    ShadowSample sample;
    if (!trial.read_sample(&sample)) {
      trial.release();
      return;
    }
    state_.counters().shadow_samples.fetch_add(1, std::memory_order_relaxed);
    if (!sample.agreed) state_.counters().shadow_disagreements.fetch_add(1, std::memory_order_relaxed);
    ShadowDecision d = trial.add(std::move(sample));
    if (d.verdict == ShadowVerdict::kContinue) {
      trial.release();
      return;
    }
    trial.finish();
    record(trial, d);
  } catch (const std::exception& e) {  // out of memory while comparing, say: this trial ends, undecided
    trial.finish();
    KILN_LOG(kError, "graph '" << trial.graph_name() << "': shadow sampling of " << trial.shadow().identity()
                               << " stopped: " << e.what());
  }
}

// The verdict in the store (one transaction with its history row), then the key's plan dropped from memory (the
// structure's other shapes, and their trials, stay): the next obtain() of it reads the store again and serves its
// active plan alone (the promoted one, or the old one).
void ShadowJudge::record(ShadowTrial& trial, const ShadowDecision& d) {
  const bool promote = d.verdict == ShadowVerdict::kPromote;
  const std::string config = trial.shadow().identity();
  Status st = state_.backend().with_writable_store([&](PlanStore& store) {
    return store.transition(trial.key(), config, promote ? PlanState::kActive : PlanState::kRejected,
                            "shadow: " + d.reason, d.evidence);
  });
  if (st.is_ok()) {
    (promote ? state_.counters().shadow_promotions : state_.counters().shadow_rejections)
        .fetch_add(1, std::memory_order_relaxed);
    const std::string at = trial.key().shape_key.empty() ? "its own shape" : trial.key().shape_key;
    if (promote)
      KILN_LOG(kInfo, "graph '" << trial.graph_name() << "' at " << at << ": shadow plan " << config << " promoted ("
                                << d.reason << ")");
    else
      KILN_LOG(kWarn, "graph '" << trial.graph_name() << "' at " << at << ": shadow plan " << config << " rejected ("
                                << d.reason << ")");
  } else {
    // Another host decided first (NotFound or FailedPrecondition: it is no longer in shadow; the store changed), or
    // the store could not be written (then the active plan goes on serving here, unsampled).
    state_.counters().shadow_unrecorded.fetch_add(1, std::memory_order_relaxed);
    KILN_LOG(kWarn, "graph '" << trial.graph_name() << "': the shadow verdict on " << config << " was not recorded ("
                              << st.message() << "): " << d.reason);
    if (st.code() != StatusCode::kNotFound && st.code() != StatusCode::kFailedPrecondition) return;
  }
  state_.cache().drop(trial.wrapper());
}

std::shared_ptr<const ExecutablePlan> without_shadow(std::shared_ptr<const ExecutablePlan> plan) {
  if (!plan) return plan;
  if (const auto* shadowed = dynamic_cast<const ShadowExecutor*>(&plan->executor()))
    return shadowed->trial().active_plan();
  return plan;
}

void shadow_if_any(PlannerState& state, Built* built, const std::string& graph_name) {
  const ShadowSampling& sampling = state.options().shadow;
  if (sampling.sample_every <= 0 || !state.shadow_judge() || !built->plan || !built->plan->parts().empty()) return;
  std::shared_ptr<const ExecutablePlan> active = built->plan;
  auto note = [&](const std::string& line) { built->why += (built->why.empty() ? "" : "; ") + line; };
  StatusOr<std::optional<PlanRecord>> rec = state.backend().shadow_record(active->signature());
  if (!rec.is_ok()) return note("shadow: the store's plan states were not read: " + rec.status().message());
  if (!*rec) return;
  const EngineConfig config{(*rec)->engine_id, (*rec)->knobs};
  if (config.identity() == active->identity()) return;
  StatusOr<std::shared_ptr<const ExecutablePlan>> shadow =
      state.backend().build(active->graph(), active->signature(), config, PlanSource::kStore);
  if (!shadow.is_ok() || !*shadow)
    return note("shadow: its plan " + config.identity() + " was not built here (" +
                (shadow.is_ok() ? std::string("no plan") : shadow.status().message()) +
                "): the active plan serves alone");
  StatusOr<EnvFingerprint> env = state.backend().environment();
  if (!env.is_ok()) return note("shadow: " + env.status().message());
  // The lane's layout: per bound tensor its copy (an output's: what the caller got), and for an output the shadow
  // plan's and the side run of the active plan's; then one workspace for both side runs (they run in turn). On the
  // host, both outputs compared.
  const Graph& g = active->graph();
  std::vector<ShadowTensor> tensors;
  size_t dev = 0, host = 0;
  for (const BoundTensor& b : bound_tensors(g)) {
    ShadowTensor t;
    t.index = b.tensor;
    t.name = b.name;
    t.bytes = b.bytes;
    t.output = b.output;
    t.dtype = g.dtype_of(b.tensor);
    t.dims = g.tensors[b.tensor].shape();
    t.strides = g.tensors[b.tensor].strides;
    t.copy_at = dev;
    dev += aligned(b.bytes);
    if (t.output) {
      t.shadow_at = dev;
      dev += aligned(b.bytes);
      t.timing_at = dev;
      dev += aligned(b.bytes);
      t.host_active = host;
      t.host_shadow = host + b.bytes;
      host += 2 * b.bytes;
    }
    tensors.push_back(std::move(t));
  }
  const size_t workspace_at = dev;
  dev += static_cast<size_t>(std::max<int64_t>({int64_t{0}, active->workspace_bytes(), (*shadow)->workspace_bytes()}));
  StatusOr<std::unique_ptr<ShadowLane>> lane = state.backend().shadow_lane(dev, host);
  if (!lane.is_ok()) return note("shadow: no lane for " + config.identity() + " (" + lane.status().message() + ")");
  auto trial = std::make_shared<ShadowTrial>(
      StoredPlanKey{active->signature().structure, active->signature().shape_key, fingerprint_key(*env)}, graph_name,
      active, std::move(*shadow), std::move(*lane), std::move(tensors), workspace_at, sampling,
      std::weak_ptr<ShadowJudge>(state.shadow_judge()));
  auto wrapped = std::make_shared<ExecutablePlan>(g, active->signature(), active->config(), active->workspace_bytes(),
                                                  active->built_from(), std::make_unique<ShadowExecutor>(trial));
  wrapped->set_notes(active->notes());
  trial->set_wrapper(wrapped.get());
  built->plan = std::move(wrapped);
  state.counters().shadow_trials.fetch_add(1, std::memory_order_relaxed);
  note("shadow: plan " + config.identity() + " runs beside it on 1 in " + std::to_string(sampling.sample_every) +
       " requests (docs/rollout.md \"Shadow sampling\")");
}

}  // namespace kiln::runtime_detail
