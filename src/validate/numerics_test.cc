#include "kiln/validate/numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

HostTensor t16(const std::vector<double>& v) {
  return HostTensor::from_values(DataType::kFloat16, {static_cast<int64_t>(v.size())}, v);
}

TEST(ErrorMeasures, ExactMatch) {
  const Tolerance tol = default_tolerance(DataType::kFloat16);
  auto e = measure_error(t16({1, 2, 3}), t16({1, 2, 3}), tol);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->count, 3);
  EXPECT_EQ(e->max_abs, 0.0);
  EXPECT_EQ(e->max_rel, 0.0);
  EXPECT_EQ(e->nmse, 0.0);
  EXPECT_EQ(e->mismatch_count, 0);
  EXPECT_EQ(judge(*e, tol), Disposition::kPassed);
}

TEST(ErrorMeasures, KnownValues) {
  Tolerance tol{0.1, 0.0, 1.0, 1e-3};
  HostTensor out = HostTensor::from_values(DataType::kFloat32, {3}, {1, 2, 1e-4});
  HostTensor ref = HostTensor::from_values(DataType::kFloat32, {3}, {1, 1, 0});
  auto e = measure_error(out, ref, tol);
  ASSERT_TRUE(e.is_ok());
  EXPECT_DOUBLE_EQ(e->max_abs, 1.0);
  EXPECT_DOUBLE_EQ(e->max_rel, 1.0);               // |2-1| / 1
  EXPECT_NEAR(e->nmse, (1.0 + 1e-8) / 2.0, 1e-9);  // sum err^2 / sum ref^2
  EXPECT_EQ(e->mismatch_count, 1);
  EXPECT_EQ(e->worst_index, 1);
  // The floor bounds max_rel where the reference is 0: 1e-4 / max(0, 1e-3) = 0.1.
  auto e2 = measure_error(HostTensor::from_values(DataType::kFloat32, {1}, {1e-4}),
                          HostTensor::from_values(DataType::kFloat32, {1}, {0}), tol);
  EXPECT_NEAR(e2->max_rel, 0.1, 1e-6);
}

TEST(ErrorMeasures, PerturbedOutputIsIncorrect) {
  HostTensor ref = HostTensor::zeros(DataType::kFloat16, {64});
  ref.fill_uniform(3);
  HostTensor out = ref;
  const Tolerance tol = default_tolerance(DataType::kFloat16);
  EXPECT_EQ(judge(*measure_error(out, ref, tol), tol), Disposition::kPassed);
  // One fp16 ulp is within tolerance...
  out.storage[5] = fp16_to_double(static_cast<uint16_t>(fp16_from_double(out.storage[5]) + 1));
  EXPECT_EQ(judge(*measure_error(out, ref, tol), tol), Disposition::kPassed);
  // ...a 0.1 error is not.
  out.storage[7] += 0.1;
  auto e = measure_error(out, ref, tol);
  EXPECT_EQ(e->mismatch_count, 1);
  EXPECT_EQ(e->worst_index, 7);
  EXPECT_EQ(judge(*e, tol), Disposition::kIncorrect);
}

TEST(ErrorMeasures, NaNAlwaysFails) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Tolerance huge{1e30, 1e30, 1e30, 1.0};
  auto e = measure_error(t16({1, nan, 3}), t16({1, 2, 3}), huge);
  EXPECT_EQ(e->nan_count, 1);
  EXPECT_EQ(judge(*e, huge), Disposition::kIncorrect);
  e = measure_error(t16({1, inf, 3}), t16({1, 2, 3}), huge);
  EXPECT_EQ(e->nan_count, 1);
  EXPECT_EQ(judge(*e, huge), Disposition::kIncorrect);
  // A non-finite reference matches only the same value.
  e = measure_error(t16({nan, inf}), t16({nan, inf}), default_tolerance(DataType::kFloat16));
  EXPECT_EQ(e->mismatch_count, 0);
  e = measure_error(t16({1.0}), t16({inf}), huge);
  EXPECT_EQ(e->mismatch_count, 1);
  EXPECT_EQ(judge(*e, huge), Disposition::kIncorrect);
}

TEST(ErrorMeasures, NmseGate) {
  // Each element is within atol, but the error is systematic: nmse catches it.
  Tolerance tol{0.5, 0.0, 1e-3, 1e-3};
  auto e = measure_error(HostTensor::from_values(DataType::kFloat32, {2}, {1.2, 1.2}),
                         HostTensor::from_values(DataType::kFloat32, {2}, {1.0, 1.0}), tol);
  EXPECT_EQ(e->mismatch_count, 0);
  EXPECT_NEAR(e->nmse, 0.04, 1e-6);
  EXPECT_EQ(judge(*e, tol), Disposition::kIncorrect);
}

// The band is closed, |out - ref| <= atol + rtol |ref| (docs/numerics.md): an error of exactly the band
// passes, and an integer output (a band of 0) that matches exactly is correct.
TEST(ErrorMeasures, TheBandIncludesItsEdge) {
  Tolerance tol{0.5, 0.25, 1.0, 1e-3};  // band: 0.5 + 0.25 |ref|, exact in binary at these values
  auto e = measure_error(HostTensor::from_values(DataType::kFloat32, {3}, {1.25, 3.0, -2.5}),
                         HostTensor::from_values(DataType::kFloat32, {3}, {0.0, 2.0, -4.0}), tol);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->mismatch_count, 1);  // 1.25 over a band of 0.5 fails; 1.0 at ref 2 and 1.5 at ref -4 are the edge
  EXPECT_EQ(e->worst_index, 0);
  e = measure_error(HostTensor::from_values(DataType::kFloat32, {2}, {3.0, -2.5}),
                    HostTensor::from_values(DataType::kFloat32, {2}, {2.0, -4.0}), tol);
  EXPECT_EQ(e->mismatch_count, 0);
  EXPECT_EQ(judge(*e, tol), Disposition::kPassed);
  const Tolerance exact = default_tolerance(DataType::kInt32);
  ASSERT_EQ(exact.atol, 0.0);
  ASSERT_EQ(exact.rtol, 0.0);
  const HostTensor ints = HostTensor::from_values(DataType::kInt32, {3}, {-7, 0, 42});
  e = measure_error(ints, ints, exact);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->mismatch_count, 0);
  EXPECT_EQ(judge(*e, exact), Disposition::kPassed);
  e = measure_error(HostTensor::from_values(DataType::kInt32, {3}, {-7, 1, 42}), ints, exact);
  EXPECT_EQ(e->mismatch_count, 1);
  EXPECT_EQ(judge(*e, exact), Disposition::kIncorrect);
}

TEST(ErrorMeasures, DimsMustMatch) {
  auto e = measure_error(t16({1, 2}), t16({1, 2, 3}), {});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

TEST(Tolerance, PerDtypeDefaultsAndReductionLength) {
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat32).atol, 1e-5);
  EXPECT_GT(default_tolerance(DataType::kFloat32, {1, true}).atol, 1e-4);
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat16).atol, 1e-2);
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kBFloat16).atol, 2e-2);
  EXPECT_GT(default_tolerance(DataType::kFp8E4M3).atol, default_tolerance(DataType::kBFloat16).atol);
  EXPECT_GT(default_tolerance(DataType::kFp8E5M2).atol, default_tolerance(DataType::kFp8E4M3).atol);
  EXPECT_EQ(default_tolerance(DataType::kInt32).atol, 0.0);
  // atol grows like sqrt(K / 64) past K = 64; rtol and nmse do not.
  ToleranceOptions k;
  k.reduction_length = 6400;
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat16, k).atol, 1e-1);
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat16, k).rtol, 1e-2);
  k.reduction_length = 16;
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat16, k).atol, 1e-2);
  // Plain fp32 scales atol and nmse linearly in K.
  k.reduction_length = 640;
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat32, k).atol, 1e-4);
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat32, k).nmse_max, 1e-9);
  // A coarser intermediate dtype sets the base.
  ToleranceOptions inter;
  inter.intermediate_dtype = DataType::kBFloat16;
  EXPECT_DOUBLE_EQ(default_tolerance(DataType::kFloat32, inter).atol, 2e-2);
}

TEST(CheckOutputs, ReportAndSummary) {
  Graph g = make_graph("mm", DataType::kFloat16);
  int a = add_tensor(g, "a", {4, 128}), b = add_tensor(g, "b", {128, 8}), c = add_tensor(g, "y", {4, 8});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  auto in = make_random_inputs(g, 1);
  ASSERT_TRUE(in.is_ok());
  auto ref = run_host_reference(g, *in);
  ASSERT_TRUE(ref.is_ok());
  EXPECT_EQ(reduction_length_into(g, c), 128);

  auto rep = check_outputs(g, *ref, *ref);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->verdict, Disposition::kPassed);
  ASSERT_EQ(rep->outputs.size(), 1u);
  const std::string s = rep->outputs[0].summary;
  EXPECT_EQ(s.rfind("y: Passed max_abs=0.00e+00 max_rel=0.00e+00 nmse=0.00e+00 (fp16 tol atol=", 0), 0u) << s;
  EXPECT_NE(s.find("K=128"), std::string::npos) << s;

  std::vector<HostTensor> bad = *ref;
  bad[0].storage[3] += 1.0;
  rep = check_outputs(g, bad, *ref);
  EXPECT_EQ(rep->verdict, Disposition::kIncorrect);
  EXPECT_NE(rep->summary().find("y: Incorrect"), std::string::npos) << rep->summary();
  EXPECT_NE(rep->summary().find("mismatches=1/32"), std::string::npos) << rep->summary();

  bad = *ref;
  bad[0].storage[0] = std::numeric_limits<double>::quiet_NaN();
  CheckOptions loose;
  loose.tolerance_scale = 1e6;
  rep = check_outputs(g, bad, *ref, loose);
  EXPECT_EQ(rep->verdict, Disposition::kIncorrect);
  EXPECT_NE(rep->summary().find("nonfinite=1"), std::string::npos) << rep->summary();

  EXPECT_EQ(check_outputs(g, {}, *ref).status().code(), StatusCode::kInvalidArgument);
}

TEST(Disposition, Names) {
  EXPECT_STREQ(disposition_name(Disposition::kPassed), "Passed");
  EXPECT_STREQ(disposition_name(Disposition::kIncorrect), "Incorrect");
  EXPECT_STREQ(disposition_name(Disposition::kNotSupported), "NotSupported");
  EXPECT_STREQ(disposition_name(Disposition::kFailed), "Failed");
  EXPECT_STREQ(disposition_name(Disposition::kNotVerified), "NotVerified");
}

}  // namespace
}  // namespace kiln
