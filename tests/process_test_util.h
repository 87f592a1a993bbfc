// The multi-process harness: tests that need several processes at once (writers on one store file, a
// writer killed mid-write) fork children that run a function, and collect how each ended. Every wait has a
// deadline: a child that hangs is killed and fails its test, instead of hanging CI.
//
// A child reports by its exit code (the function's return value): GoogleTest's assertions in a forked child
// would be counted by nobody, so a child prints what went wrong to stderr and returns nonzero.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kiln::test {

// How one child ended.
struct ChildExit {
  pid_t pid = -1;
  bool exited = false;     // it returned (or called exit) by itself: `code` holds the exit code
  int code = -1;           // the exit code when `exited`
  int signal = 0;          // the signal that ended it, else 0
  bool timed_out = false;  // still running at the deadline: killed (SIGKILL) by the harness
  // "exit 0", "signal 9 (Killed)", "timed out after 120 s (killed)": for failure messages.
  std::string how_it_ended() const {
    if (timed_out) return "timed out (killed by the harness)";
    if (signal != 0) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    if (!exited) return "did not start";
    return "exit " + std::to_string(code);
  }
};

// One forked child running a function.
class ChildProcess {
 public:
  // Forks; the child runs `body` and exits with what it returns (stdio flushed, no destructors of the
  // parent's objects run: _exit).
  explicit ChildProcess(const std::function<int()>& body) {
    std::fflush(nullptr);  // nothing buffered here is written twice
    pid_ = ::fork();
    if (pid_ == 0) {
      const int code = body();
      std::fflush(nullptr);
      ::_exit(code);
    }
    exit_.pid = pid_;
  }
  ~ChildProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Sends `sig` (e.g. SIGKILL to stop a writer wherever it is); false when it could not be sent.
  bool kill(int sig) const { return started() && !ended_ && ::kill(pid_, sig) == 0; }

  // Waits up to `timeout_s` seconds for the child to end; one still running then is killed and reported
  // timed out.
  ChildExit wait(double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (running() && !reap(false)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        reap(true);
        exit_.timed_out = true;
        exit_.signal = 0;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exit_;
  }

 private:
  bool running() const { return started() && !ended_; }
  // Collects the child's status (waiting for it when `block`); true once it has ended.
  bool reap(bool block) {
    int status = 0;
    pid_t got;
    while ((got = ::waitpid(pid_, &status, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {
    }
    if (got != pid_) return false;
    ended_ = true;
    exit_.exited = WIFEXITED(status);
    exit_.code = exit_.exited ? WEXITSTATUS(status) : -1;
    exit_.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return true;
  }

  pid_t pid_ = -1;
  bool ended_ = false;
  ChildExit exit_;
};

// Runs `body(i)` for i = 0 .. n-1, each in a child of its own, all at once, and waits for them all: the
// deadline is `timeout_s` seconds from the start for every child together. Returns how each ended, in order
// of i; a child that could not be forked is reported as not started (pid -1).
inline std::vector<ChildExit> run_in_children(int n, const std::function<int(int)>& body, double timeout_s) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < n; ++i) children.push_back(std::make_unique<ChildProcess>([&body, i] { return body(i); }));
  const auto start = std::chrono::steady_clock::now();
  std::vector<ChildExit> exits;
  for (auto& c : children) {
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    exits.push_back(c->started() ? c->wait(timeout_s - spent) : ChildExit{});
  }
  return exits;
}

// A one-way "I am ready" from a child to the parent (a pipe), read with a deadline: a child that dies first
// or hangs first is a false, never a hang.
class ReadySignal {
 public:
  ReadySignal() {
    if (::pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~ReadySignal() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  ReadySignal(const ReadySignal&) = delete;
  ReadySignal& operator=(const ReadySignal&) = delete;

  // In the child: says it is ready (once).
  bool signal() {
    const char c = 1;
    const bool ok = fds_[1] >= 0 && ::write(fds_[1], &c, 1) == 1;
    close_end(1);
    return ok;
  }
  // In the parent, after the fork: true once the child said so within `timeout_s` seconds; false when it
  // ended without saying so, or the time ran out.
  bool wait(double timeout_s) {
    close_end(1);  // the child holds the write end now: its exit is an end of file here
    if (fds_[0] < 0) return false;
    pollfd p{fds_[0], POLLIN, 0};
    int n;
    while ((n = ::poll(&p, 1, static_cast<int>(timeout_s * 1000))) < 0 && errno == EINTR) {
    }
    char c = 0;
    return n == 1 && ::read(fds_[0], &c, 1) == 1;
  }

 private:
  void close_end(int i) {
    if (fds_[i] >= 0) ::close(fds_[i]);
    fds_[i] = -1;
  }
  int fds_[2] = {-1, -1};
};

}  // namespace kiln::test
