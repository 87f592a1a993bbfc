// Internal to the validate layer: the numerics gate's per-element arithmetic (docs/numerics.md "The
// gate"), shared by the host comparison (numerics.cc, nvcc not needed) and the device comparison
// (device_check.cu), so that both reach the same verdict from the same formulas. One pass over an output
// accumulates GateSums; gate_merge joins the sums of two index ranges (the left one first); the verdict
// is taken from the sums alone (judge() in numerics.cc).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln/graph/graph.h"

#if defined(__CUDACC__)
#define KILN_GATE_HD __host__ __device__ inline
#else
#define KILN_GATE_HD inline
#endif

namespace kiln::validate_internal {

// How many offending elements (lowest indices first) a check reports with their values.
constexpr int kMaxOffenders = 8;

// One output's gate, computed on the host (gate_params in numerics.cc) from its dtype, tolerance and
// error model.
struct GateParams {
  // Per-element band: |out - ref| <= atol + rtol |ref| + acc_coeff M.
  double atol = 0, rtol = 0, rel_floor = 1e-6, acc_coeff = 0;
  int with_magnitude = 0;  // M given (the accumulation bound)
  // The expected-error model (needs the scale tensor S): sigma_i^2 = var_coeff S_i^2 is the expected
  // squared error of the unrounded result, D_i = dir_coeff S_i its possible directed part toward zero
  // (truncating accumulation) and dir_sym_coeff S_i its possible directed part of either sign (function
  // approximations).
  int statistical = 0;
  double var_coeff = 0, dir_coeff = 0, dir_sym_coeff = 0;
  // The per-element test: element i fails when |out - ref| > elem_sigmas sigma_i + (dir_coeff +
  // dir_sym_coeff) S_i + elem_rtol |ref_i| + (ulp(ref_i) + ulp(|ref_i| + that allowance + ulp(ref_i) / 2)) / 2.
  double elem_sigmas = 0, elem_rtol = 0;
  // The output dtype's grid: mantissa bits stored and the exponent of the smallest normal number
  // (ulp_bits < 0: an integer dtype, spacing 1).
  int ulp_bits = 23, ulp_emin = -126;
};

struct GateOffender {
  int64_t index = -1;  // row-major logical index
  double out = 0, ref = 0, allowed = 0;
};

struct GateSums {
  int64_t count = 0;           // elements compared
  int64_t nan_count = 0;       // out non-finite where ref is finite
  int64_t mismatch_count = 0;  // outside the band (non-finite included)
  int64_t worst_index = -1;    // largest |out - ref| / band; ties: the lowest index
  double worst_ratio = -1;
  double max_abs = 0, max_rel = 0;
  double sum_sq_err = 0, sum_sq_ref = 0, sum_sq_mag = 0;  // over finite pairs
  // The expected-error model (statistical only), over finite pairs:
  double sum_expected = 0;      // sum V_i, V_i = sigma_i^2 + ulp_i sigma_i: expected (out - ref)^2
  double sum_signed = 0;        // sum (out - ref) sign(ref)
  double sum_abs_ref = 0;       // sum |ref|
  double sum_directed = 0;      // sum D_i (toward zero)
  double sum_directed_sym = 0;  // sum dir_sym_coeff S_i (either sign)
  // The per-element test: the largest |out - ref| / element allowance (its index; ties: the lowest) and
  // how many elements exceed their allowance.
  double elem_worst_ratio = 0;
  int64_t elem_worst_index = -1;
  int64_t elem_over_count = 0;
  double max_ulp = 0;        // largest output-grid spacing at a reference value
  double sum_ulp_sq = 0;     // sum of the squared spacings (their mean sets the "grid step" allowance)
  int64_t finite_count = 0;  // finite pairs
};

KILN_GATE_HD bool gate_finite(double x) { return x == x && x - x == 0.0; }

// Spacing of the output dtype's grid at |y| (subnormal spacing below the smallest normal), from the
// double's exponent field (no libm call: this runs once per element).
KILN_GATE_HD double gate_ulp(const GateParams& p, double y) {
  if (p.ulp_bits < 0) return 1.0;
  uint64_t b;
  memcpy(&b, &y, sizeof b);
  int e = static_cast<int>((b >> 52) & 0x7FF) - 1023;  // -1023 for 0 and subnormal doubles
  if (e < p.ulp_emin) e = p.ulp_emin;
  const uint64_t r = static_cast<uint64_t>(e - p.ulp_bits + 1023) << 52;  // a normal double for every dtype
  double u;
  memcpy(&u, &r, sizeof u);
  return u;
}

// Accumulates element `index` (out x, reference y, magnitude m, scale s) into `g`. `offenders` (room for
// kMaxOffenders, `*n_offenders` used) receives mismatching elements while there is room; the caller
// visits indices in ascending order within one GateSums.
KILN_GATE_HD void gate_element(const GateParams& p, double x, double y, double m, double s, int64_t index, GateSums& g,
                               GateOffender* offenders, int* n_offenders) {
  ++g.count;
  double ratio;
  double allowed = 0;
  bool mismatch;
  if (!gate_finite(y)) {
    const bool same = (x != x && y != y) || x == y;  // NaN matches NaN; an infinity itself
    mismatch = !same;
    ratio = mismatch ? INFINITY : 0.0;
  } else if (!gate_finite(x)) {
    ++g.nan_count;
    mismatch = true;
    ratio = INFINITY;
  } else {
    const double diff = fabs(x - y), ay = fabs(y);
    allowed = p.atol + p.rtol * ay + (p.with_magnitude ? p.acc_coeff * m : 0.0);
    if (diff > g.max_abs) g.max_abs = diff;
    const double rel = diff / (ay > p.rel_floor ? ay : (p.rel_floor > 0 ? p.rel_floor : 1e-30));
    if (rel > g.max_rel) g.max_rel = rel;
    g.sum_sq_err += diff * diff;
    g.sum_sq_ref += y * y;
    if (p.with_magnitude) g.sum_sq_mag += m * m;
    mismatch = diff > allowed;
    ratio = allowed > 0 ? diff / allowed : (diff > 0 ? 1.7976931348623157e308 : 0.0);
    if (p.statistical) {
      const double var = p.var_coeff * s * s;
      const double ulp = gate_ulp(p, y);
      g.sum_expected += var + ulp * sqrt(var);
      g.sum_signed += y > 0 ? x - y : (y < 0 ? y - x : 0.0);
      g.sum_abs_ref += ay;
      g.sum_directed += p.dir_coeff * s;
      g.sum_directed_sym += p.dir_sym_coeff * s;
      // The element against its own expected error: the unrounded results differ by at most elem_sigmas
      // standard deviations plus the directed parts; each rounding to the output grid adds half a step
      // (the kernel's at its own value, which may lie in the next binade: the exact result is within half a
      // step of the reference).
      const double unrounded = p.elem_sigmas * sqrt(var) + (p.dir_coeff + p.dir_sym_coeff) * s + p.elem_rtol * ay;
      const double elem_allowed = unrounded + 0.5 * (ulp + gate_ulp(p, ay + unrounded + 0.5 * ulp));
      const double elem_ratio = diff / elem_allowed;
      if (elem_ratio > 1.0) ++g.elem_over_count;
      if (elem_ratio > g.elem_worst_ratio || g.elem_worst_index < 0) {
        g.elem_worst_ratio = elem_ratio;
        g.elem_worst_index = index;
      }
      if (ulp > g.max_ulp) g.max_ulp = ulp;
      g.sum_ulp_sq += ulp * ulp;
    }
    ++g.finite_count;
  }
  if (mismatch) {
    ++g.mismatch_count;
    if (*n_offenders < kMaxOffenders) {
      offenders[*n_offenders].index = index;
      offenders[*n_offenders].out = x;
      offenders[*n_offenders].ref = y;
      offenders[*n_offenders].allowed = allowed;
      ++*n_offenders;
    }
  }
  if (ratio > g.worst_ratio || (ratio == g.worst_ratio && (g.worst_index < 0 || index < g.worst_index))) {
    g.worst_ratio = ratio;
    g.worst_index = index;
  }
}

// a <- a joined with b (b's indices follow a's).
KILN_GATE_HD void gate_merge(GateSums& a, const GateSums& b) {
  if (b.worst_ratio > a.worst_ratio ||
      (b.worst_ratio == a.worst_ratio && b.worst_index >= 0 && (a.worst_index < 0 || b.worst_index < a.worst_index))) {
    a.worst_ratio = b.worst_ratio;
    a.worst_index = b.worst_index;
  }
  a.count += b.count;
  a.nan_count += b.nan_count;
  a.mismatch_count += b.mismatch_count;
  a.max_abs = a.max_abs > b.max_abs ? a.max_abs : b.max_abs;
  a.max_rel = a.max_rel > b.max_rel ? a.max_rel : b.max_rel;
  a.sum_sq_err += b.sum_sq_err;
  a.sum_sq_ref += b.sum_sq_ref;
  a.sum_sq_mag += b.sum_sq_mag;
  a.sum_expected += b.sum_expected;
  a.sum_signed += b.sum_signed;
  a.sum_abs_ref += b.sum_abs_ref;
  a.sum_directed += b.sum_directed;
  a.sum_directed_sym += b.sum_directed_sym;
  if (b.elem_worst_index >= 0 &&
      (a.elem_worst_index < 0 || b.elem_worst_ratio > a.elem_worst_ratio ||
       (b.elem_worst_ratio == a.elem_worst_ratio && b.elem_worst_index < a.elem_worst_index))) {
    a.elem_worst_ratio = b.elem_worst_ratio;
    a.elem_worst_index = b.elem_worst_index;
  }
  a.elem_over_count += b.elem_over_count;
  a.max_ulp = a.max_ulp > b.max_ulp ? a.max_ulp : b.max_ulp;
  a.sum_ulp_sq += b.sum_ulp_sq;
  a.finite_count += b.finite_count;
}

}  // namespace kiln::validate_internal
