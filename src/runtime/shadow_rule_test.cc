// The shadow rule (kiln/runtime/shadow_rule.h): the sign test's numbers, each verdict, and fault injection: wrong,
// scaled, NaN-on-one-shape and slower candidates run through a simulated shadow against real output comparisons,
// none of them ever promoted, while a correct faster candidate is.
#include "kiln/runtime/shadow_rule.h"

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <cstdio>
#include <random>

namespace kiln {
namespace {

TEST(SignTest, ExactTails) {
  EXPECT_DOUBLE_EQ(sign_test_tail(10, 0), 1.0);
  EXPECT_NEAR(sign_test_tail(10, 10), 1.0 / 1024, 1e-15);
  EXPECT_NEAR(sign_test_tail(10, 9), 11.0 / 1024, 1e-15);
  EXPECT_DOUBLE_EQ(sign_test_tail(10, 11), 0.0);
  for (int n : {1, 7, 64, 1500})
    for (int k = 1; k <= n; k += std::max(1, n / 7))
      EXPECT_NEAR(sign_test_tail(n, k) + (1 - sign_test_tail(n, k)), 1.0, 1e-12);
  // Symmetry: P(X >= k) = P(X <= n - k) = 1 - P(X >= n - k + 1).
  for (int k = 0; k <= 50; ++k) EXPECT_NEAR(sign_test_tail(50, k), 1 - sign_test_tail(50, 51 - k), 1e-12) << k;
  EXPECT_GT(sign_test_tail(5000, 2600), 0.0);  // no underflow to nonsense at large n
  EXPECT_LT(sign_test_tail(5000, 2600), 0.01);
}

TEST(ShadowRule, MinimumSamplesSeeTheRarestFault) {
  ShadowRule r;
  EXPECT_EQ(shadow_min_samples(r), 1375);  // ln(1e-6) / ln(0.99)
  EXPECT_LT(std::pow(1 - r.detect_rate, shadow_min_samples(r)), r.miss_probability);
  EXPECT_EQ(check_shadow_rule(r), "");
  r.detect_rate = 0;
  EXPECT_NE(check_shadow_rule(r), "");
  r = ShadowRule{};
  r.max_samples = 100;
  EXPECT_NE(check_shadow_rule(r).find("max_samples 100"), std::string::npos);
  // A stricter rule than an int can count: refused, never wrapped round to a handful of samples.
  r = ShadowRule{};
  r.detect_rate = 1e-9;
  r.max_samples = std::numeric_limits<int>::max();
  EXPECT_EQ(shadow_min_samples(r), kShadowSamplesCap);
  EXPECT_NE(check_shadow_rule(r).find("a billion samples"), std::string::npos) << check_shadow_rule(r);
  r.detect_rate = 1e-5;  // 1.38 million: a rule a benchmark uses to keep a shadow running
  EXPECT_EQ(shadow_min_samples(r), 1381545);
  EXPECT_EQ(check_shadow_rule(r), "");
}

TEST(ShadowRule, AnUnresolvedTimeIsATie) {
  std::vector<ShadowSample> zeros(2000, ShadowSample{0.0, 0.0, true, "", ""});
  ShadowDecision d = decide_shadow(zeros);
  EXPECT_EQ(d.faster, 0);
  EXPECT_EQ(d.slower, 0);
  EXPECT_EQ(d.verdict, ShadowVerdict::kContinue);
}

std::vector<ShadowSample> timed(int n, double speedup, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> jitter(0.0, noise);
  std::vector<ShadowSample> out;
  for (int i = 0; i < n; ++i) {
    const double active = 1.0 * (1 + jitter(rng));
    out.push_back({active, active / speedup * (1 + jitter(rng)), true, "", "tokens=64"});
  }
  return out;
}

TEST(ShadowRule, EachVerdict) {
  ShadowRule r;
  const int n = shadow_min_samples(r);
  ShadowDecision few = decide_shadow(timed(n - 1, 1.2, 0.02, 1), r);
  EXPECT_EQ(few.verdict, ShadowVerdict::kContinue) << few.reason;
  ShadowDecision faster = decide_shadow(timed(n, 1.10, 0.02, 2), r);
  EXPECT_EQ(faster.verdict, ShadowVerdict::kPromote) << faster.reason;
  EXPECT_NE(faster.reason.find("sign test p"), std::string::npos);
  EXPECT_NE(faster.evidence.find("\"median_speedup\""), std::string::npos);
  ShadowDecision slower = decide_shadow(timed(n, 0.95, 0.02, 3), r);
  EXPECT_EQ(slower.verdict, ShadowVerdict::kReject) << slower.reason;
  EXPECT_NE(slower.reason.find("slower"), std::string::npos);
  ShadowDecision same = decide_shadow(timed(r.max_samples, 1.0, 0.02, 4), r);
  EXPECT_EQ(same.verdict, ShadowVerdict::kReject) << same.reason;
  EXPECT_NE(same.reason.find("not faster"), std::string::npos);
  std::vector<ShadowSample> bad = timed(10, 1.5, 0.01, 5);
  bad[7].agreed = false;
  bad[7].disagreement = "3 of 64 elements outside the band";
  ShadowDecision wrong = decide_shadow(bad, r);
  EXPECT_EQ(wrong.verdict, ShadowVerdict::kReject);
  EXPECT_NE(wrong.reason.find("sample 8"), std::string::npos) << wrong.reason;
  EXPECT_NE(wrong.evidence.find("3 of 64 elements"), std::string::npos);
}

TEST(ShadowCompare, AgreementIsTheGatesBandTwiceOver) {
  std::vector<double> v;
  for (int i = 0; i < 256; ++i) v.push_back(std::sin(0.1 * i) * 4);
  HostTensor a = HostTensor::from_values(DataType::kFloat16, {16, 16}, v);
  std::vector<double> close = v;
  for (double& x : close) x *= 1.004;  // a plan's own rounding: within fp16's band
  EXPECT_TRUE(compare_shadow_outputs(a, HostTensor::from_values(DataType::kFloat16, {16, 16}, close)).agreed);
  std::vector<double> one = v;
  one[37] += 1.0;
  ShadowComparison c = compare_shadow_outputs(a, HostTensor::from_values(DataType::kFloat16, {16, 16}, one));
  EXPECT_FALSE(c.agreed);
  EXPECT_NE(c.summary.find("1 of 256 elements"), std::string::npos) << c.summary;
  std::vector<double> nan = v;
  nan[3] = std::nan("");
  EXPECT_FALSE(compare_shadow_outputs(a, HostTensor::from_values(DataType::kFloat16, {16, 16}, nan)).agreed);
  EXPECT_FALSE(compare_shadow_outputs(a, HostTensor::zeros(DataType::kFloat16, {16, 8})).agreed);
}

// A simulated shadow: requests of mixed shapes, each output compared for real (compare_shadow_outputs), each timed
// with noise; the rule asked every 32 samples, as a serving Planner would. Returns the final verdict.
enum class Fault { kNone, kOneWrongInOnePercent, kScaledOnePercent, kNanOnOneShape, kSlower };

ShadowVerdict simulate(Fault fault, double speedup, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> jitter(0, 0.03);
  const char* shapes[] = {"tokens=64", "tokens=77", "tokens=128", "tokens=256"};
  const double shape_weight[] = {0.55, 0.05, 0.25, 0.15};  // tokens=77: 5% of requests
  ShadowRule rule;
  std::vector<ShadowSample> samples;
  for (int i = 0; i < rule.max_samples; ++i) {
    double pick = u(rng), acc = 0;
    int s = 0;
    while (s < 3 && pick > (acc += shape_weight[s])) ++s;
    std::vector<double> out(64);
    for (double& x : out) x = (u(rng) - 0.5) * 8;
    std::vector<double> cand = out;
    for (double& x : cand) x *= 1 + (u(rng) - 0.5) * 2e-3;  // the candidate's own rounding
    if (fault == Fault::kOneWrongInOnePercent && u(rng) < 0.01) cand[static_cast<size_t>(u(rng) * 63)] += 2.0;
    if (fault == Fault::kScaledOnePercent)
      for (double& x : cand) x *= 1.01;
    if (fault == Fault::kNanOnOneShape && s == 1) cand[5] = std::nan("");
    ShadowComparison c = compare_shadow_outputs(HostTensor::from_values(DataType::kFloat16, {8, 8}, out),
                                                HostTensor::from_values(DataType::kFloat16, {8, 8}, cand));
    const double active = 1.0 * (1 + jitter(rng));
    const double wanted = fault == Fault::kSlower ? 0.95 : speedup;
    samples.push_back({active, active / wanted * (1 + jitter(rng)), c.agreed, c.summary, shapes[s]});
    if (!c.agreed || samples.size() % 32 == 0) {
      ShadowDecision d = decide_shadow(samples, rule);
      if (d.verdict != ShadowVerdict::kContinue) return d.verdict;
    }
  }
  return decide_shadow(samples, rule).verdict;
}

TEST(ShadowFaultInjection, NoWrongOrSlowerCandidateIsEverPromoted) {
  const int runs = 60;
  int injected = 0, promoted_bad = 0, promoted_good = 0;
  for (Fault f : {Fault::kOneWrongInOnePercent, Fault::kScaledOnePercent, Fault::kNanOnOneShape, Fault::kSlower}) {
    for (int seed = 0; seed < runs; ++seed) {
      ++injected;
      // Every faulty candidate is also 15% faster, so that only its fault can keep it out.
      if (simulate(f, 1.15, 1000u * static_cast<uint32_t>(f) + seed) == ShadowVerdict::kPromote) ++promoted_bad;
    }
  }
  for (int seed = 0; seed < runs; ++seed)
    promoted_good += simulate(Fault::kNone, 1.15, 99000u + seed) == ShadowVerdict::kPromote;
  std::printf(
      "shadow fault injection: %d wrong or slower candidates, %d promoted; %d of %d correct faster ones promoted\n",
      injected, promoted_bad, promoted_good, runs);
  EXPECT_EQ(promoted_bad, 0);
  EXPECT_EQ(promoted_good, runs);  // the rule can promote: the test above could fail
}

}  // namespace
}  // namespace kiln
