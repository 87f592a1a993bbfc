// The tuner's decisions: winner, incumbent, fused versus unfused (kiln/tune/tune_policy.h).
#include "kiln/tune/tune_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "kiln/measure/measure.h"

namespace kiln {
namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  return buf;
}

std::string millis(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", ms);
  return buf;
}

bool eligible(const CandidateResult& c) {
  return c.disposition == Disposition::kPassed && c.timed() && std::isfinite(c.median_ms);
}

}  // namespace

void CandidateResult::set_timing(const Measurement& m) {
  median_ms = m.stats.median_ms;
  min_ms = m.stats.min_ms;
  max_ms = m.stats.max_ms;
  rel_error = m.stats.rel_error;
  samples = m.stats.samples;
}

const char* objective_name(Objective o) { return enum_name(kObjectiveNames, o, "time"); }
StatusOr<Objective> parse_objective(const std::string& name) { return parse_enum(kObjectiveNames, name, "objective"); }

StatusOr<size_t> pick_winner(const std::vector<CandidateResult>& candidates, const WinnerOptions& options) {
  if (options.objective == Objective::kWorkspace && !(options.workspace_tolerance >= 0.0))
    return invalid_argument("winner options: workspace_tolerance must be >= 0");
  std::vector<size_t> pool;
  std::vector<std::string> ids(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!eligible(candidates[i])) continue;
    pool.push_back(i);
    ids[i] = candidates[i].identity();
  }
  if (pool.empty()) {
    std::map<std::string, int> counts;
    for (const auto& c : candidates) ++counts[disposition_name(c.disposition)];
    std::string msg = "no passing, timed candidate among " + std::to_string(candidates.size());
    for (const auto& [name, n] : counts) msg += ", " + name + ": " + std::to_string(n);
    return not_found(msg);
  }
  auto by_time = [&](size_t a, size_t b) {
    const auto& x = candidates[a];
    const auto& y = candidates[b];
    return std::tie(x.median_ms, x.workspace_bytes, ids[a]) < std::tie(y.median_ms, y.workspace_bytes, ids[b]);
  };
  const size_t fastest = *std::min_element(pool.begin(), pool.end(), by_time);
  if (options.objective == Objective::kTime) return fastest;

  const double limit = candidates[fastest].median_ms * (1.0 + options.workspace_tolerance);
  size_t best = fastest;
  for (size_t i : pool) {
    const auto& c = candidates[i];
    if (c.median_ms > limit) continue;
    const auto& b = candidates[best];
    if (std::tie(c.workspace_bytes, c.median_ms, ids[i]) < std::tie(b.workspace_bytes, b.median_ms, ids[best]))
      best = i;
  }
  return best;
}

IncumbentDecision decide_incumbent(const Incumbent& incumbent, const CandidateResult& challenger,
                                   const IncumbentOptions& options) {
  IncumbentDecision d;
  const std::string cid = challenger.identity();
  const double k = std::max(0.0, options.noise_multiplier);
  const double floor = std::max(0.0, options.noise_floor);
  const bool challenger_ok = eligible(challenger);
  const bool incumbent_ok = incumbent.median_ms > 0.0 && std::isfinite(incumbent.median_ms);

  if (!challenger_ok) {
    d.chosen_identity = incumbent.identity;
    d.explanation = "kept incumbent " + incumbent.identity + ": challenger " + cid + " is " +
                    disposition_name(challenger.disposition) + (challenger.timed() ? "" : " and untimed");
    return d;
  }
  if (!incumbent_ok) {
    d.replace = true;
    d.chosen_identity = cid;
    d.explanation = "replaced incumbent " + incumbent.identity + " (no valid timing) with " + cid + " at " +
                    millis(challenger.median_ms);
    return d;
  }
  d.speedup = incumbent.median_ms / challenger.median_ms;
  const double n_c = std::max(std::isfinite(challenger.rel_error) ? challenger.rel_error : 1.0, floor);
  const double n_i = std::max(std::isfinite(incumbent.rel_error) ? incumbent.rel_error : 1.0, floor);
  // challenger.median must be below incumbent.median * (1 - k n_i) / (1 + k n_c).
  d.required_margin = 1.0 - (1.0 - k * n_i) / (1.0 + k * n_c);
  const double faster_by = 1.0 - challenger.median_ms / incumbent.median_ms;  // fraction; < 0 when slower

  if (cid == incumbent.identity) {
    d.chosen_identity = incumbent.identity;
    d.explanation = "kept incumbent " + incumbent.identity + ": the challenger is the same plan";
    return d;
  }
  const bool clearly_faster = challenger.median_ms * (1.0 + k * n_c) < incumbent.median_ms * (1.0 - k * n_i);
  if (clearly_faster) {
    d.replace = true;
    d.chosen_identity = cid;
    d.explanation = "replaced incumbent " + incumbent.identity + " with " + cid + ": " + percent(faster_by) +
                    " faster (" + millis(challenger.median_ms) + " vs " + millis(incumbent.median_ms) +
                    "), beyond noise " + percent(d.required_margin);
    return d;
  }
  d.chosen_identity = incumbent.identity;
  if (faster_by > 0.0) {
    d.explanation = "kept incumbent " + incumbent.identity + ": challenger " + cid + " " + percent(faster_by) +
                    " faster, within noise " + percent(d.required_margin);
  } else {
    d.explanation =
        "kept incumbent " + incumbent.identity + ": challenger " + cid + " " + percent(-faster_by) + " slower";
  }
  return d;
}

const char* fusion_policy_name(FusionPolicy p) { return enum_name(kFusionPolicyNames, p, "unknown"); }
StatusOr<FusionPolicy> parse_fusion_policy(const std::string& name) {
  return parse_enum(kFusionPolicyNames, name, "fusion policy");
}

double chain_lower_bound_ms(const std::vector<int>& group_of, const std::vector<double>& node_ms,
                            const std::vector<bool>& heavy, const std::map<int, double>& part_ms) {
  struct Part {
    int nodes = 0;
    double alone = 0.0;  // the one node's time alone, or the slowest heavy node's; 0: unknown
  };
  std::map<int, Part> parts;
  for (size_t n = 0; n < group_of.size(); ++n) {
    Part& p = parts[group_of[n]];
    const double t = n < node_ms.size() ? std::max(0.0, node_ms[n]) : 0.0;
    ++p.nodes;
    if (p.nodes == 1) p.alone = t;  // taken as is while the part has one node
    else p.alone = 0.0;             // recomputed below over heavy nodes
  }
  for (size_t n = 0; n < group_of.size(); ++n) {
    Part& p = parts[group_of[n]];
    if (p.nodes > 1 && n < heavy.size() && heavy[n] && n < node_ms.size()) p.alone = std::max(p.alone, node_ms[n]);
  }
  double sum = 0.0;
  for (const auto& [group, p] : parts) {
    auto known = part_ms.find(group);
    sum += known != part_ms.end() && known->second > 0.0 ? known->second : p.alone;
  }
  return sum;
}

FusionSide fused_side(const CandidateResult& winner) {
  FusionSide s;
  s.identities.push_back(winner.identity());
  if (!eligible(winner)) return s;
  s.available = true;
  s.median_ms = winner.median_ms;
  s.rel_error = winner.rel_error;
  return s;
}

FusionSide unfused_side(const std::vector<CandidateResult>& part_winners) {
  FusionSide s;
  double var = 0.0;
  bool all_ok = !part_winners.empty();
  for (const auto& p : part_winners) {
    s.identities.push_back(p.identity());
    if (!eligible(p)) {
      all_ok = false;
      continue;
    }
    s.median_ms += p.median_ms;
    const double abs_err = p.median_ms * p.rel_error;
    var += abs_err * abs_err;
  }
  if (!all_ok) {
    s.median_ms = 0.0;
    return s;
  }
  s.available = true;
  s.rel_error = s.median_ms > 0.0 ? std::sqrt(var) / s.median_ms : 0.0;
  return s;
}

StatusOr<FusionDecision> decide_fusion(const FusionSide& fused, const FusionSide& unfused, FusionPolicy policy) {
  auto join = [](const std::vector<std::string>& ids) {
    std::string s;
    for (const auto& id : ids) s += (s.empty() ? "" : " + ") + id;
    return s.empty() ? std::string("(none)") : s;
  };
  if (!fused.available && !unfused.available)
    return not_found("neither the fused graph nor its unfused parts have a passing, timed plan");
  FusionDecision d;
  switch (policy) {
    case FusionPolicy::kAlwaysFused:
      if (!fused.available) return not_supported("policy always_fused, but the fused graph has no passing plan");
      d.use_fused = true;
      d.explanation = "fused " + join(fused.identities) + " (policy always_fused)";
      return d;
    case FusionPolicy::kAlwaysUnfused:
      if (!unfused.available) return not_supported("policy always_unfused, but some unfused part has no passing plan");
      d.use_fused = false;
      d.explanation = "unfused " + join(unfused.identities) + " (policy always_unfused)";
      return d;
    case FusionPolicy::kFaster: break;
  }
  if (!unfused.available) {
    d.use_fused = true;
    d.explanation = "fused " + join(fused.identities) + ": the unfused parts have no complete passing set";
    return d;
  }
  if (!fused.available) {
    d.use_fused = false;
    d.explanation = "unfused " + join(unfused.identities) + ": the fused graph has no passing plan";
    return d;
  }
  d.use_fused = fused.median_ms <= unfused.median_ms;
  const double ratio = d.use_fused ? unfused.median_ms / fused.median_ms : fused.median_ms / unfused.median_ms;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fx", ratio);
  d.explanation = d.use_fused ? "fused " + join(fused.identities) + " " + millis(fused.median_ms) + " is " + buf +
                                    " faster than unfused " + millis(unfused.median_ms)
                              : "unfused " + join(unfused.identities) + " " + millis(unfused.median_ms) + " is " + buf +
                                    " faster than fused " + millis(fused.median_ms);
  return d;
}

}  // namespace kiln
