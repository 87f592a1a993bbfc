// The candidate budget (kiln/tune/tune_policy.h, docs/measure.md "The candidate budget"): the order a tune takes its
// candidates in, and when it leaves the runtime-compiled ones it has not compiled. Pure host logic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/tune/tune_policy.h"

namespace kiln {

Status check_candidate_budget(const CandidateBudget& b) {
  if (b.first < 1) return invalid_argument("candidate budget: first must be >= 1, got " + std::to_string(b.first));
  if (b.patience < 1)
    return invalid_argument("candidate budget: patience must be >= 1, got " + std::to_string(b.patience));
  if (!(b.noise_multiplier >= 0) || !(b.noise_floor >= 0) || !std::isfinite(b.noise_multiplier) ||
      !std::isfinite(b.noise_floor))
    return invalid_argument("candidate budget: noise_multiplier and noise_floor must be finite and >= 0");
  return Status::ok();
}

std::vector<size_t> budget_order(const std::vector<std::string>& identities, const std::vector<int>& ranks,
                                 const std::vector<bool>& runtime_compiled, const CandidateBudget& b) {
  const size_t n = identities.size();
  std::vector<size_t> order;
  order.reserve(n);
  if (b.exhaustive) {
    for (size_t i = 0; i < n; ++i) order.push_back(i);
    return order;
  }
  std::vector<size_t> rtc;
  for (size_t i = 0; i < n; ++i) (runtime_compiled[i] ? rtc : order).push_back(i);
  // Sort key: (position in prior, or past it), (heuristic rank, or past every rank), enumeration index.
  std::map<std::string, size_t> prior_at;
  for (size_t p = 0; p < b.prior.size(); ++p) prior_at.emplace(b.prior[p], p);
  auto key = [&](size_t i) {
    auto it = prior_at.find(identities[i]);
    const size_t p = it == prior_at.end() ? b.prior.size() : it->second;
    const long long r = ranks[i] >= 0 ? ranks[i] : (1LL << 40);
    return std::make_tuple(p, r, i);
  };
  std::stable_sort(rtc.begin(), rtc.end(), [&](size_t a, size_t c) { return key(a) < key(c); });
  order.insert(order.end(), rtc.begin(), rtc.end());
  return order;
}

bool budget_wants_more(const std::vector<CandidateResult>& rtc, double best_before_ms, const CandidateBudget& b,
                       std::string* why) {
  if (b.exhaustive || static_cast<int>(rtc.size()) < b.first) return true;
  // The best time before each candidate, walking the settled ones in order; whether each beat it by the noise.
  double best = best_before_ms > 0 ? best_before_ms : 0;
  std::vector<bool> improved(rtc.size(), false);
  for (size_t i = 0; i < rtc.size(); ++i) {
    const CandidateResult& c = rtc[i];
    if (c.disposition != Disposition::kPassed && c.disposition != Disposition::kNotVerified) continue;
    if (!c.timed()) continue;
    const double noise = std::max(b.noise_multiplier * (std::isfinite(c.rel_error) ? c.rel_error : 1.0), b.noise_floor);
    if (best <= 0 || c.median_ms * (1 + noise) < best) improved[i] = true;
    if (best <= 0 || c.median_ms < best) best = c.median_ms;
  }
  const size_t from = rtc.size() - std::min(rtc.size(), static_cast<size_t>(b.patience));
  for (size_t i = from; i < rtc.size(); ++i)
    if (improved[i]) return true;
  if (why) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "candidate budget: none of the last %d of %zu runtime-compiled candidates timed beat the best "
                  "(%.4f ms) by more than the noise (--exhaustive tries every one)",
                  b.patience, rtc.size(), best);
    *why = text;
  }
  return false;
}

}  // namespace kiln
