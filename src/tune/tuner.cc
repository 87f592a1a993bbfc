// The autotuner's decisions (kiln/tune/tuner.h) over the TuneBackend seam (kiln/tune/tune_backend.h): enumeration
// and filters, a pipeline of builds on host threads feeding the check-and-time loop, the disposition of
// every candidate, the time budget and interrupts, and the winner.
#include "kiln/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
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
  std::string id = c.identity();
  std::string eng = "eng" + std::to_string(c.engine_id);
  for (const auto& e : exclude)
    if (e == id || e == eng) return true;
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
    IncumbentDecision d = decide_incumbent(*o.incumbent, r.candidates[*w], o.incumbent_options);
    r.incumbent_decision = d;
    if (!d.replace) {
      for (size_t i = 0; i < r.candidates.size(); ++i)
        if (eligible[i].identity() == o.incumbent->identity && eligible[i].disposition == Disposition::kPassed)
          r.winner = i;
    }
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

  // 1. Candidates.
  std::vector<EngineConfig> configs;
  std::vector<int> ranks;
  std::vector<std::string> notes;
  if (o.pin) {
    configs.push_back(*o.pin);
    ranks.push_back(-1);
    notes.push_back("pinned");
  } else {
    KILN_ASSIGN_OR_RETURN(auto cands, guarded("listing candidates", [&] { return backend.candidates(o.modes); }));
    for (const CandidateInfo& c : cands) {
      if (excluded(c.config, o.exclude)) continue;
      if (o.top_k > 0 && (c.heuristic_rank < 0 || c.heuristic_rank >= o.top_k)) continue;
      configs.push_back(c.config);
      ranks.push_back(c.heuristic_rank);
      std::string n;
      for (auto& s : c.behavior_notes) n += (n.empty() ? "" : ",") + s;
      notes.push_back(n);
    }
    if (configs.empty())
      return not_supported("no engine configuration left for graph '" + graph_name + "' after filters");
  }
  auto emit = [&](TuneEvent e) {
    if (o.on_event) o.on_event(e);
  };
  {
    TuneEvent e;
    e.kind = TuneEvent::Kind::kCandidates;
    for (const EngineConfig& c : configs) e.identities.push_back(c.identity());
    e.notes = notes;
    e.ranks = ranks;
    emit(std::move(e));
  }
  // Candidates settled by an earlier (crashed) worker are neither built nor reported again.
  if (!o.skip.empty()) {
    std::vector<EngineConfig> kc;
    std::vector<int> kr;
    std::vector<std::string> kn;
    for (size_t i = 0; i < configs.size(); ++i) {
      if (std::find(o.skip.begin(), o.skip.end(), configs[i].identity()) != o.skip.end()) continue;
      kc.push_back(configs[i]);
      kr.push_back(ranks[i]);
      kn.push_back(notes[i]);
    }
    configs.swap(kc);
    ranks.swap(kr);
    notes.swap(kn);
  }
  r.behavior_notes = notes;
  const size_t n = configs.size();
  auto event_for = [&](TuneEvent::Kind kind, size_t i) {
    TuneEvent e;
    e.kind = kind;
    e.index = i;
    e.identity = configs[i].identity();
    return e;
  };

  // 2. Builds on worker threads, in enumeration order, ahead of the check-and-time loop below.
  struct Slot {
    bool done = false;
    StatusOr<int64_t> workspace = internal_error("not built");
    double ms = 0;
  };
  std::vector<Slot> slots(n);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  Clock::time_point first_build = Clock::now(), last_build = first_build;
  auto build_one = [&](size_t w, size_t i) {
    Slot s;
    if (stop || interrupted()) {
      s.workspace = cancelled("not built: interrupted");
    } else if (over_budget()) {
      s.workspace = cancelled("not built: time budget reached");
    } else {
      emit(event_for(TuneEvent::Kind::kBuildStart, i));
      const auto tb = Clock::now();
      s.workspace = guarded("build", [&] { return backend.build(w, i, configs[i]); });
      s.ms = ms_since(tb);
      emit(event_for(TuneEvent::Kind::kBuildEnd, i));
    }
    std::lock_guard<std::mutex> lock(mu);
    s.done = true;
    last_build = std::max(last_build, Clock::now());
    slots[i] = std::move(s);
    cv.notify_all();
  };
  auto worker = [&](size_t w) {
    for (size_t i = next++; i < n; i = next++) build_one(w, i);
  };
  const int threads =
      !o.pipeline ? 0
                  : std::max(1, std::min<int>(o.build_threads > 0
                                                  ? o.build_threads
                                                  : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                                              static_cast<int>(n)));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, static_cast<size_t>(t));
  struct Joiner {
    std::vector<std::thread>& pool;
    std::atomic<bool>& stop;
    ~Joiner() {
      stop = true;
      for (auto& t : pool)
        if (t.joinable()) t.join();
    }
  } joiner{pool, stop};

  // 3. Inputs and reference, once, while the first plans build.
  const auto tp = Clock::now();
  auto prepared = guarded("preparing inputs and reference", [&] { return backend.prepare(o.verify); });
  r.prepare_wall_ms = ms_since(tp);
  if (!prepared.is_ok()) return prepared.status();
  r.reference_kind = *prepared;
  r.inputs = backend.inputs_description();
  {
    TuneEvent e;
    e.kind = TuneEvent::Kind::kPrepared;
    e.reference_kind = r.reference_kind;
    e.inputs = r.inputs;
    e.prepare_ms = r.prepare_wall_ms;
    emit(std::move(e));
  }
  const bool verifying = o.verify && r.reference_kind != ReferenceKind::kNone;
  const double flops = backend.work_flops(), bytes = backend.work_bytes();

  // 4. Each candidate in order, as its build finishes: the gate, then the timer.
  std::vector<std::string> checks(n);
  for (size_t i = 0; i < n; ++i) {
    if (!o.pipeline) build_one(0, i);  // on this thread, just before its run
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return slots[i].done; });
      slot = std::move(slots[i]);
    }
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
    };
    auto skip = [&](Disposition d, const std::string& why) {
      c.disposition = d;
      c.message = why;
      backend.release(i);
      finish();
    };
    if (!slot.workspace.is_ok()) {
      const Status& st = slot.workspace.status();
      if (st.code() == StatusCode::kCancelled) {
        if (interrupted()) r.cancelled = true;
        else r.budget_exhausted = true;
        skip(Disposition::kNotVerified, st.message());
      } else {
        skip(st.code() == StatusCode::kNotSupported ? Disposition::kNotSupported : Disposition::kFailed, st.message());
      }
      continue;
    }
    c.workspace_bytes = *slot.workspace;
    if (interrupted() || r.cancelled) {
      r.cancelled = true;
      stop = true;
      skip(Disposition::kNotVerified, "not run: interrupted");
      continue;
    }
    if (over_budget() || r.budget_exhausted) {
      r.budget_exhausted = true;
      stop = true;
      skip(Disposition::kNotVerified, "not run: time budget reached");
      continue;
    }
    if (o.max_workspace_bytes >= 0 && c.workspace_bytes > o.max_workspace_bytes) {
      skip(Disposition::kNotSupported, "workspace " + std::to_string(c.workspace_bytes) + " B over the limit");
      continue;
    }
    // The numerics gate: one run on poisoned outputs, compared with the reference.
    emit(event_for(TuneEvent::Kind::kRunStart, i));
    const auto tg = Clock::now();
    std::string check_summary;
    if (verifying) {
      auto rep = guarded("run and check", [&] { return backend.run_and_check(i); });
      c.check_ms = ms_since(tg);
      if (!rep.is_ok()) {
        skip(Disposition::kFailed, rep.status().message());
        continue;
      }
      c.disposition = rep->verdict;
      check_summary = rep->summary();
      if (c.disposition != Disposition::kPassed) {
        skip(c.disposition, check_summary);  // an incorrect candidate is never timed, never chosen
        continue;
      }
    } else {
      Status st = guarded("run", [&] { return backend.run_once(i); });
      c.check_ms = ms_since(tg);
      if (!st.is_ok()) {
        skip(Disposition::kFailed, st.message());
        continue;
      }
      c.disposition = Disposition::kNotVerified;
      c.message = "no reference: not verified";
    }
    const auto tm = Clock::now();
    auto m = guarded("timing", [&] { return backend.time(i, o.measure); });
    c.measure_ms = ms_since(tm);
    if (!m.is_ok()) {
      skip(Disposition::kFailed, m.status().message());
      continue;
    }
    c.set_timing(*m);
    c.warmup_ms = m->warmup_ms;
    c.throttled = m->throttled;
    if (m->throttled) c.message += (c.message.empty() ? "" : "; ") + std::string("throttled: ") + m->throttle_note;
    checks[i] = check_summary;
    if (o.events_with_plans && c.timed()) {
      auto plan = guarded("serialize", [&] { return backend.serialize(i); });
      if (plan.is_ok()) plan_for_event = std::move(plan).value();
    }
    finish();
  }
  stop = true;
  for (auto& t : pool) t.join();
  r.build_wall_ms = std::chrono::duration<double, std::milli>(last_build - first_build).count();

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
