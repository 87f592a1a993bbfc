// A tuning that survives a crashing candidate (kiln/tune/tune_supervisor.h): the worker's events on a pipe, the
// supervisor's bookkeeping of what was in flight when a worker died, and the merge.
#include "kiln/tune/tune_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "tune/tuner_internal.h"

namespace kiln {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr EnumName<TuneEvent::Kind> kTuneEventKindNames[] = {
    {TuneEvent::Kind::kCandidates, "candidates"},  {TuneEvent::Kind::kPrepared, "prepared"},
    {TuneEvent::Kind::kBuildStart, "build_start"}, {TuneEvent::Kind::kBuildEnd, "build_end"},
    {TuneEvent::Kind::kRunStart, "run_start"},     {TuneEvent::Kind::kCandidate, "candidate"}};

const char* kind_name(TuneEvent::Kind k) { return enum_name(kTuneEventKindNames, k); }

std::string hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = digits[bytes[i] >> 4];
    s[2 * i + 1] = digits[bytes[i] & 15];
  }
  return s;
}

StatusOr<std::vector<uint8_t>> unhex(const std::string& s) {
  if (s.size() % 2) return corruption("odd hex length");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return corruption("bad hex digit");
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

// A worker's error, written as the last line before it exits.
std::string error_line(const Status& st) {
  return Json{{"error", {{"code", static_cast<int>(st.code())}, {"message", st.message()}}}}.dump();
}

// Writes a whole line (a pipe may take it in pieces); a parent gone is not an error of the tuning.
void write_line(int fd, std::string line) {
  line.push_back('\n');
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The crash itself: no core file (a test crashes on purpose), then the signal.
[[noreturn]] void crash_now(int sig) {
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  ::_exit(128 + sig);  // a signal that does not kill: end as if it had
}

class CrashingBackend : public TuneBackend {
 public:
  CrashingBackend(std::unique_ptr<TuneBackend> inner, std::string identity, std::string phase, int sig)
      : inner_(std::move(inner)), identity_(std::move(identity)), phase_(std::move(phase)), sig_(sig) {}
  StatusOr<std::vector<CandidateInfo>> candidates(const std::vector<HeuristicMode>& modes) override {
    return inner_->candidates(modes);
  }
  StatusOr<int64_t> build(size_t worker, size_t index, const EngineConfig& config) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids_[index] = config.identity();
    }
    if (phase_ == "build" && config.identity() == identity_) crash_now(sig_);
    return inner_->build(worker, index, config);
  }
  StatusOr<ReferenceKind> prepare(bool verify) override { return inner_->prepare(verify); }
  StatusOr<CheckReport> run_and_check(size_t index) override {
    crash_if_run(index);
    return inner_->run_and_check(index);
  }
  Status run_once(size_t index) override {
    crash_if_run(index);
    return inner_->run_once(index);
  }
  StatusOr<Measurement> time(size_t index, const MeasureOptions& options) override {
    return inner_->time(index, options);
  }
  StatusOr<std::vector<uint8_t>> serialize(size_t index) override { return inner_->serialize(index); }
  void release(size_t index) override { inner_->release(index); }
  void will_build(const std::vector<EngineConfig>& runtime_compiled) override { inner_->will_build(runtime_compiled); }
  int build_lanes() const override { return inner_->build_lanes(); }
  void end_builds() override { inner_->end_builds(); }
  std::shared_ptr<const GraphEvaluation> evaluation() const override { return inner_->evaluation(); }
  std::string inputs_description() const override { return inner_->inputs_description(); }
  double work_flops() const override { return inner_->work_flops(); }
  double work_bytes() const override { return inner_->work_bytes(); }

 private:
  void crash_if_run(size_t index) {
    std::string id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = ids_[index];
    }
    if (phase_ == "run" && id == identity_) crash_now(sig_);
  }
  std::unique_ptr<TuneBackend> inner_;
  std::string identity_, phase_;
  int sig_;
  std::mutex mu_;
  std::map<size_t, std::string> ids_;
};

}  // namespace

std::string tune_event_to_json(const TuneEvent& e) {
  Json j = {{"kind", kind_name(e.kind)}};
  switch (e.kind) {
    case TuneEvent::Kind::kCandidates:
      j["identities"] = e.identities;
      j["notes"] = e.notes;
      j["ranks"] = e.ranks;
      break;
    case TuneEvent::Kind::kPrepared:
      j["reference_kind"] = reference_kind_name(e.reference_kind);
      j["inputs"] = e.inputs;
      j["prepare_ms"] = e.prepare_ms;
      break;
    case TuneEvent::Kind::kCandidate:
      j["identity"] = e.identity;
      j["result"] = candidate_to_json(e.result, CandidateJson::kExact);
      j["check"] = e.check;
      if (!e.plan.empty()) j["plan"] = hex(e.plan);
      break;
    default: j["identity"] = e.identity; break;
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StatusOr<TuneEvent> tune_event_from_json(const std::string& line) {
  try {
    const Json j = Json::parse(line);
    TuneEvent e;
    const std::string k = j.at("kind").get<std::string>();
    StatusOr<TuneEvent::Kind> kind = parse_enum(kTuneEventKindNames, k, "tune event kind");
    if (!kind.is_ok()) return corruption("tune event of unknown kind '" + k + "'");
    e.kind = *kind;
    if (j.contains("identity")) e.identity = j["identity"].get<std::string>();
    if (e.kind == TuneEvent::Kind::kCandidates) {
      e.identities = j.at("identities").get<std::vector<std::string>>();
      e.notes = j.at("notes").get<std::vector<std::string>>();
      e.ranks = j.at("ranks").get<std::vector<int>>();
    } else if (e.kind == TuneEvent::Kind::kPrepared) {
      auto kind = parse_reference_kind(j.at("reference_kind").get<std::string>());
      if (!kind.is_ok()) return corruption("tune event: " + kind.status().message());
      e.reference_kind = *kind;
      e.inputs = j.at("inputs").get<std::string>();
      e.prepare_ms = j.at("prepare_ms").get<double>();
    } else if (e.kind == TuneEvent::Kind::kCandidate) {
      StatusOr<CandidateResult> result = candidate_from_json(j.at("result"));
      if (!result.is_ok()) return corruption("tune event: " + result.status().message());
      e.result = std::move(result).value();
      e.check = j.at("check").get<std::string>();
      if (j.contains("plan")) {
        KILN_ASSIGN_OR_RETURN(e.plan, unhex(j["plan"].get<std::string>()));
      }
    }
    return e;
  } catch (const std::exception& ex) {
    return corruption(std::string("malformed tune event: ") + ex.what());
  }
}

Status run_tune_worker(TuneBackend& backend, const std::string& graph_name, TuneOptions options,
                       const WorkerRequest& request, int events_fd) {
  ::signal(SIGPIPE, SIG_IGN);
  std::mutex mu;
  options.skip = request.skip;
  options.pipeline = !request.serial;
  options.time_budget_s = request.time_budget_s;
  options.events_with_plans = true;
  options.progress = nullptr;  // the supervisor reports progress
  options.on_event = [&](const TuneEvent& e) {
    const std::string line = tune_event_to_json(e);
    std::lock_guard<std::mutex> lock(mu);
    write_line(events_fd, line);
  };
  auto r = tune_with_backend(backend, graph_name, options);
  if (!r.is_ok()) {
    write_line(events_fd, error_line(r.status()));
    return r.status();
  }
  return r->cancelled ? cancelled("interrupted") : Status::ok();
}

void write_worker_error(int events_fd, const Status& status) { write_line(events_fd, error_line(status)); }

std::unique_ptr<TuneBackend> crash_injecting_backend(std::unique_ptr<TuneBackend> inner, std::string identity,
                                                     std::string phase, int sig) {
  return std::make_unique<CrashingBackend>(std::move(inner), std::move(identity), std::move(phase), sig);
}

namespace {

// What tune_supervised knows of the tuning across its workers.
struct SupervisedTune {
  struct Settled {
    CandidateResult result;
    std::string check;
    std::vector<uint8_t> plan;
  };
  std::vector<std::string> order, notes;  // every candidate, in enumeration order (the first worker's list)
  std::vector<int> ranks;
  std::map<std::string, Settled> settled;
  ReferenceKind reference_kind = ReferenceKind::kNone;
  std::string inputs;
  double prepare_ms = 0;  // summed over workers: each makes the inputs and reference again
  // The first build's start and the last one's end, as the events came (TuneResult::build_wall_ms).
  std::optional<std::chrono::steady_clock::time_point> first_build, last_build;
  bool serial = false, cancelled_run = false, budget_out = false;
  int crashes = 0;
  std::string abandoned;  // why the candidates left were not run
};

// What one worker was doing, from its events: a crash is blamed on the candidate it was building or running.
struct WorkerWatch {
  std::set<std::string> building;
  std::string running;
  std::optional<Status> worker_error;  // the error line it sent, if any
};

// One line of a worker's events: an error, or a TuneEvent that the tuning and the watch take in.
Status handle_worker_line(const std::string& line, const TuneOptions& o, SupervisedTune& st, WorkerWatch& watch) {
  if (line.rfind("{\"error\"", 0) == 0) {
    try {
      const Json j = Json::parse(line).at("error");
      watch.worker_error = Status(static_cast<StatusCode>(j.at("code").get<int>()), j.at("message").get<std::string>());
    } catch (const std::exception& ex) {
      watch.worker_error = internal_error(std::string("malformed worker error: ") + ex.what());
    }
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(TuneEvent e, tune_event_from_json(line));
  switch (e.kind) {
    case TuneEvent::Kind::kCandidates:
      if (st.order.empty()) {
        st.order = e.identities;
        st.notes = e.notes;
        st.ranks = e.ranks;
      }
      break;
    case TuneEvent::Kind::kPrepared:
      st.reference_kind = e.reference_kind;
      st.inputs = e.inputs;
      st.prepare_ms += e.prepare_ms;
      break;
    case TuneEvent::Kind::kBuildStart:
      watch.building.insert(e.identity);
      if (!st.first_build) st.first_build = std::chrono::steady_clock::now();
      break;
    case TuneEvent::Kind::kBuildEnd:
      watch.building.erase(e.identity);
      st.last_build = std::chrono::steady_clock::now();
      break;
    case TuneEvent::Kind::kRunStart: watch.running = e.identity; break;
    case TuneEvent::Kind::kCandidate:
      watch.building.erase(e.identity);
      if (watch.running == e.identity) watch.running.clear();
      st.settled[e.identity] = SupervisedTune::Settled{e.result, e.check, std::move(e.plan)};
      if (o.progress) o.progress(st.settled.size(), st.order.size(), e.identity);
      break;
  }
  return Status::ok();
}

// The one candidate a worker was on when it died: settled as Failed, so that the next worker skips it.
void settle_crashed(const std::string& id, const std::string& how, bool building, pid_t pid, const TuneOptions& o,
                    SupervisedTune& st) {
  auto cfg = EngineConfig::parse(id);
  size_t pos = 0;
  while (pos < st.order.size() && st.order[pos] != id) ++pos;
  SupervisedTune::Settled s;
  s.result = tune_internal::result_for(cfg.is_ok() ? *cfg : EngineConfig{}, pos < st.ranks.size() ? st.ranks[pos] : -1);
  s.result.disposition = Disposition::kFailed;
  s.result.message = "crashed: " + how + " while " + (building ? "building" : "running") + " it (worker process " +
                     std::to_string(pid) + "); excluded, the tune went on";
  st.settled[id] = std::move(s);
  if (o.progress) o.progress(st.settled.size(), st.order.size(), id);
}

// The tuning's result from what its workers settled (the candidates none reached: NotVerified, with why),
// and its winner, decided as in process.
StatusOr<TuneResult> supervised_result(SupervisedTune& st, const std::string& graph_name, const TuneOptions& o) {
  const std::vector<std::string>& order = st.order;
  const std::vector<int>& ranks = st.ranks;
  const ReferenceKind reference_kind = st.reference_kind;
  const bool cancelled_run = st.cancelled_run, budget_out = st.budget_out;
  const std::string& abandoned = st.abandoned;
  auto& settled = st.settled;
  TuneResult r;
  r.graph_name = graph_name;
  r.reference_kind = reference_kind;
  r.inputs = st.inputs;
  r.prepare_wall_ms = st.prepare_ms;
  if (st.first_build && st.last_build)
    r.build_wall_ms = std::chrono::duration<double, std::milli>(*st.last_build - *st.first_build).count();
  r.behavior_notes = st.notes;
  r.cancelled = cancelled_run;
  r.budget_exhausted = budget_out;
  std::vector<EngineConfig> configs;
  std::vector<std::string> checks;
  std::map<size_t, std::vector<uint8_t>> plans;
  for (size_t i = 0; i < order.size(); ++i) {
    auto cfg = EngineConfig::parse(order[i]);
    configs.push_back(cfg.is_ok() ? *cfg : EngineConfig{});
    auto it = settled.find(order[i]);
    if (it != settled.end()) {
      r.candidates.push_back(it->second.result);
      checks.push_back(it->second.check);
      plans[i] = std::move(it->second.plan);
      if (it->second.result.message.find("time budget reached") != std::string::npos) r.budget_exhausted = true;
      continue;
    }
    CandidateResult c = tune_internal::result_for(configs.back(), i < ranks.size() ? ranks[i] : -1);
    c.disposition = Disposition::kNotVerified;
    c.message = cancelled_run ? "not run: interrupted"
                : budget_out  ? "not run: time budget reached"
                              : "not run: " + abandoned;
    r.candidates.push_back(c);
    checks.emplace_back();
  }
  const bool verifying = o.verify && reference_kind != ReferenceKind::kNone;
  KILN_RETURN_IF_ERROR(
      tune_internal::decide_winner(r, configs, checks, verifying, o, [&](size_t wi) -> StatusOr<std::vector<uint8_t>> {
        auto it = plans.find(wi);
        if (it == plans.end() || it->second.empty())
          return internal_error("the worker did not send the plan of the winner " + order[wi]);
        return it->second;
      }));
  return r;
}

}  // namespace

StatusOr<TuneResult> tune_supervised(const SpawnWorker& spawn, const std::string& graph_name, const TuneOptions& o,
                                     int max_restarts) {
  const auto t0 = Clock::now();
  SupervisedTune st;
  const std::vector<std::string>& order = st.order;
  auto& settled = st.settled;
  bool& cancelled_run = st.cancelled_run;
  std::string& abandoned = st.abandoned;
  auto elapsed_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  while (true) {
    if (!order.empty() && settled.size() >= order.size()) break;  // nothing left for a worker
    WorkerRequest req;
    for (const auto& [id, s] : settled) req.skip.push_back(id);
    req.serial = st.serial;
    req.attempt = st.crashes;
    if (o.time_budget_s > 0) {
      req.time_budget_s = o.time_budget_s - elapsed_s();
      if (req.time_budget_s <= 0) {
        st.budget_out = true;
        break;
      }
    }
    if (o.cancel && o.cancel->load()) {
      cancelled_run = true;
      break;
    }
    KILN_ASSIGN_OR_RETURN(WorkerProcess w, spawn(req));
    WorkerWatch watch;
    const std::set<std::string>& building = watch.building;
    const std::optional<Status>& worker_error = watch.worker_error;
    std::string buffer;
    bool sent_term = false;
    const size_t settled_before = settled.size();
    Status read_status;
    char chunk[1 << 16];
    while (true) {
      if (o.cancel && o.cancel->load() && !sent_term) {
        ::kill(w.pid, SIGTERM);  // the worker finishes its candidate, reports, and exits
        sent_term = true;
      }
      pollfd pfd{w.events_fd, POLLIN, 0};
      const int pr = ::poll(&pfd, 1, 200);
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) continue;
      const ssize_t n = ::read(w.events_fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EOF: the worker is gone
      buffer.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        Status line_status = handle_worker_line(buffer.substr(0, nl), o, st, watch);
        buffer.erase(0, nl + 1);
        if (!line_status.is_ok() && read_status.is_ok()) read_status = line_status;
      }
    }
    ::close(w.events_fd);
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!read_status.is_ok()) return read_status.with_context("tune worker of '" + graph_name + "'");
    if (WIFEXITED(status)) {
      const int code = WEXITSTATUS(status);
      if (code == 0) break;  // every candidate it was given is settled
      if (worker_error && worker_error->code() == StatusCode::kCancelled) {
        cancelled_run = true;
        break;
      }
      if (sent_term || (worker_error && worker_error->code() == StatusCode::kCancelled) || code == 130) {
        cancelled_run = true;
        break;
      }
      if (worker_error && settled.empty()) return *worker_error;  // e.g. no candidates, no device: as in process
      if (settled.empty())
        return internal_error("tune worker of '" + graph_name + "' exited with code " + std::to_string(code));
      abandoned = worker_error ? worker_error->message() : "worker exited with code " + std::to_string(code);
      break;
    }
    const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (sent_term && sig == SIGTERM) {
      cancelled_run = true;
      break;
    }
    ++st.crashes;
    std::vector<std::string> suspects(building.begin(), building.end());
    if (!watch.running.empty() && !building.count(watch.running)) suspects.push_back(watch.running);
    const std::string how = "signal " + std::to_string(sig) + " (" + tune_internal::signal_name(sig) + ")";
    if (suspects.size() == 1) {
      settle_crashed(suspects[0], how, building.count(suspects[0]) > 0, w.pid, o, st);
    } else if (suspects.size() > 1) {
      st.serial = true;  // the next worker builds and runs one candidate at a time: its crash names one
    } else if (settled.size() == settled_before) {
      // Dead outside any candidate and nothing gained: no point in starting again.
      if (order.empty())
        return internal_error("tune worker of '" + graph_name + "' died by " + how + " before its first candidate");
      abandoned = "worker died by " + how + " outside a candidate";
      break;
    }
    if (st.crashes > max_restarts) {
      abandoned = "worker crashed " + std::to_string(st.crashes) + " times";
      break;
    }
  }

  KILN_ASSIGN_OR_RETURN(TuneResult r, supervised_result(st, graph_name, o));
  r.total_wall_ms = elapsed_s() * 1000.0;
  return r;
}

namespace {

// The options a worker needs (the winner rule, incumbent, progress and cancel stay with the supervisor).
StatusOr<TuneOptions> options_from_json(const Json& j) {
  TuneOptions o;
  o.modes.clear();
  for (const auto& m : j.at("modes")) {
    KILN_ASSIGN_OR_RETURN(HeuristicMode mode, parse_heuristic_mode(m.get<std::string>()));
    o.modes.push_back(mode);
  }
  o.top_k = j.at("top_k").get<int>();
  o.budget.exhaustive = true;  // options from a worker that knows no candidate budget: every candidate, as it did
  if (j.contains("budget")) {
    const Json& b = j.at("budget");
    o.budget.exhaustive = b.at("exhaustive").get<bool>();
    o.budget.first = b.at("first").get<int>();
    o.budget.patience = b.at("patience").get<int>();
    o.budget.noise_multiplier = b.at("noise_multiplier").get<double>();
    o.budget.noise_floor = b.at("noise_floor").get<double>();
    o.budget.prior = b.at("prior").get<std::vector<std::string>>();
  }
  o.max_workspace_bytes = j.at("max_workspace_bytes").get<int64_t>();
  o.exclude = j.at("exclude").get<std::vector<std::string>>();
  const std::string pin = j.at("pin").get<std::string>();
  if (!pin.empty()) {
    KILN_ASSIGN_OR_RETURN(o.pin, EngineConfig::parse(pin));
  }
  o.build_threads = j.at("build_threads").get<int>();
  if (j.contains("build_helpers")) {
    const Json& h = j.at("build_helpers");
    o.build_helpers.executable = h.at("executable").get<std::string>();
    o.build_helpers.args = h.at("args").get<std::vector<std::string>>();
    o.build_helpers.processes = h.at("processes").get<int>();
  }
  o.measure.hot_cache = j.at("hot_cache").get<bool>();
  o.measure.settle_us = j.value("settle_us", o.measure.settle_us);  // absent from an older tune's options
  o.graph_replay = j.value("graph_replay", false);
  o.measure.stopping.time_budget_ms = j.at("sampling_budget_ms").get<double>();
  o.measure.stopping.target_rel_error = j.at("target_rel_error").get<double>();
  o.seed = j.at("seed").get<uint64_t>();
  o.verify = j.at("verify").get<bool>();
  o.host_reference = j.at("host_reference").get<bool>();
  o.inputs_dir = j.at("inputs_dir").get<std::string>();
  o.check.allow_tf32 = j.at("allow_tf32").get<bool>();
  o.check.tolerance_scale = j.at("tolerance_scale").get<double>();
  return o;
}

}  // namespace

std::string tune_worker_options_to_json(const TuneOptions& o) {
  Json modes = Json::array();
  for (HeuristicMode m : o.modes) modes.push_back(heuristic_mode_name(m));
  return Json{{"modes", modes},
              {"top_k", o.top_k},
              {"budget",
               {{"exhaustive", o.budget.exhaustive},
                {"first", o.budget.first},
                {"patience", o.budget.patience},
                {"noise_multiplier", o.budget.noise_multiplier},
                {"noise_floor", o.budget.noise_floor},
                {"prior", o.budget.prior}}},
              {"max_workspace_bytes", o.max_workspace_bytes},
              {"exclude", o.exclude},
              {"pin", o.pin ? o.pin->identity() : ""},
              {"build_threads", o.build_threads},
              {"build_helpers",
               {{"executable", o.build_helpers.executable},
                {"args", o.build_helpers.args},
                {"processes", o.build_helpers.processes}}},
              {"hot_cache", o.measure.hot_cache},
              {"settle_us", o.measure.settle_us},
              {"graph_replay", o.graph_replay},
              {"sampling_budget_ms", o.measure.stopping.time_budget_ms},
              {"target_rel_error", o.measure.stopping.target_rel_error},
              {"seed", o.seed},
              {"verify", o.verify},
              {"host_reference", o.host_reference},
              {"inputs_dir", o.inputs_dir},
              {"allow_tf32", o.check.allow_tf32},
              {"tolerance_scale", o.check.tolerance_scale}}
      .dump();
}

StatusOr<TuneOptions> tune_worker_options_from_json(const std::string& text) {
  try {
    return options_from_json(Json::parse(text));
  } catch (const std::exception& e) {
    return invalid_argument(std::string("tune worker options: ") + e.what());
  }
}

namespace tune_internal {

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

}  // namespace tune_internal

}  // namespace kiln
