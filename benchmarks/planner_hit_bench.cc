// What a cache hit costs a caller of kiln::Planner::obtain (issue 12's goal: at most 1 us median with 16
// threads calling at once). Host only: the plans come from a backend that builds nothing, so the figure is
// the Planner's own lookup (key text, sharded shared-lock map, shared_ptr copy, counters, shape recorder).
//
//   planner_hit_bench [--threads T] [--calls N] [--shapes S] [--no-record]
//
// Each thread calls obtain() N times on a prepared graph, cycling over S shapes that are all cached first,
// and times every call with steady_clock. Prints the median, p90 and p99 over all calls in ns, and the
// calls per second of the whole run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"

namespace {

using Clock = std::chrono::steady_clock;

class NullExecutor : public kiln::PlanExecutor {
 public:
  kiln::Status run(cudaStream_t, const std::map<int, void*>&, void*) const override { return kiln::Status::ok(); }
};

class NullBackend : public kiln::PlanBackend {
 public:
  kiln::StatusOr<std::shared_ptr<const kiln::ExecutablePlan>> from_store(const kiln::Graph&,
                                                                         const kiln::GraphSignature&,
                                                                         std::string* why) override {
    *why = "none";
    return std::shared_ptr<const kiln::ExecutablePlan>();
  }
  kiln::StatusOr<std::vector<kiln::TunedShape>> tuned_shapes(const kiln::GraphSignature&) override {
    return std::vector<kiln::TunedShape>{};
  }
  kiln::StatusOr<std::shared_ptr<const kiln::ExecutablePlan>> build(const kiln::Graph& g,
                                                                    const kiln::GraphSignature& sig,
                                                                    const std::optional<kiln::EngineConfig>&,
                                                                    kiln::PlanSource s) override {
    return std::shared_ptr<const kiln::ExecutablePlan>(std::make_shared<kiln::ExecutablePlan>(
        g, sig, kiln::EngineConfig{1, {}}, 0, s, std::make_unique<NullExecutor>()));
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 16, shapes = 8;
  long calls = 200000;
  bool record = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--calls" && i + 1 < argc) calls = std::atol(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc) shapes = std::atoi(argv[++i]);
    else if (a == "--no-record") record = false;
    else {
      std::fprintf(stderr, "usage: planner_hit_bench [--threads T] [--calls N] [--shapes S] [--no-record]\n");
      return 2;
    }
  }
  if (threads < 1 || calls < 1 || shapes < 1) {
    std::fprintf(stderr, "planner_hit_bench: --threads, --calls and --shapes must be >= 1\n");
    return 2;
  }
  const char* spec = R"({"name": "mlp", "io_dtype": "fp16", "dynamic": {"tokens": 64},
    "tensors": {"x": {"dims": [1, "tokens", 128]}, "w": {"dims": [1, 128, 256]}, "b": {"dims": [1, 1, 256]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]},
              {"name": "bias", "op": "bias_add", "inputs": ["h", "b"], "outputs": ["hb"]},
              {"name": "gelu", "op": "gelu_tanh", "inputs": ["hb"], "outputs": ["y"]}],
    "outputs": ["y"]})";
  auto graph = kiln::parse_spec_string(spec, "bench");
  if (!graph.is_ok()) {
    std::fprintf(stderr, "%s\n", graph.status().to_string().c_str());
    return 1;
  }
  kiln::PlannerOptions o;
  o.record_shapes = record;
  auto planner = kiln::Planner::create_with_backend(std::make_unique<NullBackend>(), o);
  auto pg = planner->prepare(*graph);
  if (!pg.is_ok()) {
    std::fprintf(stderr, "%s\n", pg.status().to_string().c_str());
    return 1;
  }
  std::vector<std::map<std::string, int64_t>> shape_list;
  for (int s = 0; s < shapes; ++s) shape_list.push_back({{"tokens", 64 + 64 * s}});
  for (const auto& s : shape_list)
    if (!planner->obtain(*pg, s).is_ok()) return 1;  // every shape cached: the run below is all hits

  std::vector<std::vector<uint32_t>> ns(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<long> misses{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto& mine = ns[static_cast<size_t>(t)];
      mine.reserve(static_cast<size_t>(calls));
      ++ready;
      while (!go.load()) std::this_thread::yield();
      for (long i = 0; i < calls; ++i) {
        const auto& s = shape_list[static_cast<size_t>((i + t) % shapes)];
        const auto t0 = Clock::now();
        auto r = planner->obtain(*pg, s);
        const auto dt = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        if (!r.is_ok() || r->source != kiln::PlanSource::kMemory) ++misses;
        mine.push_back(static_cast<uint32_t>(std::min<long long>(dt, 0xFFFFFFFFll)));
      }
    });
  while (ready.load() < threads) std::this_thread::yield();
  const auto t_go = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t_go).count();
  std::vector<uint32_t> all;
  for (auto& v : ns) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all[std::min(all.size() - 1, static_cast<size_t>(p * static_cast<double>(all.size())))];
  };
  std::printf("planner_hit_bench: %d threads x %ld calls over %d cached shapes (recorder %s), %u hardware threads\n",
              threads, calls, shapes, record ? "on" : "off", std::thread::hardware_concurrency());
  std::printf("hit ns: median %u  p90 %u  p99 %u  max %u; %.2f M calls/s; %ld not from memory\n", pct(0.5), pct(0.9),
              pct(0.99), all.back(), static_cast<double>(all.size()) / wall_s / 1e6, misses.load());
  std::printf("stats: %s\n", planner->stats().text().c_str());
  return misses.load() == 0 ? 0 : 1;
}
