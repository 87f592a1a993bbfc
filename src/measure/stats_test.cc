#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "kiln/measure/measure.h"
#include "kiln/measure/measure_stats.h"

namespace kiln {
namespace {

double naive_mad(std::vector<double> v) {
  const double m = median_of(v);
  for (double& x : v) x = std::fabs(x - m);
  return median_of(v);
}

TEST(Stats, MedianMeanMinMaxOnKnownValues) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median_of({})));
  EXPECT_DOUBLE_EQ(mean_of({1, 2, 3, 4}), 2.5);
  EXPECT_NEAR(stddev_of({2, 4, 4, 4, 5, 5, 7, 9}), 2.138089935, 1e-9);  // sample (n-1) stddev
  EXPECT_DOUBLE_EQ(stddev_of({5}), 0.0);

  SampleSet s({5, 1, 4, 2, 3});
  EXPECT_EQ(s.size(), 5u);
  EXPECT_DOUBLE_EQ(s.median(), 3.0);
  EXPECT_DOUBLE_EQ(s.min(), 1.0);
  EXPECT_DOUBLE_EQ(s.max(), 5.0);
  EXPECT_DOUBLE_EQ(s.mean(), 3.0);
  EXPECT_DOUBLE_EQ(s.sum(), 15.0);
  EXPECT_EQ(s.in_order(), (std::vector<double>{5, 1, 4, 2, 3}));
  EXPECT_EQ(s.sorted(), (std::vector<double>{1, 2, 3, 4, 5}));
}

TEST(Stats, MadOnKnownValues) {
  EXPECT_DOUBLE_EQ(mad_of({1, 2, 3, 4, 100}), 1.0);  // deviations 2,1,0,1,97
  EXPECT_DOUBLE_EQ(mad_of({1, 2, 3, 4}), 1.0);       // median 2.5; deviations 1.5,.5,.5,1.5
  EXPECT_DOUBLE_EQ(mad_of({7}), 0.0);
  EXPECT_DOUBLE_EQ(mad_of({2, 2, 2, 9}), 0.0);
  EXPECT_DOUBLE_EQ(SampleSet({1, 2, 3, 4, 100}).mad(), 1.0);
}

TEST(Stats, IncrementalSampleSetMatchesDirectComputation) {
  std::mt19937_64 rng(12345);
  std::lognormal_distribution<double> dist(0.0, 0.4);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> v;
    SampleSet s;
    const int n = 1 + trial * 7;
    for (int i = 0; i < n; ++i) {
      double x = dist(rng);
      if (i % 5 == 0) x = std::round(x * 4) / 4;  // duplicates exercise ties in the MAD merge
      v.push_back(x);
      s.add(x);
    }
    EXPECT_NEAR(s.median(), median_of(v), 1e-12) << "n=" << n;
    EXPECT_NEAR(s.mad(), naive_mad(v), 1e-12) << "n=" << n;
    EXPECT_NEAR(s.mean(), mean_of(v), 1e-12) << "n=" << n;
    EXPECT_NEAR(s.stddev(), stddev_of(v), 1e-9) << "n=" << n;
    EXPECT_NEAR(mad_of(v), naive_mad(v), 1e-12) << "n=" << n;
  }
}

TEST(Stats, RelErrorFormulaAndSpecialCases) {
  const std::vector<double> v = {1.0, 1.1, 0.9, 1.05, 0.95};
  const double expected = 1.2533 * 1.4826 * mad_of(v) / std::sqrt(5.0) / median_of(v);
  EXPECT_NEAR(rel_error_of_median(v), expected, 1e-12);
  EXPECT_NEAR(SampleSet(v).rel_error(), expected, 1e-12);
  EXPECT_TRUE(std::isinf(rel_error_of_median({1.0})));
  EXPECT_EQ(rel_error_of_median({2.0, 2.0, 2.0}), 0.0);
  EXPECT_TRUE(std::isinf(rel_error_of_median({-1.0, 0.0, 1.0})));  // median 0 with MAD > 0
}

// The estimator should predict how much the median actually moves between independent runs.
TEST(Stats, NoiseEstimateMatchesObservedSpreadOfTheMedian) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> dist(1.0, 0.05);
  const int n = 200, trials = 400;
  std::vector<double> medians, predicted;
  for (int t = 0; t < trials; ++t) {
    SampleSet s;
    for (int i = 0; i < n; ++i) s.add(dist(rng));
    medians.push_back(s.median());
    predicted.push_back(s.rel_error());
  }
  const double observed = stddev_of(medians) / mean_of(medians);
  const double theory = 1.2533 * 0.05 / std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(median_of(predicted), theory, 0.2 * theory);
  EXPECT_NEAR(observed, theory, 0.2 * theory);
}

// Outliers (a context switch) must not inflate the noise figure: it is built on the MAD.
TEST(Stats, RelErrorIsRobustToOutliers) {
  std::vector<double> clean, dirty;
  for (int i = 0; i < 100; ++i) {
    double x = 1.0 + 0.001 * ((i * 37) % 11 - 5);
    clean.push_back(x);
    dirty.push_back(i % 20 == 0 ? 10.0 : x);
  }
  EXPECT_LT(rel_error_of_median(dirty), 2.0 * rel_error_of_median(clean));
  EXPECT_LT(rel_error_of_median(dirty), 0.005);
}

// --- Stopping rule ------------------------------------------------------------------------------

struct SimResult {
  StopReason reason;
  size_t samples;
  double elapsed_ms;
};

// Feeds synthetic samples; each sample costs its own time plus 0.01 ms of overhead in wall time.
template <typename Gen>
SimResult simulate(const StoppingRule& rule, Gen&& gen) {
  SampleSet s;
  double elapsed = 0.0;
  for (size_t guard = 0; guard < 1000000; ++guard) {
    const double x = gen();
    s.add(x);
    elapsed += x + 0.01;
    StopReason r = rule.evaluate(s, elapsed);
    if (r != StopReason::kNotStopped) return {r, s.size(), elapsed};
  }
  return {StopReason::kNotStopped, s.size(), elapsed};
}

TEST(StoppingRule, ConvergesOnLowNoiseSamples) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> dist(0.5, 0.0025);  // 0.5% noise
  StoppingRule rule;
  auto r = simulate(rule, [&] { return dist(rng); });
  EXPECT_EQ(r.reason, StopReason::kConverged);
  EXPECT_GE(r.samples, rule.min_samples);
  EXPECT_LT(r.samples, 100u);
}

TEST(StoppingRule, HitsTimeBudgetOnNoisySamples) {
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> dist(0.0, 1.0);  // wildly noisy, ~1 ms
  StoppingRule rule;
  rule.time_budget_ms = 200.0;
  auto r = simulate(rule, [&] { return dist(rng); });
  EXPECT_EQ(r.reason, StopReason::kTimeBudget);
  EXPECT_GE(r.elapsed_ms, 200.0);
  EXPECT_LT(r.elapsed_ms, 200.0 + 100.0);  // stops at the first check past the budget
}

TEST(StoppingRule, RespectsMinSamplesEvenWithZeroNoiseOrAnExhaustedBudget) {
  StoppingRule rule;
  rule.min_samples = 25;
  rule.time_budget_ms = 1.0;
  auto r = simulate(rule, [] { return 5.0; });  // each sample alone blows the budget
  EXPECT_EQ(r.samples, 25u);
  EXPECT_EQ(r.reason, StopReason::kConverged);  // zero noise: converged, checked before the budget

  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(0.0, 1.0);
  auto noisy = simulate(rule, [&] { return dist(rng); });
  EXPECT_EQ(noisy.samples, 25u);
  EXPECT_EQ(noisy.reason, StopReason::kTimeBudget);
}

TEST(StoppingRule, RespectsMaxSamples) {
  std::mt19937_64 rng(4);
  std::lognormal_distribution<double> dist(0.0, 1.0);
  StoppingRule rule;
  rule.time_budget_ms = 0.0;  // no budget
  rule.max_samples = 500;
  rule.target_rel_error = 1e-6;
  auto r = simulate(rule, [&] { return dist(rng); });
  EXPECT_EQ(r.reason, StopReason::kMaxSamples);
  EXPECT_EQ(r.samples, 500u);
}

TEST(StoppingRule, ValidateNamesTheField) {
  StoppingRule rule;
  EXPECT_TRUE(rule.validate().is_ok());
  rule.min_samples = 20;
  rule.max_samples = 10;
  Status st = rule.validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("min_samples (20) exceeds max_samples (10)"), std::string::npos) << st.message();
  rule = StoppingRule{};
  rule.max_samples = 0;
  EXPECT_NE(rule.validate().message().find("max_samples"), std::string::npos);
  rule = StoppingRule{};
  rule.target_rel_error = -1;
  EXPECT_NE(rule.validate().message().find("target_rel_error"), std::string::npos);
}

TEST(StoppingRule, ReasonNames) {
  EXPECT_STREQ(stop_reason_name(StopReason::kConverged), "converged");
  EXPECT_STREQ(stop_reason_name(StopReason::kTimeBudget), "time_budget");
  EXPECT_STREQ(stop_reason_name(StopReason::kMaxSamples), "max_samples");
  EXPECT_STREQ(stop_reason_name(StopReason::kNotStopped), "not_stopped");
}

// --- Host-side parts of the timer -------------------------------------------------------------

TEST(Clocks, ReasonNames) {
  EXPECT_EQ(clock_reason_names(0), "");
  EXPECT_EQ(clock_reason_names(kClockReasonSwPowerCap | kClockReasonHwThermal), "sw_power_cap,hw_thermal");
  EXPECT_EQ(clock_reason_names(0x1000), "0x1000");
  EXPECT_TRUE(kClockReasonsCapping & kClockReasonSwThermal);
  EXPECT_FALSE(kClockReasonsCapping & kClockReasonGpuIdle);
}

TEST(Clocks, MissingNvmlIsNotAnError) {
  // On a machine without a driver this reports unknown; with one it reports a clock. Never crashes.
  ClockReading c = read_sm_clock(0);
  if (!nvml_available()) {
    EXPECT_FALSE(c.known);
    EXPECT_FALSE(nvml_unavailable_reason().empty());
  }
}

TEST(MeasurementJson, CarriesStatsAndMeta) {
  Measurement m;
  m.stats = summarize(SampleSet({1.0, 2.0, 3.0}));
  m.stop_reason = StopReason::kConverged;
  m.device_name = "Test GPU";
  m.samples_ms = {1.0, 2.0, 3.0};
  nlohmann::json j = m.to_json();
  EXPECT_DOUBLE_EQ(j["median_ms"].get<double>(), 2.0);
  EXPECT_EQ(j["samples"].get<size_t>(), 3u);
  EXPECT_EQ(j["stop_reason"], "converged");
  EXPECT_EQ(j["meta"]["device"]["name"], "Test GPU");
  EXPECT_EQ(j["meta"]["clocks"]["known"], false);
  EXPECT_TRUE(j["meta"]["clocks"]["before"].is_null());
  EXPECT_EQ(j["samples_ms"].size(), 3u);
}

TEST(EnvironmentMeta, NeverFailsAndNamesVersions) {
  nlohmann::json j = environment_meta({"kiln", "tune"});
  EXPECT_EQ(j["argv"][1], "tune");
  EXPECT_TRUE(j.contains("git_revision"));
  EXPECT_TRUE(j.contains("kiln_version"));
  EXPECT_TRUE(j.contains("cudnn_version"));
  EXPECT_TRUE(j.contains("device"));
  if (j["device"].is_null()) {
    EXPECT_TRUE(j.contains("device_error"));
  }
}

}  // namespace
}  // namespace kiln
