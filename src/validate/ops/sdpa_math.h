// Internal to the validate layer: the magnitude term of scaled dot-product attention, evaluated by the host reference (host compiler) and
// the device reference (nvcc) alike (validate/reference_math.h says how magnitudes work).
#pragma once

#include <math.h>

#include "kiln/graph/graph.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

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
