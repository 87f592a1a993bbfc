// kiln/tune/build_helpers.h: runtime-compiled candidates built in helper processes (issue 37, tuning cost).
// cuDNN compiles one runtime-compiled kernel at a time per process, whatever the number of threads and
// handles: on an H100, 26 RMS-norm candidates built on 16 threads finished one after another (7.3 s), and
// four `kiln tune` processes side by side each took that same time (bench/results/h100/build-helpers/). So
// a tune hands its runtime-compiled candidates to helper processes (`kiln build-helper`, started fresh: a CUDA
// context does not survive fork) that build the configuration, serialize the plan and send the bytes back;
// the tuner deserializes it (host work of ~20 ms) and gates and times it like any other candidate, so a
// helper can make a tune slower or faster but never admit a wrong plan.
//
// The channel is a stream socket (the helper's fd 3): messages are an 8-byte little-endian length and a
// payload. The parent sends a hello (JSON: the graph as a spec, its structure signature, the device), the
// helper answers {"code": 0, "cudnn": version} or an error; then each request {"config": identity} is
// answered by {"code": 0, "workspace": bytes} and the plan bytes, or {"code": N, "message": "..."}.
//
// A helper that cannot start (no executable, no GPU, another cuDNN than the tuner's) turns the pool off:
// every build goes back to the tuner's threads, and the reason is logged once. A helper that dies while
// building fails that candidate ("build helper ... ended by signal 11 (SIGSEGV) while building eng4_..."), as
// the crash-isolated tune does, and a new one starts for the next build.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/tune/build_helper_options.h"

namespace kiln {

// One helper: the parent's end of its channel and its process (-1 for a test's thread).
struct BuildHelperChannel {
  int fd = -1;
  pid_t pid = -1;
};
using BuildHelperLauncher = std::function<StatusOr<BuildHelperChannel>()>;

// Starts `executable args...` with one end of a socket pair as its fd 3.
BuildHelperLauncher process_build_helper_launcher(const BuildHelperOptions& options);

// What one build in a helper came to.
struct HelperBuild {
  enum class Kind {
    kBuilt,      // plan and workspace hold the helper's plan
    kFailed,     // the build's own error (NotSupported for a configuration cuDNN refuses), or the helper died
    kNoHelpers,  // the pool is off (`status` says why): build on this thread instead
  };
  Kind kind = Kind::kNoHelpers;
  Status status;
  std::vector<uint8_t> plan;
  int64_t workspace = 0;
};

class BuildHelperPool {
 public:
  // Launches `processes` helpers at once (their start overlaps the tuner's own) and sends each the hello;
  // `cudnn_version` is what the helpers' cuDNN must be (0: not checked).
  BuildHelperPool(std::string graph_spec, std::string structure, int device, int64_t cudnn_version, int processes,
                  BuildHelperLauncher launch);
  ~BuildHelperPool();  // closes the channels: each helper ends (reaped on a thread; one still busy after 2 s killed)
  BuildHelperPool(const BuildHelperPool&) = delete;
  BuildHelperPool& operator=(const BuildHelperPool&) = delete;

  // Builds `config` in helper `slot % processes` (one build at a time per helper).
  HelperBuild build(size_t slot, const EngineConfig& config);

  // Whether helper `slot % processes` would take a build now (started, its hello answered, not building),
  // without waiting: while helpers start (a CUDA context each, ~1 s for 8 side by side), the tuner builds in
  // its own process instead.
  bool ready(size_t slot);

  int processes() const { return static_cast<int>(helpers_.size()); }
  int builds_done() const { return built_.load(); }  // plans helpers sent back
  // Why the pool is off ("" while it is on).
  std::string off_reason() const;

 private:
  struct Helper {
    std::mutex mu;
    BuildHelperChannel ch;
    bool greeted = false;  // the hello's answer was read
    int crashes = 0;
  };
  Status launch_and_greet(size_t i, Helper& h, bool wait_for_answer);
  Status read_greeting(size_t i, Helper& h);
  void end(Helper& h);              // closes the channel and kills the process (one that refused or broke the protocol)
  std::string end_dead(Helper& h);  // reaps a helper whose channel ended and says how it ended
  void count_crash(size_t i, Helper& h);  // the third crash of one helper turns the pool off
  std::string died_message(size_t i, Helper& h, const EngineConfig& config);
  void turn_off(const std::string& why);

  const std::string hello_;
  const int64_t cudnn_version_;
  BuildHelperLauncher launch_;
  std::vector<std::unique_ptr<Helper>> helpers_;
  mutable std::mutex off_mu_;
  std::string off_;
  std::atomic<int> built_{0};
};

// The helper's side: answers the hello and then one build request after another on `fd` until the parent
// closes it. `parse_graph` turns the hello's spec into a graph; `build` makes one configuration's plan
// ({plan bytes, workspace}); `setup` runs once after the hello is read (binding the device, making the
// handle) and its error is the hello's answer. Returns when the channel ends (OK) or on a protocol error.
struct HelperBuilder {
  std::function<StatusOr<Graph>(const std::string& spec)> parse_graph;
  std::function<Status(const Graph& graph, int device)> setup;
  std::function<StatusOr<std::pair<std::vector<uint8_t>, int64_t>>(const EngineConfig& config)> build;
  int64_t cudnn_version = 0;  // said in the hello's answer
};
Status serve_build_helper(int fd, HelperBuilder& builder);

// Makes this process a build helper on channel `fd` before serve_build_helper: InvalidArgument when `fd` is not
// open (`who` names the command); SIGINT and SIGTERM ignored (a tuner's Ctrl-C or its group's SIGTERM are the
// tuner's to handle: it finishes the candidates in progress, some built here); and `on_channel_end` called from a
// watching thread as soon as the channel ends, the tuner done or dead, even in the middle of a build (the helper
// programs pass one that ends the process: the library itself never exits). Not PR_SET_PDEATHSIG: that fires
// when the *thread* that started the helper ends, and the tuner starts a new helper after a crash on a build
// thread, which may end while another build thread still uses that helper.
Status become_build_helper(int fd, const std::string& who, std::function<void()> on_channel_end);

// The cuDNN builder for serve_build_helper (the lowering's build_config and serialize on one handle).
HelperBuilder cudnn_helper_builder(std::function<StatusOr<Graph>(const std::string& spec)> parse_graph);

// How many helpers a tune on this machine starts by default: half the hardware threads, at most 6, none below
// 4 threads. Each helper makes a CUDA context, and contexts made side by side wait for each other (8 took
// 0.9 s on an H100 host, one 0.19 s): 6 tuned the suite's norms faster than 8, and 12 slower than 8
// (docs/measure.md).
int default_build_helper_processes();

}  // namespace kiln
