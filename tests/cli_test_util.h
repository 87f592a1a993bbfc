// Helpers for tests that run the built `kiln` binary as a user runs it (CUTLASS runs its profiler from CTest):
// one way to run it (kiln::test::run_kiln), one result (CliResult: exit code, stdout and stderr apart), and a
// temporary folder of the test's own (TempDir).
//
// The host tier never lets the binary see a GPU: in a host test executable (tests/CMakeLists.txt defines
// KILN_HOST_TIER there) every run hides the CUDA devices from the child (CUDA_VISIBLE_DEVICES=), so a case
// that would go on to the GPU where one is present finds none, as on a CPU-only machine; the `gpu` tier's
// runs see the machine's devices. A host case whose result depends on the CUDA *driver* being installed
// (hiding the devices leaves the driver) asks cuda_driver_installed(), which touches no device.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/cuda/device.h"

extern char** environ;  // NOLINT: POSIX declares it nowhere

namespace kiln::test {

#ifdef KILN_HOST_TIER
inline constexpr bool kHostTier = true;
#else
inline constexpr bool kHostTier = false;
#endif

// What one run of the binary did.
struct CliResult {
  int code = -1;           // the exit status; -1 when it did not exit by itself (signal, timeout) or did not start
  int signal = 0;          // the signal that ended it, else 0
  bool timed_out = false;  // killed after CliOptions::timeout_s
  std::string out, err;    // standard output and standard error, each as written
  // Standard output followed by standard error, for checks that do not care which stream a line went to.
  std::string output() const { return out + err; }
  // "exit 2", "signal 11 (Segmentation fault)", "timed out after 600 s": for failure messages.
  std::string how_it_ended() const;
};

struct CliOptions {
  std::string stdin_text;                                // the child's standard input (default: empty, EOF at once)
  std::vector<std::pair<std::string, std::string>> env;  // variables set for the child only (NAME, value)
  std::vector<std::string> unset_env;                    // variables removed for the child only
  bool hide_gpu = kHostTier;                             // CUDA_VISIBLE_DEVICES= for the child (host tier: always)
  double timeout_s = 600;  // then the child is killed and the run fails its test, never hangs CI
};

// `text` as one word for /bin/sh: single-quoted, with any ' inside written as '\''.
inline std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The whole contents of a file ("" when it cannot be read).
inline std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CUDA driver is installed (libcuda loads): asks its version, which looks at no device.
inline bool cuda_driver_installed() { return ::kiln::cuda_driver_version() != 0; }

inline std::string CliResult::how_it_ended() const {
  if (timed_out) return "timed out (killed)";
  if (signal != 0) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  if (code < 0) return "did not start";
  return "exit " + std::to_string(code);
}

namespace detail {

// The child's environment: this process's, less what `o` removes or sets.
inline std::vector<std::string> child_environment(const CliOptions& o) {
  std::vector<std::pair<std::string, std::string>> set = o.env;
  if (o.hide_gpu) set.emplace_back("CUDA_VISIBLE_DEVICES", "");
  auto named = [](const std::string& entry, const std::string& name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=';
  };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    bool drop = false;
    for (const std::string& name : o.unset_env) drop = drop || named(entry, name);
    for (const auto& [name, value] : set) drop = drop || named(entry, name);
    if (!drop) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

}  // namespace detail

// Runs /bin/sh -c `command` (its own process group) with `o`'s input and environment, and collects both
// output streams apart. Everything the child needs is made before fork().
inline CliResult run_shell(const std::string& command, const CliOptions& o = {}) {
  CliResult r;
  const std::vector<std::string> env = detail::child_environment(o);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  int in[2], out[2], err[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0 || ::pipe(err) != 0) {
    r.err = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::fflush(nullptr);  // nothing buffered here is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.err = std::string("fork: ") + std::strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    return r;
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // a timeout kills the shell and everything it started
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    ::execve(argv[0], const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever of the two runs first
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  int to_child = in[1];
  size_t written = 0;
  if (o.stdin_text.empty()) {
    ::close(to_child);
    to_child = -1;
  } else {
    ::signal(SIGPIPE, SIG_IGN);  // a child that stops reading is an EPIPE here, not the end of the test
    ::fcntl(to_child, F_SETFL, ::fcntl(to_child, F_GETFL) | O_NONBLOCK);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  int from[2] = {out[0], err[0]};
  std::string* into[2] = {&r.out, &r.err};
  while (from[0] >= 0 || from[1] >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      if (::kill(-pid, SIGKILL) != 0) ::kill(pid, SIGKILL);  // the group, or the shell alone if it has none
      break;
    }
    pollfd fds[3] = {{from[0], POLLIN, 0}, {from[1], POLLIN, 0}, {to_child, POLLOUT, 0}};
    if (::poll(fds, 3, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (from[i] < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(from[i], buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(from[i]);
        from[i] = -1;
      }
    }
    if (to_child >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(to_child, o.stdin_text.data() + written, o.stdin_text.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == o.stdin_text.size()) {
        ::close(to_child);
        to_child = -1;
      }
    }
  }
  for (int fd : {from[0], from[1], to_child})
    if (fd >= 0) ::close(fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && !r.timed_out) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !r.timed_out) r.signal = WTERMSIG(status);
  return r;
}

// Runs the built kiln binary with `args`, written as after `kiln` in a shell (words split at spaces; quote a
// word with shell_quote() where it may hold a space or a shell character).
inline CliResult run_kiln(const std::string& args, const CliOptions& o = {}) {
  return run_shell(shell_quote(KILN_BINARY) + " " + args, o);
}

// Runs the built kiln binary as a user without privileges: as root (a container, CI), through
// `setpriv --reuid=65534` (nobody), since root writes a read-only file and enters any folder; as anyone
// else, as it is. Whatever the binary must reach (its folders, the test's files) must be open to others.
// `skipped` is set, and nothing run, when root has no setpriv.
inline CliResult run_kiln_unprivileged(const std::string& args, bool* skipped, const CliOptions& o = {}) {
  *skipped = false;
  if (::geteuid() != 0) return run_kiln(args, o);
  if (::access("/usr/bin/setpriv", X_OK) != 0) {
    *skipped = true;
    return {};
  }
  return run_shell(
      "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups " + shell_quote(KILN_BINARY) + " " + args, o);
}

// Runs the built kiln binary with these arguments, each passed as it is (no shell word splitting).
inline CliResult run_kiln_argv(const std::vector<std::string>& args, const CliOptions& o = {}) {
  std::string line;
  for (const std::string& a : args) line += (line.empty() ? "" : " ") + shell_quote(a);
  return run_kiln(line, o);
}

// A fresh folder of this test's own (mkdtemp under the system's temporary folder; CTest runs cases in
// parallel processes), removed with everything in it when it goes out of scope unless KILN_KEEP_TEST_DIRS
// is set. A folder that cannot be made fails the current test (path() is then empty).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kiln_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    const char* p = ::mkdtemp(tmpl.data());
    path_ = p ? p : "";
    if (!p) ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty() && !std::getenv("KILN_KEEP_TEST_DIRS")) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` in the folder (nothing is created).
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `text` to `name` in the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace kiln::test
