// Test helper of the tune layer: a fake TuneBackend that produces, per candidate, what a kernel would —
// correct results, wrong ones (a 1-ulp scaling of a bf16 output, which only the gate can see), builds
// refused or failing, runs that fail, throw or crash the process (SIGSEGV), timing that fails — and lets
// the real numerics gate (check_outputs) judge the outputs. No GPU.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln/tune/tune_backend.h"
#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln::testing_fake {

using namespace testing_graphs;

enum class Kind {
  kCorrect,
  kWrong,
  kBuildNotSupported,
  kBuildFails,
  kRunFails,
  kCrashes,
  kTimingFails,
  kSegfaultInBuild,
  kSegfaultInRun
};

// Dies by `sig`, without a core file.
[[noreturn]] inline void die_by(int sig) {
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  ::_exit(128 + sig);
}

struct Script {
  Kind kind = Kind::kCorrect;
  double median_ms = 1.0;
  int64_t workspace = 0;
  bool runtime_compiled = false;  // the candidate's behaviour notes say runtime_compilation (the candidate budget's)
  int rank = -2;                  // the heuristics' rank; -2: its index (-1: not ranked)
};

class FakeBackend : public TuneBackend {
 public:
  explicit FakeBackend(std::vector<Script> script, bool has_reference = true)
      : script_(std::move(script)), has_reference_(has_reference) {
    graph_ = make_graph("fake_gemm", DataType::kFloat16);
    const int a = add_tensor(graph_, "a", {16, 256}), b = add_tensor(graph_, "b", {256, 16});
    const int c = add_tensor(graph_, "c", {16, 16}, DataType::kBFloat16);
    add_node(graph_, "mm", OpKind::kMatmul, {a, b}, c);
    graph_.outputs = {c};
    inputs_ = *make_random_inputs(graph_, 1);
    reference_ = *run_host_reference_with_magnitudes(graph_, inputs_);
  }

  bool ranked_ = true;  // false: the heuristics rank none (each candidate from the enumeration alone)

  StatusOr<std::vector<CandidateInfo>> candidates(const std::vector<HeuristicMode>&) override {
    std::vector<CandidateInfo> out;
    for (size_t i = 0; i < script_.size(); ++i) {
      CandidateInfo c;
      c.config.engine_id = static_cast<int64_t>(i);
      c.heuristic_rank = !ranked_ ? -1 : script_[i].rank == -2 ? static_cast<int>(i) : script_[i].rank;
      c.modes = {"A"};
      if (script_[i].runtime_compiled) c.behavior_notes = {"runtime_compilation"};
      out.push_back(c);
    }
    return out;
  }

  StatusOr<int64_t> build(size_t worker, size_t index, const EngineConfig& config) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      build_threads_.insert(std::this_thread::get_id());
      built_.insert(config.engine_id);
      workers_.insert(worker);
    }
    const Script s = at(index, config);
    if (s.kind == Kind::kSegfaultInBuild) die_by(SIGSEGV);
    if (s.kind == Kind::kBuildNotSupported) return not_supported("cuDNN: no engine for this configuration (fake)");
    if (s.kind == Kind::kBuildFails) return internal_error("cuDNN: plan build failed (fake)");
    return s.workspace;
  }

  StatusOr<ReferenceKind> prepare(bool verify) override {
    return verify && has_reference_ ? ReferenceKind::kHost : ReferenceKind::kNone;
  }

  StatusOr<CheckReport> run_and_check(size_t index) override {
    ++runs_;
    const Script s = script(index);
    if (s.kind == Kind::kSegfaultInRun) die_by(SIGSEGV);
    if (s.kind == Kind::kRunFails) return internal_error("cudaErrorIllegalAddress: an illegal memory access (fake)");
    if (s.kind == Kind::kCrashes) throw std::runtime_error("segmentation fault in plan execution (fake)");
    return check_outputs(graph_, {kernel_output(s.kind == Kind::kWrong)}, reference_);
  }

  Status run_once(size_t index) override {
    ++runs_;
    const Script s = script(index);
    if (s.kind == Kind::kSegfaultInRun) die_by(SIGSEGV);
    if (s.kind == Kind::kRunFails) return internal_error("launch failed (fake)");
    if (s.kind == Kind::kCrashes) throw std::runtime_error("segmentation fault (fake)");
    return Status::ok();
  }

  StatusOr<Measurement> time(size_t index, const MeasureOptions&) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      timed_.insert(index);
    }
    if (on_time) on_time(index);
    const Script s = script(index);
    if (s.kind == Kind::kTimingFails) return internal_error("timing failed (fake)");
    Measurement m;
    m.stats.samples = 20;
    m.stats.median_ms = m.stats.min_ms = m.stats.max_ms = m.stats.mean_ms = s.median_ms;
    m.stats.rel_error = 0.001;
    return m;
  }

  StatusOr<std::vector<uint8_t>> serialize(size_t index) override {
    return std::vector<uint8_t>{static_cast<uint8_t>(index)};
  }

  void will_build(const std::vector<EngineConfig>& runtime_compiled) override {
    for (const EngineConfig& c : runtime_compiled) will_build_.push_back(c.engine_id);
  }
  std::vector<int64_t> will_build_;  // what the tuner said it may build (runtime-compiled, after its filters)
  int build_lanes() const override { return lanes_; }
  int lanes_ = 1;  // as if build helpers ran beside it (the candidate budget compiles its first per lane)

  void end_builds() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++end_builds_calls_;
    if (timed_at_end_builds_ < 0) timed_at_end_builds_ = static_cast<int>(timed_.size());
  }
  int end_builds_calls_ = 0;
  int timed_at_end_builds_ = -1;  // how many candidates were timed when end_builds() first came

  std::function<void(size_t)> on_time;  // called at each timing (a test's hook)
  std::set<size_t> timed_;
  std::set<int64_t> built_;
  std::set<size_t> workers_;
  std::set<std::thread::id> build_threads_;
  std::atomic<int> runs_{0};

 private:
  // The tuner numbers candidates after its filters; the script is by engine id.
  const Script& at(size_t index, const EngineConfig& config) {
    std::lock_guard<std::mutex> lock(mu_);
    engine_of_[index] = static_cast<size_t>(config.engine_id);
    return script_.at(static_cast<size_t>(config.engine_id));
  }
  const Script& script(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    return script_.at(engine_of_.at(index));
  }

  // What a correct kernel leaves: fp32 sums of the exact fp16 products, rounded once to bf16; a wrong one
  // scales them by 1 + 2^-7 (one bf16 ulp at the bottom of a binade, 0.8%): inside every element's band
  // (atol 0.04 + rtol 0.02 |ref|), not inside the gate's bias limit.
  HostTensor kernel_output(bool wrong) const {
    const auto a = inputs_.at(0).values(), b = inputs_.at(1).values();
    std::vector<double> out(16 * 16);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        float acc = 0.f;
        for (int q = 0; q < 256; ++q)
          acc += static_cast<float>(a[static_cast<size_t>(i * 256 + q)] * b[static_cast<size_t>(q * 16 + j)]);
        out[static_cast<size_t>(i * 16 + j)] = acc * (wrong ? 1.0 + 0x1p-7 : 1.0);
      }
    return HostTensor::from_values(DataType::kBFloat16, {16, 16}, out);
  }

  std::vector<Script> script_;
  std::map<size_t, size_t> engine_of_;  // tuner index -> script entry
  bool has_reference_;
  Graph graph_;
  std::map<int, HostTensor> inputs_;
  ReferenceOutputs reference_;
  std::mutex mu_;
};

}  // namespace kiln::testing_fake
