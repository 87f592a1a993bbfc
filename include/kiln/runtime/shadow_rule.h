// kiln/runtime/shadow_rule.h: when a plan in shadow becomes active (docs/rollout.md "The shadow rule"). A serving
// Planner runs a key's shadow plan beside its active plan on sampled requests, on copies of the outputs, and keeps
// for each sample both plans' device times and whether their outputs agreed (compare_shadow_outputs). The rule:
//   - any disagreement rejects the candidate at once, the sample kept as evidence;
//   - before shadow_min_samples(rule) agreeing samples, nothing is decided: enough that a candidate wrong on a
//     fraction detect_rate of requests shows it with probability at least 1 - miss_probability (n >= ln(miss) /
//     ln(1 - rate): 1375 samples for 1% and 1e-6). A fault on fewer requests than detect_rate may go unseen;
//   - a paired one-sided sign test on the per-request speed-ups r_i = active_ms / candidate_ms: k of n samples with
//     r_i > 1 + margin; the candidate is promoted when P(Bin(n, 1/2) >= k) < alpha (faster beyond the noise margin
//     on most requests, at confidence 1 - alpha), rejected when the same test says it is slower (r_i < 1 / (1 +
//     margin) on most requests), and rejected as "not faster" once max_samples agree without either.
// The test is exact and distribution-free (no normality, no equal variances): each request is its own control.
#pragma once

#include <string>
#include <vector>

#include "kiln/validate/host_tensor.h"

namespace kiln {

struct ShadowSample {
  double active_ms = 0;
  double candidate_ms = 0;
  bool agreed = true;
  std::string disagreement;  // the comparison's summary where it did not agree
  std::string shape_key;     // the request's shape
};

struct ShadowRule {
  double detect_rate = 0.01;       // the rarest fault (a fraction of requests) the rule must see before promoting
  double miss_probability = 1e-6;  // the chance it may still miss one that rare
  int max_samples = 8192;
  double margin = 0.02;  // a request's speed-up counts only beyond 1 + margin (the timer's noise)
  double alpha = 0.001;  // the sign test's significance, each way
};

// How a serving Planner samples the shadow plans it finds (PlannerOptions::shadow, docs/rollout.md "Shadow
// sampling"): one request in `sample_every` of a key also runs its shadow plan, one sample at a time per key (a
// sample taken while the previous one is still judged is skipped); 0: none. The cost on a sampled request: device
// copies of its inputs and outputs on the caller's stream, and the shadow plan on a side stream.
struct ShadowSampling {
  int sample_every = 100;
  ShadowRule rule;
};

enum class ShadowVerdict { kContinue, kPromote, kReject };
const char* shadow_verdict_name(ShadowVerdict v);  // "continue", "promote", "reject"

struct ShadowDecision {
  ShadowVerdict verdict = ShadowVerdict::kContinue;
  std::string reason;    // for the history: "promote: 200 agreeing samples, median speed-up 1.12x, ..."
  std::string evidence;  // JSON: n, faster, slower, median speed-up, p-values, the first disagreement
  int n = 0, faster = 0, slower = 0;
  double median_speedup = 0;
  double p_faster = 1, p_slower = 1;
};

// The agreeing samples before any promotion: ceil(ln(miss_probability) / ln(1 - detect_rate)), at least 1, at most
// kShadowSamplesCap (a rule that needs that many is refused by check_shadow_rule).
constexpr int kShadowSamplesCap = 1000000000;
int shadow_min_samples(const ShadowRule& rule);
// A rule out of range is used as given; check_shadow_rule says what is wrong with one.
ShadowDecision decide_shadow(const std::vector<ShadowSample>& samples, const ShadowRule& rule = {});
// "" when the rule can hold, else what is wrong ("detect_rate 0: between 0 and 1").
std::string check_shadow_rule(const ShadowRule& rule);
// P(Bin(n, 1/2) >= k), exact (log-space sums).
double sign_test_tail(int n, int k);

// Whether a candidate's output agrees with the active plan's for one request: both are plans' results, each within
// the gate's tolerance of the exact one, so the band is twice the output dtype's default tolerance; NaN or Inf
// where the active output is finite never agrees. `summary` says where they differ most.
struct ShadowComparison {
  bool agreed = false;
  std::string summary;
};
ShadowComparison compare_shadow_outputs(const HostTensor& active, const HostTensor& candidate);

}  // namespace kiln
