#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/measure/measure_stats.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double median_of_sorted(const std::vector<double>& s) {
  const size_t n = s.size();
  if (n == 0) return kNaN;
  if (n % 2 == 1) return s[n / 2];
  return 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

// MAD of an ascending vector without a scratch copy: the deviations below the median, walked downwards,
// and those above it, walked upwards, are two ascending sequences; merge them until the middle.
double mad_of_sorted(const std::vector<double>& s) {
  const size_t n = s.size();
  if (n == 0) return kNaN;
  const double m = median_of_sorted(s);
  // lo: count of values <= m (the lower walk starts at lo-1); hi: first value > m.
  size_t lo = static_cast<size_t>(std::upper_bound(s.begin(), s.end(), m) - s.begin());
  size_t hi = lo;
  const size_t want_hi = n / 2;  // index of the upper middle deviation
  const size_t want_lo = (n % 2 == 1) ? want_hi : want_hi - 1;
  double d_lo = 0.0, d = 0.0;
  for (size_t k = 0; k <= want_hi; ++k) {
    const bool take_low = hi >= n || (lo > 0 && (m - s[lo - 1]) <= (s[hi] - m));
    if (take_low) {
      d = m - s[lo - 1];
      --lo;
    } else {
      d = s[hi] - m;
      ++hi;
    }
    if (k == want_lo) d_lo = d;
  }
  return 0.5 * (d_lo + d);
}

double rel_error_from(size_t n, double median, double mad) {
  if (n < 2) return kInf;
  if (!(mad > 0.0)) return mad == 0.0 ? 0.0 : kInf;  // NaN MAD: unknown
  if (!(median > 0.0)) return kInf;
  return kMedianEfficiency * kMadToSigma * mad / std::sqrt(static_cast<double>(n)) / median;
}

}  // namespace

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return median_of_sorted(values);
}

double mean_of(const std::vector<double>& values) {
  if (values.empty()) return kNaN;
  double s = 0.0;
  for (double v : values) s += v;
  return s / static_cast<double>(values.size());
}

double stddev_of(const std::vector<double>& values) {
  if (values.size() < 2) return 0.0;
  const double m = mean_of(values);
  double ss = 0.0;
  for (double v : values) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(values.size() - 1));
}

double mad_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return mad_of_sorted(values);
}

double rel_error_of_median(const std::vector<double>& values) {
  std::vector<double> s = values;
  std::sort(s.begin(), s.end());
  return rel_error_from(s.size(), median_of_sorted(s), mad_of_sorted(s));
}

SampleSet::SampleSet(const std::vector<double>& values) {
  sorted_.reserve(values.size());
  arrival_.reserve(values.size());
  for (double v : values) add(v);
}

void SampleSet::add(double value) {
  arrival_.push_back(value);
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), value), value);
  sum_ += value;
  const double n = static_cast<double>(arrival_.size());
  const double delta = value - welford_mean_;
  welford_mean_ += delta / n;
  welford_m2_ += delta * (value - welford_mean_);
}

void SampleSet::clear() { *this = SampleSet(); }

double SampleSet::median() const { return median_of_sorted(sorted_); }
double SampleSet::min() const { return sorted_.empty() ? kNaN : sorted_.front(); }
double SampleSet::max() const { return sorted_.empty() ? kNaN : sorted_.back(); }
double SampleSet::mean() const { return sorted_.empty() ? kNaN : welford_mean_; }
double SampleSet::stddev() const {
  if (sorted_.size() < 2) return 0.0;
  return std::sqrt(std::max(0.0, welford_m2_) / static_cast<double>(sorted_.size() - 1));
}
double SampleSet::mad() const { return mad_of_sorted(sorted_); }
double SampleSet::rel_error() const { return rel_error_from(sorted_.size(), median(), mad()); }

SampleSummary summarize(const SampleSet& s) {
  SampleSummary out;
  out.samples = s.size();
  if (s.empty()) {
    out.rel_error = kInf;
    return out;
  }
  out.median_ms = s.median();
  out.min_ms = s.min();
  out.max_ms = s.max();
  out.mean_ms = s.mean();
  out.stddev_ms = s.stddev();
  out.mad_ms = s.mad();
  out.rel_error = s.rel_error();
  return out;
}

const char* stop_reason_name(StopReason reason) { return enum_name(kStopReasonNames, reason, "unknown"); }

StopReason StoppingRule::evaluate(const SampleSet& samples, double elapsed_ms) const {
  const size_t n = samples.size();
  if (n >= max_samples) return StopReason::kMaxSamples;
  if (n < min_samples) return StopReason::kNotStopped;
  if (samples.rel_error() <= target_rel_error) return StopReason::kConverged;
  if (time_budget_ms > 0.0 && elapsed_ms >= time_budget_ms) return StopReason::kTimeBudget;
  return StopReason::kNotStopped;
}

Status StoppingRule::validate() const {
  if (max_samples == 0) return invalid_argument("stopping rule: max_samples must be at least 1");
  if (min_samples > max_samples)
    return invalid_argument("stopping rule: min_samples (" + std::to_string(min_samples) + ") exceeds max_samples (" +
                            std::to_string(max_samples) + ")");
  if (!(target_rel_error >= 0.0))
    return invalid_argument("stopping rule: target_rel_error must be >= 0, got " + std::to_string(target_rel_error));
  if (std::isnan(time_budget_ms)) return invalid_argument("stopping rule: time_budget_ms is NaN");
  return Status::ok();
}

}  // namespace kiln
