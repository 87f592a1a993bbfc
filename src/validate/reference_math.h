// Internal to the validate layer: scalar math shared by the host reference (host compiler) and the device
// reference (nvcc), so that both evaluate the very same formulas: the pointwise modes, and the rules that
// propagate the magnitude term of the accumulation bound (docs/numerics.md "The accumulation bound").
//
// Magnitudes. Every tensor t of a graph gets a magnitude B_t, per element, with two properties:
//   (1) B_t >= |t|                         (a bound on the exact value), and
//   (2) |accumulation error of t| <= c*B_t (to first order in c),
// where c is the coefficient of the output being checked: lambda * sqrt(K) * u for the accumulations (K
// the longest reduction on its path, u the unit roundoff of the accumulation) plus one fp32 rounding per
// node on the path for the nodes' own roundings (each at most u32 |y| <= u32 B_y, carried downstream by
// the same linear rules), which is why the rules below need not count them. A graph input has B = |x| and no error (E =
// false); every tensor a node writes carries error (E = true). For a contraction of graph inputs,
// B = sum_k |a_k| |b_k| exactly, the magnitude term of Higham & Mary's bound; the rules below carry it
// through everything downstream.
#pragma once

#include <math.h>

#include "kiln/graph/graph.h"

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

namespace kiln::validate_internal {

// The value of a pointwise mode, in double (b is ignored by unary modes).
KILN_HD inline double pointwise_value(PointwiseMode mode, double a, double b) {
  const double kInvSqrt2 = 0.70710678118654752440;
  const double kSqrt2OverPi = 0.79788456080286535588;
  switch (mode) {
    case PointwiseMode::kAdd: return a + b;
    case PointwiseMode::kSub: return a - b;
    case PointwiseMode::kMul: return a * b;
    case PointwiseMode::kDiv: return a / b;
    case PointwiseMode::kMin: return ::fmin(a, b);
    case PointwiseMode::kMax: return ::fmax(a, b);
    case PointwiseMode::kScale: return a * b;
    case PointwiseMode::kBiasAdd: return a + b;
    case PointwiseMode::kRelu: return a > 0 ? a : 0.0;
    case PointwiseMode::kGeluErf: return 0.5 * a * (1.0 + ::erf(a * kInvSqrt2));
    case PointwiseMode::kGeluTanh: return 0.5 * a * (1.0 + ::tanh(kSqrt2OverPi * (a + 0.044715 * a * a * a)));
    case PointwiseMode::kSilu: return a / (1.0 + ::exp(-a));
    case PointwiseMode::kSigmoid: return 1.0 / (1.0 + ::exp(-a));
    case PointwiseMode::kTanh: return ::tanh(a);
    case PointwiseMode::kExp: return ::exp(a);
    case PointwiseMode::kIdentity: return a;
  }
  return a;
}

// Magnitude of y = mode(a, b) from the operands' magnitudes (ba, bb), whether they carry accumulation
// error (ea, eb), and the reference values (va, vb, vy). First order in c; each rule keeps (1) and (2):
//   add/sub/bias_add  |a +- b| <= Ba + Bb; errors add
//   min/max           |min(a, b)| <= max(Ba, Bb); the error of a min is at most the larger error
//   mul/scale         |ab| <= Ba Bb; error |a| e_b + |b| e_a <= (Ea + Eb) c Ba Bb
//   div               |a/b| <= Ba/|b|; error e_a/|b| + |a| e_b/b^2 <= c Ba/|b| (1 + Eb Bb/|b|)
//   unary f, f(0)=0   |f(x)| <= L|x| and error <= L e_x with L = sup|f'|: 1 (relu, tanh, identity),
//                     1.13 (both GELUs: sup|f'| = 1.1290), 1.1 (SiLU: 1.0998)
//   sigmoid           |f| = |vy|, L = 1/4;  exp: error e^x e_x, so B = e^x max(1, Bx)
KILN_HD inline double pointwise_magnitude(PointwiseMode mode, double va, double vb, double vy, double ba, double bb,
                                          bool ea, bool eb) {
  (void)va;
  switch (mode) {
    case PointwiseMode::kAdd:
    case PointwiseMode::kSub:
    case PointwiseMode::kBiasAdd: return ba + bb;
    case PointwiseMode::kMin:
    case PointwiseMode::kMax: return ::fmax(ba, bb);
    case PointwiseMode::kMul:
    case PointwiseMode::kScale: return ((ea && eb) ? 2.0 : 1.0) * ba * bb;
    case PointwiseMode::kDiv: {
      const double inv = 1.0 / ::fabs(vb);
      return ba * inv * (1.0 + (eb ? bb * inv : 0.0));
    }
    case PointwiseMode::kRelu:
    case PointwiseMode::kTanh:
    case PointwiseMode::kIdentity: return ba;
    case PointwiseMode::kGeluErf:
    case PointwiseMode::kGeluTanh: return 1.13 * ba;
    case PointwiseMode::kSilu: return 1.1 * ba;
    case PointwiseMode::kSigmoid: return ::fmax(::fabs(vy), 0.25 * ba);
    case PointwiseMode::kExp: return ::fabs(vy) * ::fmax(1.0, ba);
  }
  return ba;
}

// Magnitude factor of a contraction (conv, matmul) or a sum: the own accumulation error is at most
// c * sum|a||b|, and each operand that carries error adds at most c * sum|a||b| more (|a| e_b <= c Ba Bb),
// so B_y = (1 + Ea + Eb) * contraction(Ba, Bb).
KILN_HD inline double contraction_factor(bool ea, bool eb) { return 1.0 + (ea ? 1.0 : 0.0) + (eb ? 1.0 : 0.0); }

// Magnitude of one element of a layer/RMS norm y = xhat * s + b, xhat = (x - mean) * inv,
// inv = 1/sqrt(var + eps). Row statistics: `var` the reference's (biased) variance, or mean(x^2) for RMS;
// `bm` = mean_j Bx_j; `dterm` = mean_j |x_j - mean| (Ex Bx_j + mean_err) with mean_err = (1 + Ex) bm for
// layer norm and 0 for RMS norm (which subtracts no mean).
// Error sources (in units of c): the mean (own sum and propagated: mean_err), the variance (own sum of
// non-negative terms: var; propagated: 2 dterm) which moves inv by 1/2 dvar/(var + eps) relative, and
// the element itself: |dy| <= |s| inv (Ex Bx + mean_err) + |s xhat| (var + 2 dterm) / (2 (var + eps)),
// plus Bs |xhat| and Bb when scale or bias carry error.
KILN_HD inline double norm_magnitude(bool layer, double vy, double xhat, double vs, double bx, double bs, double bb,
                                     bool ex, bool es, bool eb, double inv, double var, double eps, double bm,
                                     double dterm) {
  const double mean_err = layer ? (1.0 + (ex ? 1.0 : 0.0)) * bm : 0.0;
  double e =
      ::fabs(vs) * inv * ((ex ? bx : 0.0) + mean_err) + 0.5 * ::fabs(vs * xhat) * (var + 2.0 * dterm) / (var + eps);
  if (es) e += bs * ::fabs(xhat);
  if (eb) e += bb;
  return ::fmax(::fabs(vy), e);
}

// The per-row term of norm_magnitude's `dterm` for one element.
KILN_HD inline double norm_dterm_part(bool layer, double x, double mean, double bx, bool ex, double bm) {
  const double mean_err = layer ? (1.0 + (ex ? 1.0 : 0.0)) * bm : 0.0;
  return ::fabs(x - mean) * ((ex ? bx : 0.0) + mean_err);
}

// SDPA, o = sum_j p_j v_j with p = softmax(s), s_j = scale q.k_j. With S_j = (1 + Eq + Ek) scale
// sum_d Bq_d Bk_jd bounding the score's error (in units of c), to first order
//   |do| <= sum_j p_j |v_j - o| S_j       (scores through the softmax: dp_j = p_j (ds_j - sum_l p_l ds_l))
//         + sum_j p_j |v_j|               (the softmax denominator's own sum: relative error <= c)
//         + sum_j p_j |v_j|               (the own accumulation of sum_j p_j v_j)
//         + Ev sum_j p_j Bv_j             (error carried by v)
// so with |v_j - o| <= Bv_j + |o|: B_o = max(|o|, sum_j p_j ((Bv_j + |o|) S_j + (2 + Ev) Bv_j)).
// The caller accumulates `acc` += sdpa_magnitude_term(...) over keys j and takes max(|o|, acc).
KILN_HD inline double sdpa_magnitude_term(double p, double bv, double vo, double s_mag, bool ev) {
  return p * ((bv + ::fabs(vo)) * s_mag + (2.0 + (ev ? 1.0 : 0.0)) * bv);
}

}  // namespace kiln::validate_internal
