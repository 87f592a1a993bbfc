// Internal to the validate layer: scalar math shared by the host reference (host compiler) and the device
// reference (nvcc), so that both evaluate the very same formulas: the rules that propagate the magnitude
// term of the accumulation bound (docs/numerics.md "The accumulation bound"). A family's own formulas are
// in src/validate/ops/<family>_math.h (the pointwise modes' values and magnitudes, the norm and SDPA
// magnitude terms), on the same terms.
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

// Magnitude factor of a contraction (conv, matmul) or a sum: the own accumulation error is at most
// c * sum|a||b|, and each operand that carries error adds at most c * sum|a||b| more (|a| e_b <= c Ba Bb),
// so B_y = (1 + Ea + Eb) * contraction(Ba, Bb).
KILN_HD inline double contraction_factor(bool ea, bool eb) { return 1.0 + (ea ? 1.0 : 0.0) + (eb ? 1.0 : 0.0); }

}  // namespace kiln::validate_internal
