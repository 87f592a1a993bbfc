// Internal to the validate layer: the pointwise modes' values and magnitude rules, evaluated by the host reference (host compiler) and
// the device reference (nvcc) alike (validate/reference_math.h says how magnitudes work).
#pragma once

#include <math.h>

#include "kiln/graph/graph.h"
#include "validate/reference_math.h"

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
    case PointwiseMode::kAbs: return ::fabs(a);
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
//   unary f, f(0)=0   |f(x)| <= L|x| and error <= L e_x with L = sup|f'|: 1 (relu, tanh, abs, identity),
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
    case PointwiseMode::kAbs:
    case PointwiseMode::kIdentity: return ba;
    case PointwiseMode::kGeluErf:
    case PointwiseMode::kGeluTanh: return 1.13 * ba;
    case PointwiseMode::kSilu: return 1.1 * ba;
    case PointwiseMode::kSigmoid: return ::fmax(::fabs(vy), 0.25 * ba);
    case PointwiseMode::kExp: return ::fabs(vy) * ::fmax(1.0, ba);
  }
  return ba;
}

}  // namespace kiln::validate_internal
