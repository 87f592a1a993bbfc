// Build helpers (kiln/tune/build_helpers.h) on the host: the channel between the pool and a helper served on a
// thread (a fake builder), helpers that refuse, crash or never start, and the kiln binary's own helper on a
// machine without a GPU.
#include "kiln/tune/build_helpers.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const char* kSpec = R"({"name": "helper_graph", "io_dtype": "fp16", "compute_dtype": "fp32",
  "tensors": {"x": {"dims": [64, 32, 1, 1], "layout": "NCHW"},
              "gamma": {"dims": [1, 32, 1, 1], "layout": "NCHW", "dtype": "fp32"}},
  "nodes": [{"name": "norm", "op": "rms_norm", "inputs": ["x", "gamma"], "outputs": ["y"], "epsilon": 1e-05}],
  "outputs": ["y"]})";

Graph test_graph() {
  auto g = parse_spec_string(kSpec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return *g;
}

std::string structure_of(const Graph& g) {
  auto sig = compute_signature(g);
  EXPECT_TRUE(sig.is_ok());
  return sig->structure;
}

// Helpers served on threads of this process, each over its own socket pair; `make_builder` gives each new
// helper its builder (and sees its channel, so that a test can cut it).
class ThreadHelpers {
 public:
  explicit ThreadHelpers(std::function<HelperBuilder(int fd)> make_builder) : make_(std::move(make_builder)) {}
  ~ThreadHelpers() {
    for (auto& t : threads_) t.join();
  }
  BuildHelperLauncher launcher() {
    return [this]() -> StatusOr<BuildHelperChannel> {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return unavailable("socketpair");
      ++launched;
      threads_.emplace_back([this, fd = sv[1]] {
        HelperBuilder b = make_(fd);
        (void)serve_build_helper(fd, b);
        ::close(fd);
      });
      return BuildHelperChannel{sv[0], -1};
    };
  }
  std::atomic<int> launched{0};

 private:
  std::function<HelperBuilder(int)> make_;
  std::vector<std::thread> threads_;
};

HelperBuilder fake_builder(
    std::function<StatusOr<std::pair<std::vector<uint8_t>, int64_t>>(const EngineConfig&)> build) {
  HelperBuilder b;
  b.parse_graph = [](const std::string& spec) { return parse_spec_string(spec, "the tuner"); };
  b.setup = [](const Graph&, int) { return Status::ok(); };
  b.build = std::move(build);
  b.cudnn_version = 91900;
  return b;
}

StatusOr<std::pair<std::vector<uint8_t>, int64_t>> plan_named_after(const EngineConfig& c) {
  const std::string id = c.identity();
  return std::make_pair(std::vector<uint8_t>(id.begin(), id.end()), int64_t{1000} + c.engine_id);
}

EngineConfig config(const std::string& identity) {
  auto c = EngineConfig::parse(identity);
  EXPECT_TRUE(c.is_ok()) << identity;
  return *c;
}

std::string spec_of(const Graph& g) {
  auto s = graph_to_spec_json(g);
  EXPECT_TRUE(s.is_ok());
  return *s;
}

TEST(BuildHelpers, EachBuildComesBackAsTheHelpersPlanBytesAndWorkspace) {
  const Graph g = test_graph();
  ThreadHelpers th([](int) { return fake_builder(plan_named_after); });
  {
    BuildHelperPool pool(spec_of(g), structure_of(g), 0, 91900, 2, th.launcher());
    EXPECT_EQ(th.launched.load(), 2);  // both started at once, before the first build
    for (const char* id : {"eng4_k24=2_k30=0", "eng6_k14=1", "eng4_k24=0_k30=3", "eng7"}) {
      for (size_t slot : {size_t{0}, size_t{1}, size_t{5}}) {
        HelperBuild b = pool.build(slot, config(id));
        ASSERT_EQ(b.kind, HelperBuild::Kind::kBuilt) << b.status.to_string();
        EXPECT_EQ(std::string(b.plan.begin(), b.plan.end()), id);
        EXPECT_EQ(b.workspace, 1000 + config(id).engine_id);
      }
    }
    EXPECT_EQ(pool.builds_done(), 12);
    EXPECT_EQ(pool.off_reason(), "");
  }
  EXPECT_EQ(th.launched.load(), 2);  // no helper was started again
}

TEST(BuildHelpers, ABuildsOwnErrorComesBackWithItsCodeAndTheHelperGoesOn) {
  const Graph g = test_graph();
  ThreadHelpers th([](int) {
    return fake_builder([](const EngineConfig& c) -> StatusOr<std::pair<std::vector<uint8_t>, int64_t>> {
      if (c.engine_id == 9) return not_supported("engine 9 does not take this graph");
      return plan_named_after(c);
    });
  });
  BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, th.launcher());
  HelperBuild refused = pool.build(0, config("eng9_k2=1"));
  EXPECT_EQ(refused.kind, HelperBuild::Kind::kFailed);
  EXPECT_EQ(refused.status.code(), StatusCode::kNotSupported);
  EXPECT_EQ(refused.status.message(), "engine 9 does not take this graph");
  HelperBuild next = pool.build(0, config("eng4"));
  EXPECT_EQ(next.kind, HelperBuild::Kind::kBuilt) << next.status.to_string();
  EXPECT_EQ(th.launched.load(), 1);
}

TEST(BuildHelpers, AHelperThatRefusesItsHelloTurnsThePoolOffWithTheReason) {
  const Graph g = test_graph();
  ThreadHelpers th([](int) {
    HelperBuilder b = fake_builder(plan_named_after);
    b.setup = [](const Graph&, int device) {
      return unavailable("no CUDA device " + std::to_string(device) + " here");
    };
    return b;
  });
  BuildHelperPool pool(spec_of(g), structure_of(g), 3, 0, 2, th.launcher());
  HelperBuild b = pool.build(1, config("eng4"));
  EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
  EXPECT_NE(b.status.message().find("build helper 1 refused the graph: no CUDA device 3 here"), std::string::npos)
      << b.status.message();
  EXPECT_NE(pool.off_reason().find("no CUDA device 3"), std::string::npos);
  // Off for good: the other helper is not asked, nothing new starts.
  EXPECT_EQ(pool.build(0, config("eng6")).kind, HelperBuild::Kind::kNoHelpers);
  EXPECT_EQ(th.launched.load(), 2);
}

TEST(BuildHelpers, AHelperWithAnotherCudnnOrAnotherGraphIsRefused) {
  const Graph g = test_graph();
  {
    ThreadHelpers th([](int) { return fake_builder(plan_named_after); });  // says cuDNN 91900
    BuildHelperPool pool(spec_of(g), structure_of(g), 0, 91400, 1, th.launcher());
    HelperBuild b = pool.build(0, config("eng4"));
    EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
    EXPECT_NE(b.status.message().find("loaded cuDNN 91900, the tuner 91400"), std::string::npos) << b.status.message();
  }
  {
    ThreadHelpers th([](int) { return fake_builder(plan_named_after); });
    BuildHelperPool pool(spec_of(g), "another structure", 0, 0, 1, th.launcher());
    HelperBuild b = pool.build(0, config("eng4"));
    EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
    EXPECT_NE(b.status.message().find("another signature"), std::string::npos) << b.status.message();
  }
}

TEST(BuildHelpers, AHelperThatDiesWhileBuildingFailsThatCandidateAndANewOneTakesTheNext) {
  const Graph g = test_graph();
  ThreadHelpers th([](int fd) {
    return fake_builder([fd](const EngineConfig& c) -> StatusOr<std::pair<std::vector<uint8_t>, int64_t>> {
      if (c.engine_id == 13) {
        ::shutdown(fd, SHUT_RDWR);  // as a crash would: the channel ends with no answer
        return internal_error("gone");
      }
      return plan_named_after(c);
    });
  });
  BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, th.launcher());
  HelperBuild crashed = pool.build(0, config("eng13_k3=1"));
  EXPECT_EQ(crashed.kind, HelperBuild::Kind::kFailed);
  EXPECT_EQ(crashed.status.code(), StatusCode::kInternal);
  EXPECT_NE(crashed.status.message().find("crashed: build helper 0 its channel closed while building eng13_k3=1"),
            std::string::npos)
      << crashed.status.message();
  HelperBuild next = pool.build(0, config("eng4"));
  ASSERT_EQ(next.kind, HelperBuild::Kind::kBuilt) << next.status.to_string();
  EXPECT_EQ(th.launched.load(), 2);
  // Three crashes of one helper turn the pool off: the tune builds the rest itself.
  EXPECT_EQ(pool.build(0, config("eng13")).kind, HelperBuild::Kind::kFailed);
  EXPECT_EQ(pool.build(0, config("eng13_k1=0")).kind, HelperBuild::Kind::kFailed);
  EXPECT_NE(pool.off_reason().find("crashed 3 times"), std::string::npos);
  EXPECT_EQ(pool.build(0, config("eng4")).kind, HelperBuild::Kind::kNoHelpers);
}

// ready() never waits: false while a helper starts (the tuner builds in its own process meanwhile), true once
// its hello is answered, false for good once the pool is off.
TEST(BuildHelpers, ReadySaysWithoutWaitingWhetherAHelperWouldTakeABuild) {
  const Graph g = test_graph();
  std::atomic<bool> go{false};
  ThreadHelpers th([&go](int) {
    HelperBuilder b = fake_builder(plan_named_after);
    b.setup = [&go](const Graph&, int) {
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Status::ok();
    };
    return b;
  });
  {
    BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, th.launcher());
    EXPECT_FALSE(pool.ready(0));  // its setup has not finished
    go = true;
    bool became_ready = false;
    for (int i = 0; i < 10000 && !became_ready; ++i) {  // up to 10 s on a loaded machine
      became_ready = pool.ready(0);
      if (!became_ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(became_ready);
    EXPECT_EQ(pool.build(0, config("eng4")).kind, HelperBuild::Kind::kBuilt);
    EXPECT_TRUE(pool.ready(3));  // slot 3 of one helper is that helper
  }
  ThreadHelpers refusing([](int) {
    HelperBuilder b = fake_builder(plan_named_after);
    b.setup = [](const Graph&, int) { return unavailable("no device"); };
    return b;
  });
  BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, refusing.launcher());
  bool off = false;
  for (int i = 0; i < 10000 && !off; ++i) {
    EXPECT_FALSE(pool.ready(0));
    off = !pool.off_reason().empty();
    if (!off) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(off);
  EXPECT_EQ(pool.build(0, config("eng4")).kind, HelperBuild::Kind::kNoHelpers);
}

// A helper that dies between builds (idle) costs no candidate: the next request never reached it, so a new helper
// takes that candidate.
TEST(BuildHelpers, AHelperThatDiesIdleIsReplacedWithoutFailingTheNextCandidate) {
  const Graph g = test_graph();
  ThreadHelpers th([](int fd) {
    return fake_builder([fd](const EngineConfig& c) -> StatusOr<std::pair<std::vector<uint8_t>, int64_t>> {
      if (c.engine_id == 5)  // answers, then its channel ends while it waits for the next request
        std::thread([fd] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          ::shutdown(fd, SHUT_RDWR);
        }).detach();
      return plan_named_after(c);
    });
  });
  BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, th.launcher());
  ASSERT_EQ(pool.build(0, config("eng5")).kind, HelperBuild::Kind::kBuilt);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  HelperBuild next = pool.build(0, config("eng4_k1=2"));
  ASSERT_EQ(next.kind, HelperBuild::Kind::kBuilt) << next.status.to_string();
  EXPECT_EQ(std::string(next.plan.begin(), next.plan.end()), "eng4_k1=2");
  EXPECT_EQ(th.launched.load(), 2);
  EXPECT_EQ(pool.off_reason(), "");
}

TEST(BuildHelpers, AnExecutableThatCannotStartOrExitsAtOnceTurnsThePoolOff) {
  const Graph g = test_graph();
  {
    BuildHelperOptions o;
    o.executable = "/nonexistent/kiln";
    o.args = {"build-helper"};
    BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 2, process_build_helper_launcher(o));
    HelperBuild b = pool.build(0, config("eng4"));
    EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
    EXPECT_NE(pool.off_reason().find("cannot start the build helper '/nonexistent/kiln'"), std::string::npos)
        << pool.off_reason();
  }
  {
    BuildHelperOptions o;
    o.executable = "/bin/sh";
    o.args = {"-c", "exit 7"};
    BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, process_build_helper_launcher(o));
    HelperBuild b = pool.build(0, config("eng4"));
    EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
    EXPECT_NE(b.status.message().find("exited with status 7"), std::string::npos) << b.status.message();
  }
}

// The kiln binary's helper, started as a tune starts it, on a machine without a GPU (the host tier hides any):
// it answers the hello with the CUDA error and the tune would build on its own threads.
TEST(BuildHelpers, TheKilnBinarysHelperSaysWhyItCannotBuildWithoutAGpu) {
  const Graph g = test_graph();
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // for the helper started below (this process has no GPU work)
  BuildHelperOptions o;
  o.executable = KILN_BINARY;
  o.args = {"build-helper"};
  BuildHelperPool pool(spec_of(g), structure_of(g), 0, 0, 1, process_build_helper_launcher(o));
  HelperBuild b = pool.build(0, config("eng4"));
  EXPECT_EQ(b.kind, HelperBuild::Kind::kNoHelpers);
  EXPECT_NE(b.status.message().find("build helper 0 refused the graph"), std::string::npos) << b.status.message();
  EXPECT_NE(b.status.message().find("CUDA device"), std::string::npos) << b.status.message();
}

// The default's contract (docs/measure.md): none on a machine of fewer than 4 hardware threads, never more than 6
// (CUDA contexts made side by side wait for each other), never more than half the threads (the tune's own process
// builds and times beside them).
TEST(BuildHelpers, TheDefaultStartsNoneOnSmallMachinesAndAtMostSixOrHalfTheThreads) {
  const int n = default_build_helper_processes();
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_LE(n, 6);
  EXPECT_LE(2 * n, hw);
  if (hw < 4) EXPECT_EQ(n, 0);
  else EXPECT_GE(n, 2);
}

}  // namespace
}  // namespace kiln
