// The scaled dot-product attention family's host reference for the backward pass (sdpa_backward): dq, dk, dv
// from q, k, v, o, do and the forward's statistics, by cuDNN's formulas (sdpa_math.h sdpa_backward_pair), with
// their magnitudes.
#include <algorithm>
#include <cmath>

#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

// The node's operands as the pass reads them: values, and with magnitudes (the magnitude or the scale pass) their
// bounds and whether each carries error.
struct BackwardOperands {
  const Values *q, *k, *v, *o, *dout, *stats, *bias = nullptr;
  const Values *seq_len_q = nullptr, *seq_len_kv = nullptr;  // with a padding mask, each entry's lengths
  // Ragged: q's (dq's), k's (dk's), v's (dv's) and o's (do's) offsets (kiln/graph/graph.h SdpaAttrs::ragged).
  const Values *ragged_q = nullptr, *ragged_k = nullptr, *ragged_v = nullptr, *ragged_o = nullptr;
  const Operand* m = nullptr;    // op[0..6] in the inputs' order, or null: values only
  const Values* keep = nullptr;  // dropout's mask [B, H, Sq, Skv] (SdpaGeom::dropout), or null
};

// Where a row of each tensor is, in rows of its own width: query row (b, h, i) of q and dq (`q`), o and do (`o`),
// the statistics (`row`, dense); key row (b, hk, j) of k and dk (`k`), v and dv (`v`), dense `krow`. The dense
// index unless ragged (sdpa_math.h sdpa_ragged_row).
struct QueryRow {
  int64_t row, q, o;
};
QueryRow query_row(const SdpaGeom& s, const BackwardOperands& x, int64_t b, int64_t h, int64_t i) {
  const int64_t row = (b * s.h + h) * s.sq + i;
  if (!x.ragged_q) return QueryRow{row, row, row};
  const size_t e = static_cast<size_t>(b);
  return QueryRow{row, sdpa_ragged_row((*x.ragged_q)[e], s.h, s.d, s.b, s.sq, h, i),
                  sdpa_ragged_row((*x.ragged_o)[e], s.h, s.dv, s.b, s.sq, h, i)};
}
struct KeyRow {
  int64_t k, v;
};
KeyRow key_row(const SdpaGeom& s, const BackwardOperands& x, int64_t b, int64_t hk, int64_t j) {
  const int64_t krow = (b * s.hk + hk) * s.skv + j;
  if (!x.ragged_k) return KeyRow{krow, krow};
  const size_t e = static_cast<size_t>(b);
  return KeyRow{sdpa_ragged_row((*x.ragged_k)[e], s.hk, s.d, s.b, s.skv, hk, j),
                sdpa_ragged_row((*x.ragged_v)[e], s.hk, s.dv, s.b, s.skv, hk, j)};
}

// Ragged, each output starts NaN (what an unwritten, poisoned output holds) but for the rows an entry owns, 0: its
// first seq_len_q query rows (dq) and seq_len_kv key rows (dk, dv).
void clear_owned_rows(const SdpaGeom& s, const BackwardOperands& x, Values (&y)[3]) {
  for (Values& t : y) std::fill(t.begin(), t.end(), std::nan(""));
  for (int64_t b = 0; b < s.b; ++b) {
    const int64_t lq = sdpa_length((*x.seq_len_q)[static_cast<size_t>(b)], s.sq);
    const int64_t lkv = sdpa_length((*x.seq_len_kv)[static_cast<size_t>(b)], s.skv);
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t i = 0; i < lq; ++i) std::fill_n(y[0].data() + query_row(s, x, b, h, i).q * s.d, s.d, 0.0);
    for (int64_t hk = 0; hk < s.hk; ++hk)
      for (int64_t j = 0; j < lkv; ++j) {
        const KeyRow kr = key_row(s, x, b, hk, j);
        std::fill_n(y[1].data() + kr.k * s.d, s.d, 0.0);
        std::fill_n(y[2].data() + kr.v * s.dv, s.dv, 0.0);
      }
  }
}

// Every output's values (y[0..2]: dq, dk, dv) and, with operands' bounds, magnitudes (mag[0..2]); the largest |dS|
// over the pairs visited (kSdpaBackwardDsAmax) and the largest bound of one (NaN where a dS is).
struct BackwardResult {
  Values y[3], mag[3];
  double ds_amax = 0, ds_amax_mag = 0;
};

// max(m, x) where a NaN, once seen, stays.
double keep_largest(double m, double x) { return std::isnan(m) || std::isnan(x) ? NAN : std::max(m, x); }

BackwardResult run_backward(const SdpaGeom& s, const BackwardOperands& x) {
  BackwardResult r;
  const int64_t dims[3] = {s.d, s.d, s.dv};
  const int64_t rows[3] = {s.b * s.h * s.sq, s.b * s.hk * s.skv, s.b * s.hk * s.skv};
  const bool with_mag = x.m != nullptr;
  for (int t = 0; t < 3; ++t) {
    r.y[t].assign(static_cast<size_t>(rows[t] * dims[t]), 0.0);
    if (with_mag) r.mag[t].assign(r.y[t].size(), 0.0);
  }
  const bool ragged = x.ragged_q != nullptr;
  if (ragged) clear_owned_rows(s, x, r.y);
  const Operand* m = x.m;
  const int bias_at = 6;
  const SdpaBackwardFactors f =
      with_mag ? sdpa_backward_factors(s.scale, m[0].carries, m[1].carries, m[2].carries, m[3].carries, m[4].carries,
                                       x.bias && m[bias_at].carries, m[5].carries)
               : SdpaBackwardFactors{};
  const int64_t group = s.h / s.hk;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      // A padding mask: queries past the entry's length have no keys (their dq rows stay 0), keys past it no
      // queries (their dk, dv rows stay 0). Ragged, those rows are not the entry's own: not visited.
      const int64_t lq = x.seq_len_q ? sdpa_length((*x.seq_len_q)[b], s.sq) : s.sq;
      const int64_t lkv = x.seq_len_kv ? sdpa_length((*x.seq_len_kv)[b], s.skv) : s.skv;
      for (int64_t i = 0; i < (ragged ? lq : s.sq); ++i) {
        const QueryRow at = query_row(s, x, b, h, i);
        int64_t first = 0, last = 0;
        sdpa_keys(s.band, i, lq, lkv, &first, &last);
        const double* qi = x.q->data() + at.q * s.d;
        const double* oi = x.o->data() + at.o * s.dv;
        const double* gi = x.dout->data() + at.o * s.dv;
        double di = 0.0, ni = 0.0;  // D_i = dO_i . O_i, and its error bound's sum
        for (int64_t d = 0; d < s.dv; ++d) di += gi[d] * oi[d];
        if (with_mag)
          for (int64_t d = 0; d < s.dv; ++d) ni += (*m[4].mag)[at.o * s.dv + d] * (*m[3].mag)[at.o * s.dv + d];
        for (int64_t j = first; j < last; ++j) {
          const KeyRow kr = key_row(s, x, b, h / group, j);
          const double* kj = x.k->data() + kr.k * s.d;
          const double* vj = x.v->data() + kr.v * s.dv;
          const int64_t bias_row = s.bias.present ? sdpa_bias_row(s.bias, b, h, i, s.sq, s.skv) : 0;
          double dot = 0.0, dp = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += qi[d] * kj[d];
          for (int64_t d = 0; d < s.dv; ++d) dp += gi[d] * vj[d];
          const double score = dot * s.scale + (x.bias ? (*x.bias)[bias_row + j] : 0.0);
          const double p = std::exp(score - (*x.stats)[at.row]);
          // Dropout: o summed p w (w = keep / (1 - dropout)), so dv sums it too and dP is (dO . v_j) w.
          const double w =
              x.keep ? sdpa_dropped(1.0, (*x.keep)[static_cast<size_t>(at.row * s.skv + j)], s.dropout) : 1.0;
          dp *= w;
          const double ds = p * (dp - di);
          r.ds_amax = keep_largest(r.ds_amax, std::fabs(ds));
          double* dqi = r.y[0].data() + at.q * s.d;
          double* dkj = r.y[1].data() + kr.k * s.d;
          double* dvj = r.y[2].data() + kr.v * s.dv;
          for (int64_t d = 0; d < s.d; ++d) dqi[d] += s.scale * ds * kj[d];
          for (int64_t d = 0; d < s.d; ++d) dkj[d] += s.scale * ds * qi[d];
          for (int64_t d = 0; d < s.dv; ++d) dvj[d] += p * w * gi[d];
          if (!with_mag) continue;
          double qk = 0.0, gv = 0.0;
          for (int64_t d = 0; d < s.d; ++d) qk += (*m[0].mag)[at.q * s.d + d] * (*m[1].mag)[kr.k * s.d + d];
          for (int64_t d = 0; d < s.dv; ++d) gv += (*m[4].mag)[at.o * s.dv + d] * (*m[2].mag)[kr.v * s.dv + d];
          const SdpaBackwardPair e = sdpa_backward_pair(
              f, p, ds, dp - di, qk, x.bias ? (*m[bias_at].mag)[bias_row + j] : 0.0, (*m[5].mag)[at.row], gv * w, ni);
          r.ds_amax_mag = keep_largest(r.ds_amax_mag, e.ds);
          double* mq = r.mag[0].data() + at.q * s.d;
          double* mk = r.mag[1].data() + kr.k * s.d;
          double* mv = r.mag[2].data() + kr.v * s.dv;
          for (int64_t d = 0; d < s.d; ++d) mq[d] += e.dq * (*m[1].mag)[kr.k * s.d + d];
          for (int64_t d = 0; d < s.d; ++d) mk[d] += e.dk * (*m[0].mag)[at.q * s.d + d];
          for (int64_t d = 0; d < s.dv; ++d) mv[d] += e.dv * w * (*m[4].mag)[at.o * s.dv + d];
        }
      }
    }
  // (Ragged, an unowned row's value is NaN and its magnitude stays 0: std::max keeps its first argument.)
  if (with_mag)
    for (int t = 0; t < 3; ++t)
      for (size_t e = 0; e < r.y[t].size(); ++e) r.mag[t][e] = std::max(r.mag[t][e], std::fabs(r.y[t][e]));
  return r;
}

}  // namespace

HostNodeResult sdpa_backward_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                                  const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  HostNodeResult r;
  const SdpaInputs roles = sdpa_inputs(node);
  const auto at = [&](int i) { return i >= 0 ? in[static_cast<size_t>(i)] : nullptr; };
  BackwardOperands x{in[0],
                     in[1],
                     in[2],
                     in[3],
                     in[4],
                     in[5],
                     at(roles.bias),
                     at(roles.seq_len_q),
                     at(roles.seq_len_kv),
                     at(roles.ragged_q),
                     at(roles.ragged_k),
                     at(roles.ragged_v),
                     at(roles.ragged_o)};
  if (p.sdpa.dropout > 0) x.keep = at(roles.dropout_keep);
  if (p.output == kSdpaBackwardDsAmax) {  // sdpa_fp8_backward's amax_dp: the largest |dS|, a bound of it
    r.y = {run_backward(p.sdpa, x).ds_amax};
    if (op) {
      x.m = op->data();
      const BackwardResult b = run_backward(p.sdpa, x);
      r.m = {std::max(b.ds_amax_mag, b.ds_amax)};
      x.m = sop->data();
      const BackwardResult c = run_backward(p.sdpa, x);
      r.sc = {std::max(c.ds_amax_mag, c.ds_amax)};
    }
    return r;
  }
  const size_t which = static_cast<size_t>(p.output);
  r.y = std::move(run_backward(p.sdpa, x).y[which]);
  if (op) {
    x.m = op->data();
    r.m = std::move(run_backward(p.sdpa, x).mag[which]);
    x.m = sop->data();
    r.sc = std::move(run_backward(p.sdpa, x).mag[which]);
  }
  return r;
}

}  // namespace kiln::validate_internal
