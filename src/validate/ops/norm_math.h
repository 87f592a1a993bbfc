// Internal to the validate layer: the magnitude terms of layer and RMS norms, evaluated by the host reference (host compiler) and
// the device reference (nvcc) alike (validate/reference_math.h says how magnitudes work).
#pragma once

#include <math.h>

#include "kiln/graph/graph.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

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

}  // namespace kiln::validate_internal
