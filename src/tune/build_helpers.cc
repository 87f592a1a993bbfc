// Runtime-compiled candidates built in helper processes (kiln/tune/build_helpers.h): the channel's framing, the
// parent's pool and the helper's loop.
#include "kiln/tune/build_helpers.h"

#include <cudnn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/core/log.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/lower/lower.h"
#include "tune/tuner_internal.h"

extern char** environ;

namespace kiln {
namespace {

using Json = nlohmann::json;

// The largest message either side accepts: a plan's bytes are KB to a few MB.
constexpr uint64_t kMaxMessage = uint64_t{1} << 30;

Status send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);  // a closed peer is an error here, never SIGPIPE
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return unavailable(std::string("the channel closed: ") + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

// false at a clean end of the channel before the first byte (`*eof`), an error inside a message.
Status recv_all(int fd, void* data, size_t n, bool* eof) {
  char* p = static_cast<char*>(data);
  const size_t want = n;
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return unavailable(std::string("reading the channel: ") + std::strerror(errno));
    if (r == 0) {
      if (eof && n == want) {
        *eof = true;
        return Status::ok();
      }
      return unavailable("the channel ended inside a message");
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::ok();
}

Status send_message(int fd, const void* data, size_t n) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(n) >> (8 * i)) & 0xff);
  KILN_RETURN_IF_ERROR(send_all(fd, len, sizeof len));
  return send_all(fd, data, n);
}
Status send_json(int fd, const Json& j) {
  const std::string s = j.dump();
  return send_message(fd, s.data(), s.size());
}

// One message; `*eof` set (and nothing read) when the peer closed the channel between messages.
Status recv_message(int fd, std::vector<uint8_t>* out, bool* eof) {
  uint8_t len[8];
  KILN_RETURN_IF_ERROR(recv_all(fd, len, sizeof len, eof));
  if (eof && *eof) return Status::ok();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > kMaxMessage) return corruption("a message of " + std::to_string(n) + " bytes on the build channel");
  // Grown as the bytes come (1 MiB at a time), not sized from the length alone: a length that no payload
  // follows costs no memory.
  out->clear();
  for (size_t got = 0; got < n;) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n - got, uint64_t{1} << 20));
    out->resize(got + step);
    KILN_RETURN_IF_ERROR(recv_all(fd, out->data() + got, step, nullptr));
    got += step;
  }
  return Status::ok();
}
StatusOr<Json> recv_json(int fd, bool* eof) {
  std::vector<uint8_t> m;
  KILN_RETURN_IF_ERROR(recv_message(fd, &m, eof));
  if (eof && *eof) return Json();
  Json j = Json::parse(m.begin(), m.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corruption("a message on the build channel is not a JSON object");
  return j;
}

Json status_json(const Status& st) { return Json{{"code", static_cast<int>(st.code())}, {"message", st.message()}}; }

// A message's whole-number field, `fallback` when it is missing or not a whole number; its text field, "" when
// missing or not a string. Never throws (j.value() would, on a field of another type).
int64_t int_field(const Json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return fallback;
  return it->get<int64_t>();
}
std::string text_field(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The status an answer carries; OK for code 0.
Status status_of(const Json& j) {
  const int64_t code = int_field(j, "code", -1);
  if (code == 0) return Status::ok();
  if (code < 0 || code > static_cast<int64_t>(StatusCode::kInternal))
    return corruption("an answer on the build channel without a valid code");
  return Status(static_cast<StatusCode>(code), text_field(j, "message"));
}

std::string how_it_ended(pid_t pid) {
  if (pid <= 0) return "its channel closed";
  int ws = 0;
  pid_t r = -1;
  for (int i = 0; i < 200; ++i) {  // a dying process closes its socket a moment before it can be reaped
    r = ::waitpid(pid, &ws, WNOHANG);
    if (r != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (r == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &ws, 0);
    return "its channel closed (killed)";
  }
  if (r < 0) return "its channel closed";
  if (WIFSIGNALED(ws)) {
    const int sig = WTERMSIG(ws);
    return "ended by signal " + std::to_string(sig) + " (" + tune_internal::signal_name(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(ws));
}

}  // namespace

BuildHelperLauncher process_build_helper_launcher(const BuildHelperOptions& options) {
  return [exe = options.executable, args = options.args]() -> StatusOr<BuildHelperChannel> {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return unavailable(std::string("cannot make a socket pair for a build helper: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);  // dup2 clears close-on-exec on fd 3
    std::vector<std::string> words{exe};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      return unavailable("cannot start the build helper '" + exe + "': " + std::strerror(rc));
    }
    return BuildHelperChannel{sv[0], pid};
  };
}

BuildHelperPool::BuildHelperPool(std::string graph_spec, std::string structure, int device, int64_t cudnn_version,
                                 int processes, BuildHelperLauncher launch)
    : hello_(Json{{"graph", std::move(graph_spec)}, {"structure", std::move(structure)}, {"device", device}}.dump()),
      cudnn_version_(cudnn_version),
      launch_(std::move(launch)) {
  for (int i = 0; i < std::max(processes, 0); ++i) helpers_.push_back(std::make_unique<Helper>());
  for (size_t i = 0; i < helpers_.size(); ++i) {
    Status st = launch_and_greet(i, *helpers_[i], /*wait_for_answer=*/false);
    if (!st.is_ok()) {
      turn_off(st.message());
      break;
    }
  }
}

BuildHelperPool::~BuildHelperPool() {
  // Every channel closed: each helper ends on its own (a CUDA context's teardown takes a few hundred ms). The
  // tune does not wait for that: a thread reaps them, killing one still busy after 2 s.
  std::vector<pid_t> pids;
  for (auto& h : helpers_) {
    if (h->ch.fd >= 0) {
      ::shutdown(h->ch.fd, SHUT_RDWR);
      ::close(h->ch.fd);
      h->ch.fd = -1;
    }
    if (h->ch.pid > 0) pids.push_back(h->ch.pid);
    h->ch.pid = -1;
  }
  if (pids.empty()) return;
  auto reap = [pids] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (pid_t pid : pids) {
      int ws = 0;
      while (::waitpid(pid, &ws, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &ws, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  };
  try {
    std::thread(reap).detach();
  } catch (const std::exception&) {
    reap();  // no thread to spare: reaped here
  }
}

std::string BuildHelperPool::off_reason() const {
  std::lock_guard<std::mutex> lock(off_mu_);
  return off_;
}

void BuildHelperPool::turn_off(const std::string& why) {
  std::lock_guard<std::mutex> lock(off_mu_);
  if (!off_.empty()) return;
  off_ = why;
  KILN_LOG(kWarn, "build helpers off, building on the tuner's threads: " << why);
}

Status BuildHelperPool::launch_and_greet(size_t i, Helper& h, bool wait_for_answer) {
  KILN_ASSIGN_OR_RETURN(h.ch, launch_());
  h.greeted = false;
  Status st = send_message(h.ch.fd, hello_.data(), hello_.size());
  if (!st.is_ok()) return unavailable("build helper " + std::to_string(i) + " " + end_dead(h) + " before its hello");
  return wait_for_answer ? read_greeting(i, h) : Status::ok();
}

Status BuildHelperPool::read_greeting(size_t i, Helper& h) {
  bool eof = false;
  StatusOr<Json> a = recv_json(h.ch.fd, &eof);
  if (!a.is_ok() || eof)
    return unavailable("build helper " + std::to_string(i) + " " + end_dead(h) + " before answering its hello");
  Status st = status_of(*a);
  if (st.is_ok() && cudnn_version_ > 0 && int_field(*a, "cudnn", 0) != cudnn_version_)
    st = failed_precondition("build helper " + std::to_string(i) + " loaded cuDNN " +
                             std::to_string(int_field(*a, "cudnn", 0)) + ", the tuner " +
                             std::to_string(cudnn_version_));
  if (!st.is_ok()) {
    end(h);
    return Status(st.code(), "build helper " + std::to_string(i) + " refused the graph: " + st.message());
  }
  h.greeted = true;
  return Status::ok();
}

void BuildHelperPool::end(Helper& h) {
  if (h.ch.fd >= 0) {
    ::shutdown(h.ch.fd, SHUT_RDWR);
    ::close(h.ch.fd);
    h.ch.fd = -1;
  }
  if (h.ch.pid > 0) {  // a helper that refused or broke the protocol: nothing of it is wanted
    int ws = 0;
    ::kill(h.ch.pid, SIGKILL);
    ::waitpid(h.ch.pid, &ws, 0);
    h.ch.pid = -1;
  }
  h.greeted = false;
}

std::string BuildHelperPool::end_dead(Helper& h) {
  const std::string how = how_it_ended(h.ch.pid);
  h.ch.pid = -1;  // reaped: never signalled again (its pid may be another process's by now)
  end(h);
  return how;
}

void BuildHelperPool::count_crash(size_t i, Helper& h) {
  if (++h.crashes >= 3) turn_off("build helper " + std::to_string(i) + " crashed 3 times");
}

std::string BuildHelperPool::died_message(size_t i, Helper& h, const EngineConfig& config) {
  const std::string how = end_dead(h);
  count_crash(i, h);
  return "crashed: build helper " + std::to_string(i) + " " + how + " while building " + config.identity();
}

bool BuildHelperPool::ready(size_t slot) {
  if (helpers_.empty() || !off_reason().empty()) return false;
  const size_t i = slot % helpers_.size();
  Helper& h = *helpers_[i];
  std::unique_lock<std::mutex> lock(h.mu, std::try_to_lock);
  if (!lock.owns_lock() || h.ch.fd < 0) return false;  // building, or not started
  if (h.greeted) return true;
  pollfd p{h.ch.fd, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return false;  // its hello's answer has not come
  Status st = read_greeting(i, h);
  if (!st.is_ok()) turn_off(st.message());
  return st.is_ok();
}

HelperBuild BuildHelperPool::build(size_t slot, const EngineConfig& config) {
  HelperBuild out;
  if (helpers_.empty()) {
    out.status = unavailable("no build helpers");
    return out;
  }
  const size_t i = slot % helpers_.size();
  Helper& h = *helpers_[i];
  std::lock_guard<std::mutex> lock(h.mu);
  if (std::string off = off_reason(); !off.empty()) {
    out.status = unavailable(off);
    return out;
  }
  Status st = h.ch.fd < 0 ? launch_and_greet(i, h, true) : (h.greeted ? Status::ok() : read_greeting(i, h));
  if (!st.is_ok()) {
    turn_off(st.message());
    out.status = st;
    return out;
  }
  out.kind = HelperBuild::Kind::kFailed;
  const Json request{{"config", config.identity()}};
  bool sent = send_json(h.ch.fd, request).is_ok();
  if (!sent) {
    // Gone before this request reached it (it died idle): the candidate was never sent, so a new helper takes it.
    (void)end_dead(h);
    count_crash(i, h);
    Status again = h.crashes >= 3 ? unavailable(off_reason()) : launch_and_greet(i, h, true);
    if (!again.is_ok()) {
      turn_off(again.message());
      out.kind = HelperBuild::Kind::kNoHelpers;
      out.status = again;
      return out;
    }
    sent = send_json(h.ch.fd, request).is_ok();
  }
  if (!sent) {
    out.status = internal_error(died_message(i, h, config));
    return out;
  }
  bool eof = false;
  StatusOr<Json> a = recv_json(h.ch.fd, &eof);
  std::vector<uint8_t> plan;
  Status got = a.is_ok() && !eof ? status_of(*a) : Status::ok();
  if (a.is_ok() && !eof && got.is_ok() && !recv_message(h.ch.fd, &plan, nullptr).is_ok()) a = corruption("no plan");
  if (!a.is_ok() || eof) {
    out.status = internal_error(died_message(i, h, config));
    return out;
  }
  if (!got.is_ok()) {
    out.status = got;  // the build's own error, as an in-process build would have said it
    return out;
  }
  out.kind = HelperBuild::Kind::kBuilt;
  out.workspace = int_field(*a, "workspace", 0);
  out.plan = std::move(plan);
  ++built_;
  return out;
}

Status serve_build_helper(int fd, HelperBuilder& builder) {
  const auto t0 = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  bool eof = false;
  KILN_ASSIGN_OR_RETURN(Json hello, recv_json(fd, &eof));
  if (eof) return Status::ok();
  StatusOr<Graph> g = internal_error("unset");
  std::string structure;
  int device = 0;
  try {
    g = builder.parse_graph(hello.at("graph").get<std::string>());
    structure = hello.at("structure").get<std::string>();
    device = hello.at("device").get<int>();
  } catch (const std::exception& e) {
    g = invalid_argument(std::string("malformed hello: ") + e.what());
  }
  Status st = g.status();
  if (st.is_ok()) {
    StatusOr<GraphSignature> sig = compute_signature(*g);
    if (!sig.is_ok()) st = sig.status();
    else if (sig->structure != structure)
      st = invalid_argument("the graph the tuner sent has another signature than the structure it named");
  }
  if (st.is_ok() && builder.setup) st = builder.setup(*g, device);
  KILN_LOG(kInfo, "build helper " << ::getpid() << ": " << (st.is_ok() ? "ready" : "refused the graph") << " after "
                                  << ms_since(t0) << " ms");
  Json answer = status_json(st);
  answer["cudnn"] = builder.cudnn_version;
  KILN_RETURN_IF_ERROR(send_json(fd, answer));
  if (!st.is_ok()) return st;
  for (;;) {
    eof = false;
    KILN_ASSIGN_OR_RETURN(Json req, recv_json(fd, &eof));
    if (eof) return Status::ok();  // the tuner is done
    const auto tb = std::chrono::steady_clock::now();
    StatusOr<EngineConfig> config = EngineConfig::parse(text_field(req, "config"));
    StatusOr<std::pair<std::vector<uint8_t>, int64_t>> built =
        config.is_ok() ? catch_exceptions("building " + config->identity(), [&] { return builder.build(*config); })
                       : StatusOr<std::pair<std::vector<uint8_t>, int64_t>>(config.status());
    if (!built.is_ok()) {
      KILN_RETURN_IF_ERROR(send_json(fd, status_json(built.status())));
      continue;
    }
    KILN_LOG(kInfo, "build helper " << ::getpid() << ": built " << config->identity() << " in " << ms_since(tb)
                                    << " ms (" << ms_since(t0) << " ms after start)");
    KILN_RETURN_IF_ERROR(send_json(fd, Json{{"code", 0}, {"workspace", built->second}}));
    KILN_RETURN_IF_ERROR(send_message(fd, built->first.data(), built->first.size()));
  }
}

Status become_build_helper(int fd, const std::string& who, std::function<void()> on_channel_end) {
  if (::fcntl(fd, F_GETFD) < 0)
    return invalid_argument(who + " is started by a tuner, with its channel on file descriptor " + std::to_string(fd) +
                            " (not open)");
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  try {
    std::thread([fd, on_channel_end = std::move(on_channel_end)] {
      pollfd p{fd, 0, 0};  // POLLHUP and POLLERR are always reported; POLLHUP, not POLLRDHUP: a peer that only
      int r;               // shut down its writing still reads the answers
      while ((r = ::poll(&p, 1, -1)) < 0 && errno == EINTR) {
      }
      if (r == 1 && (p.revents & (POLLHUP | POLLERR)) && on_channel_end) on_channel_end();
      // POLLNVAL or a poll error: the channel's reader says what is wrong.
    }).detach();
  } catch (const std::exception& e) {
    return unavailable(who + ": cannot start the thread that ends it with its channel: " + e.what());
  }
  return Status::ok();
}

HelperBuilder cudnn_helper_builder(std::function<StatusOr<Graph>(const std::string& spec)> parse_graph) {
  struct State {
    Graph graph;
    UniqueCudnnHandle handle;
  };
  auto state = std::make_shared<State>();
  HelperBuilder b;
  b.parse_graph = std::move(parse_graph);
  b.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
  b.setup = [state](const Graph& graph, int device) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    KILN_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));  // the context, now
    const auto t1 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(state->handle, make_cudnn_handle());
    const auto t2 = std::chrono::steady_clock::now();
    using Ms = std::chrono::duration<double, std::milli>;
    const double context_ms = Ms(t1 - t0).count(), handle_ms = Ms(t2 - t1).count();
    KILN_LOG(kInfo, "build helper " << ::getpid() << ": CUDA context " << context_ms << " ms, cuDNN handle "
                                    << handle_ms << " ms");
    state->graph = graph;
    return Status::ok();
  };
  b.build = [state](const EngineConfig& config) -> StatusOr<std::pair<std::vector<uint8_t>, int64_t>> {
    LowerTarget target;
    target.handle = state->handle.get();
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(state->graph, target));
    KILN_RETURN_IF_ERROR(lg.build_config(config));
    KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, lg.serialize());
    return std::make_pair(std::move(bytes), lg.workspace_size());
  };
  return b;
}

int default_build_helper_processes() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return hw < 4 ? 0 : std::min(6, hw / 2);
}

}  // namespace kiln
