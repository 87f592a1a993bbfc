// The shadow rule (kiln/runtime/shadow_rule.h): a paired sign test over agreeing samples, and the comparison of a
// candidate's outputs with the active plan's.
#include "kiln/runtime/shadow_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kiln/validate/numerics.h"

namespace kiln {

const char* shadow_verdict_name(ShadowVerdict v) {
  switch (v) {
    case ShadowVerdict::kContinue: return "continue";
    case ShadowVerdict::kPromote: return "promote";
    case ShadowVerdict::kReject: return "reject";
  }
  return "?";
}

double sign_test_tail(int n, int k) {
  if (k <= 0) return 1.0;
  if (k > n) return 0.0;
  // sum_{i=k}^{n} C(n, i) / 2^n, with each term in log space and the sum taken from its largest term.
  std::vector<double> logs;
  for (int i = k; i <= n; ++i)
    logs.push_back(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  const double top = *std::max_element(logs.begin(), logs.end());
  double sum = 0;
  for (double l : logs) sum += std::exp(l - top);
  return std::min(1.0, std::exp(top) * sum);
}

int shadow_min_samples(const ShadowRule& r) {
  if (!(r.detect_rate > 0 && r.detect_rate < 1) || !(r.miss_probability > 0 && r.miss_probability < 1)) return 1;
  // In double first: a strict rule (detect_rate 1e-9) needs more samples than an int holds, and a cast of that would
  // be undefined (found by a review: it came out as INT_MIN, then 1). Capped at kShadowSamplesCap.
  const double need = std::ceil(std::log(r.miss_probability) / std::log1p(-r.detect_rate));
  if (!(need < kShadowSamplesCap)) return kShadowSamplesCap;
  return std::max(1, static_cast<int>(need));
}

std::string check_shadow_rule(const ShadowRule& r) {
  if (!(r.detect_rate > 0 && r.detect_rate < 1))
    return "detect_rate " + std::to_string(r.detect_rate) + ": between 0 and 1";
  if (!(r.miss_probability > 0 && r.miss_probability < 1))
    return "miss_probability " + std::to_string(r.miss_probability) + ": between 0 and 1";
  if (shadow_min_samples(r) >= kShadowSamplesCap)
    return "detect_rate " + std::to_string(r.detect_rate) + " with miss_probability " +
           std::to_string(r.miss_probability) + " needs a billion samples or more before any promotion";
  if (r.max_samples < shadow_min_samples(r))
    return "max_samples " + std::to_string(r.max_samples) + ": at least the minimum (" +
           std::to_string(shadow_min_samples(r)) + ")";
  if (!(r.alpha > 0 && r.alpha < 1)) return "alpha " + std::to_string(r.alpha) + ": between 0 and 1";
  if (!(r.margin >= 0 && std::isfinite(r.margin))) return "margin " + std::to_string(r.margin) + ": 0 or more";
  return "";
}

namespace {

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string p_text(double p) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2g", p);
  return b;
}

}  // namespace

ShadowDecision decide_shadow(const std::vector<ShadowSample>& samples, const ShadowRule& rule) {
  ShadowDecision d;
  nlohmann::ordered_json ev;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].agreed) continue;
    d.verdict = ShadowVerdict::kReject;
    d.n = static_cast<int>(i + 1);
    d.reason = "reject: outputs disagreed with the active plan's on sample " + std::to_string(i + 1) + " (shape '" +
               samples[i].shape_key + "'): " + samples[i].disagreement;
    ev["disagreement"] = {{"sample", i + 1}, {"shape_key", samples[i].shape_key}, {"summary", samples[i].disagreement}};
    d.evidence = ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return d;
  }
  d.n = static_cast<int>(samples.size());
  std::vector<double> speedups;
  for (const ShadowSample& s : samples) {
    // A time the timer could not resolve (0) is a tie, neither faster nor slower.
    const double r = s.candidate_ms > 0 && s.active_ms > 0 ? s.active_ms / s.candidate_ms : 1.0;
    speedups.push_back(r);
    if (r > 1 + rule.margin) ++d.faster;
    if (r * (1 + rule.margin) < 1) ++d.slower;
  }
  if (!speedups.empty()) {
    std::vector<double> sorted = speedups;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    d.median_speedup = sorted[sorted.size() / 2];
  }
  d.p_faster = sign_test_tail(d.n, d.faster);
  d.p_slower = sign_test_tail(d.n, d.slower);
  ev = {{"n", d.n},
        {"faster", d.faster},
        {"slower", d.slower},
        {"median_speedup", d.median_speedup},
        {"p_faster", d.p_faster},
        {"p_slower", d.p_slower},
        {"margin", rule.margin},
        {"alpha", rule.alpha}};
  d.evidence = ev.dump();
  const std::string counts = std::to_string(d.n) + " agreeing samples, median speed-up " + fixed(d.median_speedup, 3) +
                             "x, " + std::to_string(d.faster) + " faster and " + std::to_string(d.slower) +
                             " slower beyond " + fixed(100 * rule.margin, 1) + "%";
  const int min_samples = shadow_min_samples(rule);
  if (d.n < min_samples) {
    d.reason = "continue: " + counts + " (deciding from " + std::to_string(min_samples) + ")";
    return d;
  }
  if (d.p_faster < rule.alpha) {
    d.verdict = ShadowVerdict::kPromote;
    d.reason = "promote: " + counts + " (sign test p = " + p_text(d.p_faster) + " < " + p_text(rule.alpha) + ")";
  } else if (d.p_slower < rule.alpha) {
    d.verdict = ShadowVerdict::kReject;
    d.reason = "reject: slower than the active plan: " + counts + " (sign test p = " + p_text(d.p_slower) + ")";
  } else if (d.n >= rule.max_samples) {
    d.verdict = ShadowVerdict::kReject;
    d.reason = "reject: not faster beyond the noise after " + counts;
  } else {
    d.reason = "continue: " + counts;
  }
  return d;
}

ShadowComparison compare_shadow_outputs(const HostTensor& active, const HostTensor& candidate) {
  ShadowComparison c;
  if (active.dims != candidate.dims) {
    c.summary = "the outputs' shapes differ";
    return c;
  }
  Tolerance tol = default_tolerance(active.dtype);
  tol.atol *= 2;
  tol.rtol *= 2;
  tol.nmse_max *= 4;
  StatusOr<ErrorMeasures> e = measure_error(candidate, active, tol);
  if (!e.is_ok()) {
    c.summary = e.status().message();
    return c;
  }
  c.agreed = judge(*e, tol) == Disposition::kPassed;
  c.summary = std::to_string(e->mismatch_count) + " of " + std::to_string(e->count) + " elements outside the band (" +
              std::to_string(e->nan_count) + " NaN/Inf), max |diff| " + p_text(e->max_abs) + ", nmse " +
              p_text(e->nmse);
  return c;
}

}  // namespace kiln
