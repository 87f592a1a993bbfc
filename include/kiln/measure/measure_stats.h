// kiln/measure/measure_stats.h: statistics on timing samples and the rule that decides when to stop sampling.
// Pure host code (no CUDA): the GPU timer (kiln/measure/measure.h) and the tuner's decisions build on it, and it
// is tested with synthetic samples. All times are milliseconds.
#pragma once

#include <cstddef>
#include <iterator>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"

namespace kiln {

// Free functions on an unordered list of values. Empty input gives NaN (0 for stddev/mad of one value).
double median_of(std::vector<double> values);  // mean of the two middle values when the count is even
double mean_of(const std::vector<double>& values);
double stddev_of(const std::vector<double>& values);  // sample standard deviation (n-1); 0 when n < 2
double mad_of(std::vector<double> values);            // median absolute deviation from the median, unscaled

// Scale that turns a MAD into a consistent estimate of the standard deviation of a normal distribution.
inline constexpr double kMadToSigma = 1.4826;
// Asymptotic standard error of the median of n normal samples is sqrt(pi/2) * sigma / sqrt(n).
inline constexpr double kMedianEfficiency = 1.2533;

// Relative standard error of the median, the noise figure used everywhere in Kiln:
//     rel_error = 1.2533 * (1.4826 * MAD) / sqrt(n) / median
// i.e. the normal-theory standard error of the median with sigma estimated robustly from the MAD, so a few
// outliers (a context switch, a clock step) neither inflate it nor keep the sampler running. Deterministic.
// Special cases: n < 2 gives +inf; MAD == 0 gives 0 (the median is pinned by the samples); a median <= 0
// with MAD > 0 gives +inf.
double rel_error_of_median(const std::vector<double>& values);

// A growing set of samples that keeps both arrival order and a sorted copy, so that the median and the
// relative error can be re-evaluated after every sample cheaply (O(n) worst case, no allocation).
class SampleSet {
 public:
  SampleSet() = default;
  explicit SampleSet(const std::vector<double>& values);

  void add(double value);
  void clear();
  size_t size() const { return sorted_.size(); }
  bool empty() const { return sorted_.empty(); }
  const std::vector<double>& sorted() const { return sorted_; }     // ascending
  const std::vector<double>& in_order() const { return arrival_; }  // as added

  double median() const;  // NaN when empty
  double min() const;     // NaN when empty
  double max() const;     // NaN when empty
  double mean() const;    // NaN when empty
  double stddev() const;  // sample standard deviation; 0 when size() < 2
  double mad() const;     // unscaled; NaN when empty
  double sum() const { return sum_; }
  double rel_error() const;  // see rel_error_of_median

 private:
  std::vector<double> sorted_;
  std::vector<double> arrival_;
  double sum_ = 0.0;
  double welford_mean_ = 0.0;  // running mean and sum of squared deviations (Welford) for stddev
  double welford_m2_ = 0.0;
};

// A snapshot of the statistics of a SampleSet.
struct SampleSummary {
  size_t samples = 0;
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  double mean_ms = 0.0;
  double stddev_ms = 0.0;
  double mad_ms = 0.0;
  double rel_error = 0.0;  // relative standard error of the median (fraction, 0.01 == 1%)
};
SampleSummary summarize(const SampleSet& samples);

enum class StopReason {
  kNotStopped = 0,  // keep sampling
  kConverged,       // rel_error <= target with at least min_samples
  kTimeBudget,      // the wall-time budget ran out (after min_samples)
  kMaxSamples,      // max_samples reached
};
inline constexpr EnumName<StopReason> kStopReasonNames[] = {{StopReason::kNotStopped, "not_stopped"},
                                                            {StopReason::kConverged, "converged"},
                                                            {StopReason::kTimeBudget, "time_budget"},
                                                            {StopReason::kMaxSamples, "max_samples"}};
static_assert(std::size(kStopReasonNames) == static_cast<size_t>(StopReason::kMaxSamples) + 1,
              "a StopReason without a name");
const char* stop_reason_name(StopReason reason);  // kStopReasonNames' name; "unknown" for a value outside it

// When to stop sampling. Checked after every sample, in this order:
//   1. size >= max_samples                                  -> kMaxSamples
//   2. size <  min_samples                                  -> keep going (min_samples beats the budget)
//   3. rel_error <= target_rel_error                        -> kConverged
//   4. time_budget_ms > 0 and elapsed_ms >= time_budget_ms  -> kTimeBudget
// min_samples is honoured even past the budget, so a slow candidate costs at least min_samples launches;
// callers that cannot afford that should lower min_samples.
struct StoppingRule {
  double target_rel_error = 0.005;
  size_t min_samples = 10;
  size_t max_samples = 10000;
  double time_budget_ms = 1000.0;  // wall time spent sampling; <= 0 means no budget

  StopReason evaluate(const SampleSet& samples, double elapsed_ms) const;
  bool should_stop(const SampleSet& samples, double elapsed_ms) const {
    return evaluate(samples, elapsed_ms) != StopReason::kNotStopped;
  }
  // InvalidArgument naming the field when the rule is inconsistent (min > max, max == 0, negative target).
  Status validate() const;
};

}  // namespace kiln
