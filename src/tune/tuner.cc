// The autotuner's decisions (kiln/tune/tuner.h) over the TuneBackend seam (kiln/tune/tune_backend.h): enumeration
// and filters, a pipeline of builds on host threads feeding the check-and-time loop, the disposition of
// every candidate, the time budget and interrupts, and the winner.
#include "kiln/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "kiln/core/log.h"
#include "kiln/cuda/cuda_handles.h"
#include "tune/tuner_internal.h"

namespace kiln {

double gpu_share_rest_ms(double device_ms, double gpu_share) {
  if (!(gpu_share > 0) || gpu_share >= 1.0 || !(device_ms > 0)) return 0.0;
  return device_ms * (1.0 / gpu_share - 1.0);
}
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

bool excluded(const EngineConfig& c, const std::vector<std::string>& exclude) {
  const std::string id = c.identity();
  // "eng12" (or "blt66", "knl1") names every configuration of that engine (cuBLASLt algorithm, Kiln kernel); "blt"
  // every cuBLASLt one, "knl" every Kiln kernel.
  const std::string eng = plan_identity(c.engine_id, {});
  for (const auto& e : exclude)
    if (e == id || e == eng || (e == "blt" && is_cublaslt_engine(c.engine_id)) ||
        (e == "knl" && is_kiln_kernel_engine(c.engine_id)))
      return true;
  return false;
}

// A backend call that throws is a failed call: the tuner goes on with the next candidate.
template <typename F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return internal_error(std::string(what) + " threw: " + e.what());
  } catch (...) {
    return internal_error(std::string(what) + " threw a non-standard exception");
  }
}

// The candidates of one tuning, in enumeration order (parallel vectors).
struct CandidateList {
  std::vector<EngineConfig> configs;
  std::vector<int> ranks;
  std::vector<std::string> notes;

  // Reorders the candidates: position k takes candidate order[k].
  void reorder(const std::vector<size_t>& order) {
    CandidateList out;
    for (size_t i : order) {
      out.configs.push_back(configs[i]);
      out.ranks.push_back(ranks[i]);
      out.notes.push_back(notes[i]);
    }
    *this = std::move(out);
  }
  bool runtime_compiled(size_t i) const { return notes[i].find("runtime_compilation") != std::string::npos; }
  // The kCandidates event that lists them.
  TuneEvent event() const {
    TuneEvent e;
    e.kind = TuneEvent::Kind::kCandidates;
    for (const EngineConfig& c : configs) e.identities.push_back(c.identity());
    e.notes = notes;
    e.ranks = ranks;
    return e;
  }
  // The candidate budget's order of these candidates (kiln/tune/tune_policy.h budget_order).
  std::vector<size_t> budget_order(const CandidateBudget& b) const {
    std::vector<std::string> ids;
    std::vector<bool> rtc;
    for (size_t i = 0; i < configs.size(); ++i) {
      ids.push_back(configs[i].identity());
      rtc.push_back(runtime_compiled(i));
    }
    return kiln::budget_order(ids, ranks, rtc, b);
  }

  // Drops the candidates whose identity is in `skip`.
  void drop(const std::vector<std::string>& skip) {
    if (skip.empty()) return;
    CandidateList kept;
    for (size_t i = 0; i < configs.size(); ++i) {
      if (std::find(skip.begin(), skip.end(), configs[i].identity()) != skip.end()) continue;
      kept.configs.push_back(configs[i]);
      kept.ranks.push_back(ranks[i]);
      kept.notes.push_back(notes[i]);
    }
    *this = std::move(kept);
  }
};

// The pinned configuration, or the backend's candidates less those --exclude and --top-k leave out.
StatusOr<CandidateList> list_candidates(TuneBackend& backend, const std::string& graph_name, const TuneOptions& o) {
  CandidateList l;
  if (o.pin) {
    l.configs.push_back(*o.pin);
    l.ranks.push_back(-1);
    l.notes.push_back("pinned");
    return l;
  }
  KILN_ASSIGN_OR_RETURN(auto cands, guarded("listing candidates", [&] { return backend.candidates(o.modes); }));
  auto keep = [&](const CandidateInfo& c) {
    l.configs.push_back(c.config);
    l.ranks.push_back(c.heuristic_rank);
    std::string n;
    for (auto& s : c.behavior_notes) n += (n.empty() ? "" : ",") + s;
    l.notes.push_back(n);
  };
  for (const CandidateInfo& c : cands) {
    if (excluded(c.config, o.exclude)) continue;
    if (o.top_k > 0 && (c.heuristic_rank < 0 || c.heuristic_rank >= o.top_k)) continue;
    keep(c);
  }
  // top_k counts the heuristics' ranked choices; where they rank none (cuDNN's heuristics give no list for some
  // graphs, conv wgrad among them on the H200), the first top_k of the enumeration stand in, rather than nothing.
  if (l.configs.empty() && o.top_k > 0)
    for (const CandidateInfo& c : cands)
      if (!excluded(c.config, o.exclude) && c.heuristic_rank < 0 && static_cast<int>(l.configs.size()) < o.top_k)
        keep(c);
  if (l.configs.empty())
    return not_supported("no engine configuration left for graph '" + graph_name + "' after filters");
  return l;
}

// Why a candidate is settled without being timed: its disposition and message.
struct Skip {
  Disposition disposition;
  std::string why;
};

// The numerics gate (one run on poisoned outputs, compared with the reference; without a reference, one run
// unchecked), then the timer, for built candidate `i`: fills c's disposition, times and timing, and
// *check_summary. Returns why the candidate goes no further (a failed run or timing, or an incorrect
// result: never timed, never chosen), or nothing when it was timed.
std::optional<Skip> gate_and_time(TuneBackend& backend, size_t i, bool verifying, const TuneOptions& o,
                                  CandidateResult& c, std::string* check_summary) {
  const auto tg = Clock::now();
  if (verifying) {
    auto rep = guarded("run and check", [&] { return backend.run_and_check(i); });
    c.check_ms = ms_since(tg);
    if (!rep.is_ok()) return Skip{Disposition::kFailed, rep.status().message()};
    c.disposition = rep->verdict;
    *check_summary = rep->summary();
    if (c.disposition != Disposition::kPassed) return Skip{c.disposition, *check_summary};
  } else {
    Status st = guarded("run", [&] { return backend.run_once(i); });
    c.check_ms = ms_since(tg);
    if (!st.is_ok()) return Skip{Disposition::kFailed, st.message()};
    c.disposition = Disposition::kNotVerified;
    c.message = "no reference: not verified";
  }
  const auto tm = Clock::now();
  auto m = guarded("timing", [&] { return backend.time(i, o.measure); });
  c.measure_ms = ms_since(tm);
  if (!m.is_ok()) return Skip{Disposition::kFailed, m.status().message()};
  c.set_timing(*m);
  c.warmup_ms = m->warmup_ms;
  c.throttled = m->throttled;
  if (m->throttled) c.message += (c.message.empty() ? "" : "; ") + std::string("throttled: ") + m->throttle_note;
  return std::nullopt;
}

// Builds of the candidates in enumeration order: on worker threads ahead of the check-and-time loop
// (TuneOptions::pipeline), or each on the caller's thread just before its run. A build asked for after
// stop(), an interrupt or the time budget is settled as cancelled, not made. The destructor stops and joins
// the threads (a build under way finishes first).
class BuildPipeline {
 public:
  struct Slot {
    bool done = false;
    StatusOr<int64_t> workspace = internal_error("not built");
    double ms = 0;
  };

  BuildPipeline(TuneBackend& backend, const std::vector<EngineConfig>& configs, const TuneOptions& o,
                std::function<bool()> interrupted, std::function<bool()> over_budget,
                std::function<void(TuneEvent::Kind, size_t)> announce, size_t allowed = SIZE_MAX)
      : allowed_(allowed),
        backend_(backend),
        configs_(configs),
        pipelined_(o.pipeline),
        interrupted_(std::move(interrupted)),
        over_budget_(std::move(over_budget)),
        announce_(std::move(announce)),
        slots_(configs.size()) {
    const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = !o.pipeline ? 0
                                    : std::max(1, std::min<int>(o.build_threads > 0 ? o.build_threads : hardware,
                                                                static_cast<int>(configs.size())));
    for (int t = 0; t < threads; ++t) pool_.emplace_back([this, t] { work(static_cast<size_t>(t)); });
  }
  BuildPipeline(const BuildPipeline&) = delete;
  BuildPipeline& operator=(const BuildPipeline&) = delete;
  ~BuildPipeline() { join(); }

  // Candidate i's build once it is done (made here first when the builds are not pipelined).
  Slot take(size_t i) {
    if (!pipelined_) build_one(0, i);  // on this thread, just before its run
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return slots_[i].done; });
    return std::move(slots_[i]);
  }
  void stop() {
    stop_ = true;
    wake();
  }
  // Builds of list positions from `n` on wait until allow() lets them (the candidate budget); SIZE_MAX: none wait.
  void allow(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (n > allowed_) allowed_ = n;
    }
    cv_.notify_all();
  }
  // Builds of list positions from `n` on that have not started wait again (the build lanes went down).
  void restrict(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (n < allowed_) allowed_ = n;
  }
  void join() {  // then no build() can follow: the backend hears so (end_builds)
    stop_ = true;
    wake();
    for (auto& t : pool_)
      if (t.joinable()) t.join();
    backend_.end_builds();
  }
  // From the pipeline's start to the end of its last build (after join()).
  double wall_ms() const { return std::chrono::duration<double, std::milli>(last_build_ - first_build_).count(); }

 private:
  void wake() {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  void work(size_t w) {
    for (size_t i = next_++; i < configs_.size(); i = next_++) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return i < allowed_ || stop_; });
      }
      build_one(w, i);
    }
  }
  void build_one(size_t w, size_t i) {
    Slot s;
    if (stop_ || interrupted_()) {
      s.workspace = cancelled("not built: interrupted");
    } else if (over_budget_()) {
      s.workspace = cancelled("not built: time budget reached");
    } else {
      announce_(TuneEvent::Kind::kBuildStart, i);
      const auto tb = Clock::now();
      s.workspace = guarded("build", [&] { return backend_.build(w, i, configs_[i]); });
      s.ms = ms_since(tb);
      announce_(TuneEvent::Kind::kBuildEnd, i);
    }
    // The last slot to settle tells the backend before it is published: no build() can follow, and the loop
    // times that candidate only after the backend has let go of what builds alone needed.
    if (settling_.fetch_add(1) + 1 == slots_.size()) {
      try {
        backend_.end_builds();
      } catch (...) {  // a backend's cleanup must not end the process from a build thread; join() asks again
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    s.done = true;
    last_build_ = std::max(last_build_, Clock::now());
    slots_[i] = std::move(s);
    cv_.notify_all();
  }

  size_t allowed_;  // list positions from here on wait to be built (allow()); guarded by mu_ once threads run
  TuneBackend& backend_;
  const std::vector<EngineConfig>& configs_;
  const bool pipelined_;
  const std::function<bool()> interrupted_, over_budget_;
  const std::function<void(TuneEvent::Kind, size_t)> announce_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<size_t> settling_{0};  // slots whose build (or its cancellation) has ended
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  Clock::time_point first_build_ = Clock::now(), last_build_ = first_build_;
  std::vector<std::thread> pool_;  // last: started once every member above is made
};

// The candidate budget over one tune's loop (kiln/tune/tune_policy.h): runtime-compiled candidates, last in the
// list, are built as far as it allows (the first `first` per build lane, then one at a time while the rule wants
// more); once it stops, the rest are left.
class BudgetGate {
 public:
  // Tells the backend which runtime-compiled candidates may be built (TuneBackend::will_build), then compiles the
  // first `first` per build lane (TuneBackend::build_lanes, asked again as candidates settle: when build helpers
  // turn out unable to start, the lanes fall to 1 and so does the budget's first).
  BudgetGate(const CandidateList& list, bool budgeted, const CandidateBudget& b, TuneBackend& backend)
      : budget_(b), backend_(backend), base_first_(b.first) {
    std::vector<EngineConfig> runtime_compiled;
    for (size_t i = 0; i < list.configs.size(); ++i)
      if (list.runtime_compiled(i)) {
        runtime_compiled.push_back(list.configs[i]);
        if (budgeted && first_rtc_ == SIZE_MAX) first_rtc_ = i;
      }
    backend.will_build(runtime_compiled);
    set_lanes(backend.build_lanes());
  }
  // How many list positions may be built from the start.
  size_t initial_allowance() const {
    return first_rtc_ == SIZE_MAX ? SIZE_MAX : first_rtc_ + static_cast<size_t>(budget_.first);
  }
  // After candidate i of n settled as `c`: lets the next build start, or stops the builds (the rest left).
  void settled(size_t i, size_t n, const CandidateResult& c, BuildPipeline& builds) {
    if (i < first_rtc_) {
      if (c.timed() && (c.disposition == Disposition::kPassed || c.disposition == Disposition::kNotVerified) &&
          (best_other_ms_ <= 0 || c.median_ms < best_other_ms_))
        best_other_ms_ = c.median_ms;
      return;
    }
    rtc_.push_back(c);
    if (const int lanes = backend_.build_lanes(); lanes < lanes_) {
      set_lanes(lanes);
      builds.restrict(first_rtc_ + static_cast<size_t>(budget_.first));
    }
    std::string why;
    if (budget_wants_more(rtc_, best_other_ms_, budget_, &why)) {
      builds.allow(i + 2);
    } else if (i + 1 < n) {
      stop_ = why;
      builds.stop();
    }
  }
  // Why the rest are left ("" while they are not).
  const std::string& stopped() const { return stop_; }

 private:
  void set_lanes(int lanes) {
    lanes_ = std::max(1, lanes);
    budget_.first = static_cast<int>(std::min<int64_t>(int64_t{base_first_} * lanes_, 1 << 20));
  }

  CandidateBudget budget_;
  TuneBackend& backend_;
  const int base_first_;
  int lanes_ = 1;
  size_t first_rtc_ = SIZE_MAX;
  std::vector<CandidateResult> rtc_;  // runtime-compiled candidates settled, in order
  double best_other_ms_ = 0;          // the best time among the others
  std::string stop_;
};

// 3. The inputs and the reference, once (while the first plans build): r's reference kind, inputs and
// preparation time, and the kPrepared event.
Status prepare_inputs_and_reference(TuneBackend& backend, const TuneOptions& o, TuneResult& r) {
  const auto tp = Clock::now();
  auto prepared = guarded("preparing inputs and reference", [&] { return backend.prepare(o.verify); });
  r.prepare_wall_ms = ms_since(tp);
  if (!prepared.is_ok()) return prepared.status();
  r.reference_kind = *prepared;
  r.inputs = backend.inputs_description();
  if (o.on_event) {
    TuneEvent e;
    e.kind = TuneEvent::Kind::kPrepared;
    e.reference_kind = r.reference_kind;
    e.inputs = r.inputs;
    e.prepare_ms = r.prepare_wall_ms;
    o.on_event(e);
  }
  return Status::ok();
}

// Why a built (or unbuilt) candidate is not run: its build failed or was cancelled, the tuning is
// interrupted or over its time budget (r marked so, and no further build starts), or its workspace is over
// the limit. Fills c's workspace size; nothing when it is to run.
std::optional<Skip> why_not_run(const StatusOr<int64_t>& workspace, const TuneOptions& o,
                                const std::function<bool()>& interrupted, const std::function<bool()>& over_budget,
                                BuildPipeline& builds, CandidateResult& c, TuneResult& r) {
  if (!workspace.is_ok()) {
    const Status& st = workspace.status();
    if (st.code() == StatusCode::kCancelled) {
      if (interrupted()) r.cancelled = true;
      else r.budget_exhausted = true;
      return Skip{Disposition::kNotVerified, st.message()};
    }
    return Skip{st.code() == StatusCode::kNotSupported ? Disposition::kNotSupported : Disposition::kFailed,
                st.message()};
  }
  c.workspace_bytes = *workspace;
  if (interrupted() || r.cancelled) {
    r.cancelled = true;
    builds.stop();
    return Skip{Disposition::kNotVerified, "not run: interrupted"};
  }
  if (over_budget() || r.budget_exhausted) {
    r.budget_exhausted = true;
    builds.stop();
    return Skip{Disposition::kNotVerified, "not run: time budget reached"};
  }
  if (o.max_workspace_bytes >= 0 && c.workspace_bytes > o.max_workspace_bytes)
    return Skip{Disposition::kNotSupported, "workspace " + std::to_string(c.workspace_bytes) + " B over the limit"};
  return std::nullopt;
}

}  // namespace

namespace tune_internal {

CandidateResult result_for(const EngineConfig& c, int rank) {
  CandidateResult r;
  r.config = c;
  r.heuristic_rank = rank;
  return r;
}

Status decide_winner(TuneResult& r, const std::vector<EngineConfig>& configs, const std::vector<std::string>& checks,
                     bool verifying, const TuneOptions& o,
                     const std::function<StatusOr<std::vector<uint8_t>>(size_t)>& plan_of) {
  // Without a reference (--no-verify, or none could be computed) every timed candidate is NotVerified;
  // the winner is then the fastest of those, and it stays marked NotVerified in reports and the store.
  std::vector<CandidateResult> eligible = r.candidates;
  if (!verifying)
    for (auto& c : eligible)
      if (c.disposition == Disposition::kNotVerified && c.timed()) c.disposition = Disposition::kPassed;
  auto w = pick_winner(eligible, o.winner);
  if (!w.is_ok()) return Status::ok();
  r.fastest = *w;
  r.winner = *w;
  if (o.incumbent) {
    // Timed again in this tune, the incumbent is compared at this tune's time: the same inputs, harness and
    // measure settings as the challenger's (a stored time may come from an older harness, e.g. one before the
    // settle time after the L2 flush, 2026-12-07). Its stored time counts only where it was not re-timed.
    Incumbent incumbent = *o.incumbent;
    for (const CandidateResult& c : eligible)
      if (c.identity() == incumbent.identity && c.disposition == Disposition::kPassed && c.timed() &&
          std::isfinite(c.median_ms) && c.median_ms > 0.0) {
        incumbent.median_ms = c.median_ms;
        incumbent.rel_error = c.rel_error;
      }
    IncumbentDecision d = decide_incumbent(incumbent, r.candidates[*w], o.incumbent_options);
    if (!d.replace) {
      bool kept = false;
      for (size_t i = 0; i < r.candidates.size(); ++i)
        if (eligible[i].identity() == o.incumbent->identity && eligible[i].disposition == Disposition::kPassed) {
          r.winner = i;
          kept = true;
        }
      if (!kept) {  // not timed in this tune (left, filtered out, or failed): it cannot be kept on this tune's word
        d.replace = true;
        d.chosen_identity = r.candidates[*w].identity();
        d.explanation = "incumbent " + o.incumbent->identity + " did not pass in this tune (not offered, left or " +
                        "failed): the fastest that did, " + d.chosen_identity + ", chosen";
      }
    }
    r.incumbent_decision = d;
  }
  const size_t wi = *r.winner;
  r.winner_config = configs[wi];
  r.winner_check = checks[wi];
  KILN_ASSIGN_OR_RETURN(r.winner_plan, plan_of(wi));
  return Status::ok();
}

}  // namespace tune_internal

using tune_internal::result_for;

StatusOr<TuneResult> tune_with_backend(TuneBackend& backend, const std::string& graph_name, const TuneOptions& o) {
  if (!(o.gpu_share > 0 && o.gpu_share <= 1))
    return invalid_argument("the tune's GPU share must be in (0, 1], got " + std::to_string(o.gpu_share));
  const auto t0 = Clock::now();
  TuneResult r;
  r.graph_name = graph_name;
  const bool budgeted = o.time_budget_s > 0;
  auto over_budget = [&] { return budgeted && ms_since(t0) > o.time_budget_s * 1000.0; };
  auto interrupted = [&] { return o.cancel && o.cancel->load(); };

  // 1. Candidates, in the candidate budget's order (runtime-compiled ones ranked last).
  KILN_RETURN_IF_ERROR(check_candidate_budget(o.budget));
  KILN_ASSIGN_OR_RETURN(CandidateList list, list_candidates(backend, graph_name, o));
  const bool budgeted_rtc = !o.pin && !o.budget.exhaustive;
  if (budgeted_rtc) list.reorder(list.budget_order(o.budget));
  auto emit = [&](TuneEvent e) {
    if (o.on_event) o.on_event(e);
  };
  emit(list.event());
  list.drop(o.skip);  // settled by an earlier (crashed) worker: neither built nor reported again
  const std::vector<EngineConfig>& configs = list.configs;
  const std::vector<int>& ranks = list.ranks;
  r.behavior_notes = list.notes;
  const size_t n = configs.size();
  auto event_for = [&](TuneEvent::Kind kind, size_t i) {
    TuneEvent e;
    e.kind = kind;
    e.index = i;
    e.identity = configs[i].identity();
    return e;
  };

  // 2. Builds on worker threads, in list order, ahead of the check-and-time loop below; runtime-compiled ones only
  // as far as the candidate budget allows (the first `first`, then one at a time while the rule wants more).
  BudgetGate gate(list, budgeted_rtc, o.budget, backend);
  BuildPipeline builds(
      backend, configs, o, interrupted, over_budget, [&](TuneEvent::Kind kind, size_t i) { emit(event_for(kind, i)); },
      gate.initial_allowance());

  // 3. Inputs and reference, once, while the first plans build.
  KILN_RETURN_IF_ERROR(prepare_inputs_and_reference(backend, o, r));
  const bool verifying = o.verify && r.reference_kind != ReferenceKind::kNone;
  const double flops = backend.work_flops(), bytes = backend.work_bytes();

  // 4. Each candidate in order, as its build finishes: the gate, then the timer.
  std::vector<std::string> checks(n);
  for (size_t i = 0; i < n; ++i) {
    if (!gate.stopped().empty()) {  // left by the candidate budget: never built (its build waited, and was stopped)
      CandidateResult c = result_for(configs[i], ranks[i]);
      c.disposition = Disposition::kNotVerified;
      c.message = "not run: " + gate.stopped();
      r.candidates.push_back(c);
      TuneEvent e = event_for(TuneEvent::Kind::kCandidate, i);
      e.result = c;
      emit(std::move(e));
      if (o.progress) o.progress(i + 1, n, configs[i].identity());
      continue;
    }
    BuildPipeline::Slot slot = builds.take(i);
    CandidateResult c = result_for(configs[i], ranks[i]);
    c.flops = flops;
    c.bytes = bytes;
    c.build_ms = slot.ms;
    std::vector<uint8_t> plan_for_event;
    auto finish = [&] {
      // A bounded share of the GPU: rest after this candidate's device work (nothing runs on the device
      // meanwhile; builds of later candidates go on on their threads).
      for (const auto rest_end =
               Clock::now() + std::chrono::microseconds(static_cast<int64_t>(
                                  1000.0 * gpu_share_rest_ms(c.check_ms + c.measure_ms, o.gpu_share)));
           Clock::now() < rest_end && !interrupted() && !over_budget();)
        std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(5), rest_end - Clock::now()));
      r.candidates.push_back(c);
      if (o.on_event) {
        TuneEvent e = event_for(TuneEvent::Kind::kCandidate, i);
        e.result = c;
        e.check = checks[i];
        e.plan = std::move(plan_for_event);
        o.on_event(e);
      }
      if (o.progress) o.progress(i + 1, n, configs[i].identity());
      // The candidate budget: the next runtime-compiled one, or the rest left (not once interrupted or out of time:
      // what is left then is theirs to name).
      if (!r.cancelled && !r.budget_exhausted) gate.settled(i, n, c, builds);
    };
    auto skip = [&](Disposition d, const std::string& why) {
      c.disposition = d;
      c.message = why;
      backend.release(i);
      finish();
    };
    if (std::optional<Skip> not_run = why_not_run(slot.workspace, o, interrupted, over_budget, builds, c, r)) {
      skip(not_run->disposition, not_run->why);
      continue;
    }
    emit(event_for(TuneEvent::Kind::kRunStart, i));
    std::string check_summary;
    if (std::optional<Skip> gated_out = gate_and_time(backend, i, verifying, o, c, &check_summary)) {
      skip(gated_out->disposition, gated_out->why);
      continue;
    }
    checks[i] = check_summary;
    if (o.events_with_plans && c.timed()) {
      auto plan = guarded("serialize", [&] { return backend.serialize(i); });
      if (plan.is_ok()) plan_for_event = std::move(plan).value();
    }
    finish();
  }
  builds.join();
  r.build_wall_ms = builds.wall_ms();

  // 5. Winner: fastest correct candidate, then the incumbent rule.
  KILN_RETURN_IF_ERROR(tune_internal::decide_winner(r, configs, checks, verifying, o, [&](size_t wi) {
    return guarded("serialize", [&] { return backend.serialize(wi); });
  }));
  for (size_t i = 0; i < n; ++i) backend.release(i);
  r.evaluation = backend.evaluation();
  r.total_wall_ms = ms_since(t0);
  return r;
}

StatusOr<TuneResult> tune_graph(const Graph& graph, const TuneOptions& options) {
  return catch_exceptions("tuning graph '" + graph.name + "'", [&]() -> StatusOr<TuneResult> {
    TuneOptions o = options;
    KILN_ASSIGN_OR_RETURN(o.pin, resolve_pin(graph, options.pin));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<TuneBackend> backend, make_cudnn_backend(graph, o));
    return tune_with_backend(*backend, graph.name, o);
  });
}

}  // namespace kiln
