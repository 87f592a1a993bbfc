// Internal to the validate layer: the magnitude term of scaled dot-product attention, evaluated by the host reference (host compiler) and
// the device reference (nvcc) alike (validate/reference_math.h says how magnitudes work).
#pragma once

#include <math.h>

#include "kiln/graph/graph.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

// The keys each query attends to (kiln/graph/graph.h SdpaAttrs), as plain numbers for both compilers.
struct SdpaBand {
  int64_t left = 0;      // a sliding window: keys j > diagonal - left; 0: none
  int64_t right = -1;    // keys j <= diagonal + right; -1: none (causal is 0)
  int bottom_right = 0;  // query i's diagonal is key i + lkv - lq (else key i)
  int padding = 0;       // each batch entry's lengths come from its seq_len_q and seq_len_kv
};

// An additive bias on the scores, packed [bb, bh, sq, skv]: bb and bh are 1 (broadcast) or the batch and head
// counts; absent when `present` is 0.
struct SdpaBias {
  int present = 0;
  int64_t bb = 1, bh = 1;
};

// The bias of (batch b, head h, query i)'s row: its skv scores' terms start here.
KILN_HD inline int64_t sdpa_bias_row(const SdpaBias& s, int64_t b, int64_t h, int64_t i, int64_t sq, int64_t skv) {
  return (((s.bb == 1 ? 0 : b) * s.bh + (s.bh == 1 ? 0 : h)) * sq + i) * skv;
}

// The keys query i of an entry with lq queries and lkv keys attends to: [*first, *last) of [0, lkv) (empty for
// a query past lq: a padded row).
KILN_HD inline void sdpa_keys(const SdpaBand& b, int64_t i, int64_t lq, int64_t lkv, int64_t* first, int64_t* last) {
  if (i >= lq) {
    *first = *last = 0;
    return;
  }
  const int64_t diag = i + (b.bottom_right ? lkv - lq : 0);
  const int64_t f = b.left > 0 ? diag - b.left + 1 : 0;
  const int64_t l = b.right >= 0 ? diag + b.right + 1 : lkv;
  *first = f < 0 ? 0 : (f > lkv ? lkv : f);
  *last = l > lkv ? lkv : (l < *first ? *first : l);
}

// Paged K/V caches: key (value) j of entry b is row j % block_size of cache block table[b][j / block_size].
struct SdpaPaging {
  int paged = 0;
  int64_t block_size = 1, pages = 0, blocks = 1;
};

// Where the row of key (or value) j of kv head `kv_head` (b * hk + head) starts, in elements of a k (v) tensor
// whose rows hold `width` elements: [B, Hk, Skv, width] packed, or with paging the cache [blocks, Hk, block_size,
// width] through `table` ([B, pages] packed; a block index out of range reads block 0 or the last).
KILN_HD inline int64_t sdpa_kv_row(const SdpaPaging& p, const double* table, int64_t kv_head, int64_t hk, int64_t skv,
                                   int64_t j, int64_t width) {
  if (!p.paged) return (kv_head * skv + j) * width;
  const int64_t b = kv_head / hk, head = kv_head % hk;
  const double entry = table[b * p.pages + j / p.block_size];         // clamped as a double: any value converts safely
  const int64_t block = !(entry >= 0)                            ? 0  // NaN included
                        : entry >= static_cast<double>(p.blocks) ? p.blocks - 1
                                                                 : static_cast<int64_t>(entry);
  return ((block * hk + head) * p.block_size + j % p.block_size) * width;
}

// Ragged (THD) tensors, packed token-major [B, H, S, W] (kiln/graph/graph.h SdpaAttrs::ragged): entry b's row s
// is token offset[b] / (H*W) + s of the buffer. The references hold the buffer as the dense [B, H, S, W] tensor it
// also is, where token t is entry t / S, row t % S: this is that dense row, (entry * H + h) * S + row. An offset
// that is not whole tokens is rounded down and a token past the buffer is clamped to its last (the caller keeps
// them valid; Kiln's checks draw them so).
KILN_HD inline int64_t sdpa_ragged_row(double offset, int64_t heads, int64_t width, int64_t entries, int64_t rows,
                                       int64_t h, int64_t s) {
  const int64_t last = entries * rows - 1;
  const double first = !(offset >= 0) ? 0.0 : ::floor(offset / static_cast<double>(heads * width));
  int64_t t = (first > static_cast<double>(last) ? last : static_cast<int64_t>(first)) + s;
  if (t > last) t = last;
  return ((t / rows) * heads + h) * rows + t % rows;
}

// A padding mask's length as the references take it: the tensor's value clamped to [0, extent] (a length
// past the extent reads no further than cuDNN can).
KILN_HD inline int64_t sdpa_length(double value, int64_t extent) {
  return !(value >= 0) ? 0 : (value > static_cast<double>(extent) ? extent : static_cast<int64_t>(value));  // NaN: 0
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

// Dropout (kiln/graph/graph.h SdpaAttrs::dropout): probability p as o sums it, kept (keep nonzero) and scaled by
// 1 / (1 - dropout), or zeroed. The statistics and the softmax's sum are the scores' own, before dropout. The
// magnitude term takes this weight for p: dropout scales each term's error as it scales the term.
KILN_HD inline double sdpa_dropped(double p, double keep, double dropout) {
  return keep != 0.0 ? p / (1.0 - dropout) : 0.0;
}

// The softmax statistics (a second output): lse = mx + log(sum), sum = sum_j exp(s_j - mx); a row without keys
// (a padded query) has none: -infinity.
KILN_HD inline double sdpa_log_sum_exp(double mx, double sum) { return sum > 0.0 ? mx + ::log(sum) : -INFINITY; }

// Its magnitude: d lse = sum_j p_j ds_j, so |d lse| <= sum_j p_j S_j (`acc`, the scores' error bounds weighted by
// their probabilities), plus the relative error c of the sum of exponentials, which the log turns into an
// absolute c: B_lse = max(|lse|, acc + 1) (a row without keys: its |lse|, infinite, is never checked).
KILN_HD inline double sdpa_stats_magnitude(double acc, double lse) {
  const double m = acc + 1.0;
  return ::fabs(lse) > m ? ::fabs(lse) : m;
}

// The backward pass (sdpa_backward), per (query i, key j) pair, by cuDNN's formulas: P_ij = exp(S_ij - L_i) with
// S_ij = scale q_i.k_j (+ bias) and L_i the forward's statistics; dP_ij = dO_i.v_j, D_i = dO_i.O_i,
// dS_ij = P_ij (dP_ij - D_i); dq_i += scale dS_ij k_j, dk_j += scale dS_ij q_i, dv_j += P_ij dO_i.
// Their error bounds in units of c (first order; B the operands' magnitudes, E whether one carries error):
//   S_ij - L_i:  sigma = (1 + Eq + Ek) |scale| sum_d Bq Bk + (1 + Ebias) Bbias + El Bl
//   P_ij:        eP = P (sigma + 1)                                (the exponential's own rounding: the 1)
//   dP_ij - D_i: (1 + EdO + Ev) sum_d BdO Bv + (1 + EdO + Eo) sum_d BdO BO, plus its own subtraction |dP - D|
//   dS_ij:       edS = eP |dP - D| + P ((1 + EdO + Ev) sum BdO Bv + (1 + EdO + Eo) sum BdO BO + |dP - D|)
// and each gradient's magnitude sums its terms' carried errors and its own accumulation (|term| with the other
// operand's error): B_dq = |scale| sum_j (edS + |dS| (1 + Ek)) Bk_j, B_dk = |scale| sum_i (edS + |dS| (1 + Eq))
// Bq_i, B_dv = sum_i (eP + P (1 + EdO)) BdO_i, each at least |value|. (cuDNN also rounds P and dS to the io dtype
// before its matmuls: numerics.cc counts those roundings as it does the forward's P.)
struct SdpaBackwardFactors {
  double qk = 0, bias = 1, stats = 0, gv = 1, go = 1, k_own = 1, q_own = 1, do_own = 1, scale = 1;
};
KILN_HD inline SdpaBackwardFactors sdpa_backward_factors(double scale, bool eq, bool ek, bool ev, bool eo, bool edo,
                                                         bool ebias, bool estats) {
  SdpaBackwardFactors f;
  f.scale = ::fabs(scale);
  f.qk = contraction_factor(eq, ek) * f.scale;
  f.bias = ebias ? 2.0 : 1.0;
  f.stats = estats ? 1.0 : 0.0;
  f.gv = contraction_factor(edo, ev);
  f.go = contraction_factor(edo, eo);
  f.k_own = ek ? 2.0 : 1.0;
  f.q_own = eq ? 2.0 : 1.0;
  f.do_own = edo ? 2.0 : 1.0;
  return f;
}
// One pair's factors: the caller multiplies dq by Bk_j, dk by Bq_i and dv by BdO_i (elementwise over the head dim);
// ds, dS_ij's own bound (its error's bound plus |dS_ij|: sdpa_fp8_backward's amax_dp).
struct SdpaBackwardPair {
  double dq, dk, dv, ds;
};
// p = P_ij, ds = dS_ij, g = dP_ij - D_i, qk = sum_d Bq Bk, bias and stats the magnitudes of the bias term and of L_i
// (0 without a bias), gv = sum_d BdO Bv, go = sum_d BdO BO.
KILN_HD inline SdpaBackwardPair sdpa_backward_pair(const SdpaBackwardFactors& f, double p, double ds, double g,
                                                   double qk, double bias, double stats, double gv, double go) {
  const double sigma = f.qk * qk + f.bias * bias + f.stats * stats;
  const double ep = p * (sigma + 1.0);
  const double ag = ::fabs(g);
  const double eds = ep * ag + p * (f.gv * gv + f.go * go + ag);
  return SdpaBackwardPair{f.scale * (eds + ::fabs(ds) * f.k_own), f.scale * (eds + ::fabs(ds) * f.q_own),
                          ep + p * f.do_own, eds + ::fabs(ds)};
}

// FP8 attention (sdpa_fp8) as the references compute it: a plain sdpa of q descale_q, k descale_k and
// v descale_v descale_s scale_s (cuDNN rounds P to fp8 at scale_s and reads it back at descale_s: in exact
// arithmetic their product; the rounding is the error model's, numerics.cc), o that sdpa's output times scale_o,
// amax_o the largest |o| before scale_o. `s` holds the six scales in SdpaFp8Input's order.
struct SdpaFp8Factors {
  double q = 1, k = 1, v = 1, o = 1;
};
KILN_HD inline SdpaFp8Factors sdpa_fp8_factors(const double s[6]) {
  return SdpaFp8Factors{s[0], s[1], s[2] * s[3] * s[4], s[5]};
}

// FP8 attention's backward pass (sdpa_fp8_backward) as the references compute it: a plain sdpa_backward of q, k, v,
// o and do, each times its descale; cuDNN rounds P to fp8 at scale_s for dV = P^T dO and reads it back at descale_s,
// and rounds dS to fp8 at scale_dp for dQ = attn_scale dS K and dK = attn_scale dS^T Q and reads it back at
// descale_dp: in exact arithmetic dv times descale_s scale_s (`p`), dq and dk times descale_dp scale_dp (`ds`); the
// roundings are the error model's (numerics.cc). dq, dk, dv are then those gradients times scale_dq, scale_dk,
// scale_dv (`out`), the amax the largest of each before them; amax_dp the largest |dS| (before scale_dp). `s` holds
// the twelve scales in SdpaFp8BackwardInput's order.
struct SdpaFp8BackwardFactors {
  double in[5] = {1, 1, 1, 1, 1};  // q, k, v, o, do
  double grad[3] = {1, 1, 1};      // dq, dk, dv from the plain pass's
  double out[3] = {1, 1, 1};       // the stored dq, dk, dv from those
};
KILN_HD inline SdpaFp8BackwardFactors sdpa_fp8_backward_factors(const double s[12]) {
  SdpaFp8BackwardFactors f;
  for (int i = 0; i < 5; ++i) f.in[i] = s[i];
  const double p = s[5] * s[7], ds = s[6] * s[11];  // descale_s scale_s, descale_dp scale_dp
  f.grad[0] = ds;
  f.grad[1] = ds;
  f.grad[2] = p;
  for (int i = 0; i < 3; ++i) f.out[i] = s[8 + i];
  return f;
}

}  // namespace kiln::validate_internal
