// What the Planner's own host work costs when a new shape is served by a stopgap that needs no build, split or
// padded (issue 12's goal:
// a new shape in a tuned bucket at least 50x faster than a cold static build; for a precompiled conv
// engine whose cold build is 8 ms, that leaves the whole first execution under 0.16 ms). Host only: the
// plans come from a backend that builds and runs nothing, so the figure is the Planner's obtain() alone
// (reshapes, signature, padding check, the padded plan's bindings), the part the H200 figures cannot
// separate from the first execution.
//
//   planner_padded_bench --spec SPEC --symbol batch --reps 4,8,16,32,64 [--rounds R] [--buckets POLICY]
//
// Each round makes a new Planner (pow2 buckets by default) whose store holds the representatives, then
// asks once for every value from 1 to the largest representative that is not one (each a split or padded stopgap)
// and times each obtain with steady_clock. Promotions are off (they would build nothing and only add
// noise). Prints the median, p90 and max over all first obtains in microseconds, and the stats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"

namespace {

using Clock = std::chrono::steady_clock;

class NullExecutor : public kiln::PlanExecutor {
 public:
  kiln::Status run(cudaStream_t, const std::map<int, void*>&, void*) const override { return kiln::Status::ok(); }
};

std::shared_ptr<const kiln::ExecutablePlan> null_plan(const kiln::Graph& g, const kiln::GraphSignature& sig,
                                                      kiln::PlanSource s) {
  return std::make_shared<kiln::ExecutablePlan>(g, sig, kiln::EngineConfig{1, {}}, 1024, s,
                                                std::make_unique<NullExecutor>());
}

// A store that holds a plan for each representative of one symbol.
class RepsBackend : public kiln::PlanBackend {
 public:
  RepsBackend(std::string symbol, std::vector<int64_t> reps) : symbol_(std::move(symbol)), reps_(std::move(reps)) {}
  kiln::StatusOr<std::shared_ptr<const kiln::ExecutablePlan>> from_store(const kiln::Graph& g,
                                                                         const kiln::GraphSignature& sig,
                                                                         std::string* why) override {
    for (int64_t r : reps_)
      if (sig.shape_key == kiln::shape_key_text({{symbol_, r}})) return null_plan(g, sig, kiln::PlanSource::kStore);
    *why = "no record";
    return std::shared_ptr<const kiln::ExecutablePlan>();
  }
  kiln::StatusOr<std::vector<kiln::TunedShape>> tuned_shapes(const kiln::GraphSignature&) override {
    std::vector<kiln::TunedShape> out;
    for (int64_t r : reps_)
      out.push_back({kiln::shape_key_text({{symbol_, r}}), {{symbol_, r}}, kiln::EngineConfig{1, {}}});
    return out;
  }
  kiln::StatusOr<std::shared_ptr<const kiln::ExecutablePlan>> build(const kiln::Graph& g,
                                                                    const kiln::GraphSignature& sig,
                                                                    const std::optional<kiln::EngineConfig>&,
                                                                    kiln::PlanSource s) override {
    return null_plan(g, sig, s);
  }

 private:
  std::string symbol_;
  std::vector<int64_t> reps_;
};

int usage() {
  std::fprintf(stderr,
               "usage: planner_padded_bench --spec SPEC --symbol SYM --reps A,B,... [--rounds R] [--buckets P]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec, symbol, reps_text, buckets;
  int rounds = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--spec") spec = argv[++i];
    else if (a == "--symbol") symbol = argv[++i];
    else if (a == "--reps") reps_text = argv[++i];
    else if (a == "--rounds") rounds = std::atoi(argv[++i]);
    else if (a == "--buckets") buckets = argv[++i];
    else return usage();
  }
  if (spec.empty() || symbol.empty() || reps_text.empty() || rounds < 1) return usage();
  std::vector<int64_t> reps;
  {
    std::stringstream ss(reps_text);
    std::string item;
    while (std::getline(ss, item, ',')) reps.push_back(std::atoll(item.c_str()));
  }
  std::sort(reps.begin(), reps.end());
  if (reps.empty() || reps.front() < 1) return usage();
  if (buckets.empty()) buckets = symbol + "=pow2";
  auto graph = kiln::parse_spec_file(spec);
  auto policy = kiln::BucketPolicy::parse(buckets);
  if (!graph.is_ok() || !policy.is_ok()) {
    std::fprintf(stderr, "%s\n", (graph.is_ok() ? policy.status() : graph.status()).to_string().c_str());
    return 1;
  }
  const std::set<int64_t> rep_set(reps.begin(), reps.end());
  std::vector<double> us;
  std::string stats, why;
  long built = 0;  // obtains served neither split nor padded
  for (int r = 0; r < rounds; ++r) {
    kiln::PlannerOptions o;
    o.buckets = *policy;
    o.promote = false;
    auto planner = kiln::Planner::create_with_backend(std::make_unique<RepsBackend>(symbol, reps), o);
    auto pg = planner->prepare(*graph);
    if (!pg.is_ok()) {
      std::fprintf(stderr, "%s\n", pg.status().to_string().c_str());
      return 1;
    }
    for (int64_t v = 1; v <= reps.back(); ++v) {
      if (rep_set.count(v)) continue;
      const auto t0 = Clock::now();
      auto got = planner->obtain(*pg, {{symbol, v}});
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (!got.is_ok()) {
        std::fprintf(stderr, "%s=%lld: %s\n", symbol.c_str(), static_cast<long long>(v),
                     got.status().to_string().c_str());
        return 1;
      }
      if (got->source != kiln::PlanSource::kPadded && got->source != kiln::PlanSource::kSplit) {
        ++built;
        why = got->why;
      }
    }
    stats = planner->stats().text();
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())))];
  };
  std::printf("planner_padded_bench: %s, %s over reps %s, %d rounds, %zu first obtains\n", spec.c_str(),
              buckets.c_str(), reps_text.c_str(), rounds, us.size());
  std::printf("first obtain us: median %.1f  p90 %.1f  max %.1f; %ld neither split nor padded%s%s\n", pct(0.5),
              pct(0.9), us.back(), built, built ? " (last: " : "", built ? (why + ")").c_str() : "");
  std::printf("stats (last round): %s\n", stats.c_str());
  return built == 0 ? 0 : 1;
}
