// kiln/validate/numerics.h: error measures between an output and its reference, per-dtype tolerances, and the
// disposition of a checked result. See docs/numerics.md for the reasoning behind every number here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/disposition.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/check_types.h"
#include "kiln/validate/host_tensor.h"
#include "kiln/validate/reference.h"

namespace kiln {

// The disposition of a checked result (Passed, Incorrect, ...): kiln/core/disposition.h. The types of a
// check (Tolerance, ErrorMeasures, OutputCheck, CheckReport, CheckOptions): kiln/validate/check_types.h.

// The gate's safety factors (docs/numerics.md "The gate"). With V_i = sigma_i^2 + ulp_i sigma_i the
// expected squared difference of element i (sigma_i^2 = var_coeff S_i^2; ulp_i the output dtype's
// spacing at ref_i: both results are rounded to that grid and differ by a step only when the error
// crosses a grid point), D_i = dir_coeff S_i (toward zero) and E_i = dir_sym_coeff S_i (either sign), a
// statistical output fails when
//   sum (out - ref)^2           > kGateSizeFactor * sum V_i + kGateQuanta * q^2        (error size)
//   b = sum (out - ref) sign(ref), R = kGateBiasSigmas * sqrt(sum V_i) + kGateQuanta * q:
//   b < -(kGateBiasFactor * sum (D_i + E_i) + R)  or  b > kGateBiasFactor * sum E_i + R  (bias: truncation
//                                                 only shrinks a result, so away from zero only E_i is allowed)
//   |out_i - ref_i| > kGateElementSigmas sigma_i + D_i + E_i + elem_rtol |ref_i|
//                     + (ulp(ref_i) + ulp(|ref_i| + that + ulp(ref_i) / 2)) / 2 for any i  (per element)
// with q = min(max ulp_i, 2 rms ulp_i), a typical grid step. kGateQuanta steps are always allowed: when
// sigma << ulp the count of crossed grid points is a Poisson variable of small mean, and a handful must
// not fail a correct result. kGateElementSigmas: a Gaussian exceeds 7.5 standard deviations with
// probability 6e-14 (and sigma_i is an upper estimate), so 10^9 checked elements raise a false alarm with
// probability below 1e-4.
constexpr double kGateSizeFactor = 4.0;
constexpr double kGateBiasFactor = 1.5;
constexpr double kGateBiasSigmas = 6.0;
constexpr double kGateQuanta = 4.0;
constexpr double kGateElementSigmas = 7.5;

// Options that widen the default tolerance.
struct ToleranceOptions {
  // Length of the longest reduction feeding the output (conv C/g * filter size, matmul K, reduced
  // element count, normalized row length, SDPA key count); 1 for elementwise work.
  int64_t reduction_length = 1;
  // fp32 results may come from TF32 tensor cores (10-bit mantissa inputs); cuDNN does this for fp32
  // conv/matmul unless math mode forbids it.
  bool allow_tf32 = false;
  // The dtype intermediates were rounded to, when it is coarser than the output dtype.
  DataType intermediate_dtype = DataType::kFloat32;
  // The caller judges accumulation error with the accumulation bound (a magnitude tensor is known): plain
  // fp32 then keeps its base numbers instead of the legacy K/64 scaling below.
  bool accumulation_bound = false;
};

// Default tolerance for an output of `dtype` (see docs/numerics.md "Tolerances"):
//   fp32  atol=rtol=1e-5, nmse 1e-10     (TF32 allowed: atol 1e-2, rtol 5e-3, nmse 2e-6)
//   fp16  atol=rtol=1e-2, nmse 1e-5,  rel floor 1e-3
//   bf16  atol=rtol=2e-2, nmse 1e-4,  rel floor 1e-2
//   e4m3  atol=rtol=1.25e-1, nmse 2e-2;  e5m2 atol=rtol=2.5e-1, nmse 6e-2
//   int8/int32/int64: exact but for atol 1 on int8 (one rounding step)
// With k = max(1, K / 64) for reduction length K: atol is multiplied by sqrt(k) (output/input rounding
// errors add like a random walk). Plain fp32 is left at its base numbers when options.accumulation_bound
// (accumulation error is then judged per element by the bound, see check_outputs); without it (legacy:
// no magnitudes known) its atol and nmse_max are multiplied by k. rtol does not change: it already tracks
// |ref|. The coarser of `dtype` and options.intermediate_dtype sets the base numbers.
Tolerance default_tolerance(DataType dtype, const ToleranceOptions& options = {});

// Compares two tensors of the same dims element by element (through their strides; dtypes may differ).
// `magnitude` (optional, same dims) widens each element's band by tol.acc_coeff * M_i; `scale` (optional,
// same dims, used when tol.statistical) gives the expected-error model its S_i; the output dtype's grid
// is out.dtype's. Large tensors are split into fixed chunks compared on several threads and joined in
// order, so the figures do not depend on the thread count.
StatusOr<ErrorMeasures> measure_error(const HostTensor& out, const HostTensor& ref, const Tolerance& tol,
                                      const HostTensor* magnitude = nullptr, const HostTensor* scale = nullptr);

// Passed or Incorrect. NaN/Inf in `out` where `ref` is finite is always Incorrect, whatever `tol` says.
// nmse is compared with tol.nmse_max + e.nmse_allowance; a statistical measure must also stay within
// its size and bias limits (bias_within) and have no element over its own allowance (element_ratio <= 1).
Disposition judge(const ErrorMeasures& e, const Tolerance& tol);

// The bias test alone: mean_signed_rel within -bias_limit .. bias_limit_away (see kGateBiasFactor).
bool bias_within(const ErrorMeasures& e);

// Checks `outputs` against a reference with magnitudes (run_*_reference_with_magnitudes), both in the
// order of graph.outputs. Each floating-point output gets its dtype's default tolerance (plain fp32 not
// scaled by K) plus the accumulation bound: element i may differ by an extra
//   acc_coeff * M_i,  acc_coeff = lambda(K) * sqrt(K) * u_acc + n * 2^-24
// (K and u_acc from accumulation_into, n the nodes on the path, M the reference's magnitude), and nmse by
// an extra 4 (sqrt(K) u_acc + n 2^-24)^2 sum M^2 / sum ref^2. With the reference's scales (S) each
// floating-point output also gets the expected-error model (expected_error_model()): the error-size, bias
// and per-element tests of judge(). Returns kInvalidArgument when counts or dims do not line up.
StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const ReferenceOutputs& reference, const CheckOptions& options = {});

// The same from reference values alone (no magnitudes): the legacy tolerances, where plain fp32 scales
// atol and nmse_max by K/64. Prefer the overload above.
StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::vector<HostTensor>& references, const CheckOptions& options = {});

// The reduction length of the longest reduction on any path into `tensor` (1 if none).
int64_t reduction_length_into(const Graph& graph, int tensor);

// What accumulates on the paths into `tensor`: the longest reduction (as reduction_length_into), the
// coarsest unit roundoff any accumulating node uses (conv/matmul: their compute dtype, 2^-11 for fp16
// and 2^-24 for fp32, and 2^-14 when an operand is fp8: Hopper's tensor cores keep about 14 bits when
// they accumulate fp8 products; reductions, norms and SDPA accumulate in fp32), and the number of nodes.
// For the expected-error model also: the sum of u_t^2 / 3 over the tensors on the path (not `tensor`
// itself) that the reference rounds to a dtype coarser than fp32 (a fused kernel keeps them unrounded;
// a uniform rounding error of at most u_t has mean square u_t^2 / 3), over SDPA nodes (the kernel rounds
// its probabilities to the value dtype before the second product), and the GEMMs with fp32 operands
// (TF32 rounds them to 10 mantissa bits when allowed). `stored` (CheckOptions::stored_intermediates)
// rounds every intermediate on the path to at least that dtype's coarseness.
struct AccumulationPath {
  int64_t reduction_length = 1;
  double unit_roundoff = 0x1p-24;
  int nodes = 0;
  double rounding_var = 0.0;
  int fp32_gemms = 0;
  // Transcendental pointwise nodes on the path (function_approximation): the sum of their relative
  // approximation errors squared, and the sum of those errors (they are deterministic, so directed).
  double approx_var = 0.0;
  double approx_dir = 0.0;
};
AccumulationPath accumulation_into(const Graph& graph, int tensor, std::optional<DataType> stored = std::nullopt);
// The same with the graph's roles found once (`roles` of `graph`): for a caller asking about every output,
// linear in what the paths visit rather than in outputs x nodes.
AccumulationPath accumulation_into(const Graph& graph, const GraphRoles& roles, int tensor,
                                   std::optional<DataType> stored = std::nullopt);

// The expected-error model of an output (docs/numerics.md "The gate"), in units of the scale S_i:
// var_coeff = u_acc^2 (K/3 + B^2) / 3 + rounding_var + (4 n 2^-24)^2 and dir_coeff = u_acc B / 2,
// with B = ceil(K / kGateTruncationBlock) (0 when K = 1). The accumulation of K terms rounds at every
// step (a random walk: mean square u^2/3 per step times the partial sum, whose mean square over a
// random order of the terms is at most S^2/3), and tensor cores add a block of products to the fp32
// accumulator rounding toward zero (Fasi, Higham, Mikaitis & Pranesh 2021): at most one unit roundoff
// of the partial sum per block, toward zero. Over a random order the partial sum after block b has mean
// (b / B) y, so the truncations' expected sum, signed as y, is at most u sum_b (b / B) |y| <= u (B / 2) S
// (dir_coeff). `tf32`: CheckOptions::allow_tf32 (each fp32 GEMM
// on the path then adds 2 (2^-11)^2 / 3 for its operands' rounding).
// Transcendental pointwise nodes add approx_var to var_coeff and approx_dir to dir_sym_coeff: cuDNN evaluates
// them with fast approximations, not within the 4 ulps the per-node term assumes (function_approximation).
constexpr int64_t kGateTruncationBlock = 16;

// The relative error, in units of the node's scale S (>= |x| for these modes), that cuDNN's evaluation of
// a pointwise function may carry (docs/numerics.md "Function approximations"); 0 for exact modes
// (arithmetic, relu, identity). Measured on the H200 (cuDNN 9.19): fp32 tanh up to 1.04e-5 and gelu_tanh
// 1.22e-5 relative, so 2^-16 for tanh, sigmoid, silu, exp and gelu_tanh; a GEMM's fused GELU (erf) epilogue
// differs from the exact function as the tanh form does (at most 1.79e-4 |x|), so 2^-12 for gelu_erf.
double function_approximation(PointwiseMode mode);
struct ErrorModel {
  double var_coeff = 0.0;
  double dir_coeff = 0.0;      // toward zero: u_acc B / 2
  double dir_sym_coeff = 0.0;  // either sign: approx_dir
};
ErrorModel expected_error_model(const AccumulationPath& path, bool tf32 = false);

// The per-element failure probability the accumulation bound is set for, and its lambda for reduction
// length K: lambda = sqrt(2 ln(2K / delta)) / (1 - u), from Higham & Mary (2019), Theorem 3.1: the bound
// |error| <= lambda sqrt(K) u sum|a||b| (first order) fails with probability at most
// 2K exp(-lambda^2 (1 - u)^2 / 2) = delta.
constexpr double kAccumulationFailureProbability = 1e-12;
double accumulation_lambda(int64_t reduction_length);

}  // namespace kiln
