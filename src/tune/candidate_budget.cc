// The candidate budget (kiln/tune/tune_policy.h, docs/measure.md "The candidate budget"): the order a tune takes its
// candidates in, and when it leaves the runtime-compiled ones it has not compiled. Pure host logic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
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
  if (b.exhaustive) return true;
  // The timed ones, in order, and whether each beat the best before it by more than the noise.
  double best = best_before_ms > 0 ? best_before_ms : 0;
  std::vector<bool> improved;
  for (const CandidateResult& c : rtc) {
    if (c.disposition != Disposition::kPassed && c.disposition != Disposition::kNotVerified) continue;
    if (!c.timed()) continue;
    const double noise = std::max(b.noise_multiplier * (std::isfinite(c.rel_error) ? c.rel_error : 1.0), b.noise_floor);
    improved.push_back(best <= 0 || c.median_ms * (1 + noise) < best);
    if (best <= 0 || c.median_ms < best) best = c.median_ms;
  }
  if (static_cast<int>(improved.size()) < b.first) return true;
  const size_t window = std::min(improved.size(), static_cast<size_t>(b.patience));
  for (size_t i = improved.size() - window; i < improved.size(); ++i)
    if (improved[i]) return true;
  if (why) {
    char text[240];
    std::snprintf(text, sizeof text,
                  "candidate budget: none of the last %zu of %zu runtime-compiled candidates timed beat the best "
                  "(%.4f ms) by more than the noise (--exhaustive tries every one)",
                  window, improved.size(), best);
    *why = text;
  }
  return false;
}

std::vector<std::string> rank_prior_winners(const std::vector<std::pair<std::string, std::string>>& winners,
                                            const std::string& own_shape_key, const std::string& incumbent) {
  std::map<std::string, int> wins;
  for (const auto& [shape_key, id] : winners)
    if (shape_key != own_shape_key && id != incumbent) ++wins[id];
  std::vector<std::pair<int, std::string>> ranked;
  for (const auto& [id, n] : wins) ranked.emplace_back(-n, id);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  if (!incumbent.empty()) out.push_back(incumbent);
  for (const auto& [n, id] : ranked) out.push_back(id);
  return out;
}

}  // namespace kiln
