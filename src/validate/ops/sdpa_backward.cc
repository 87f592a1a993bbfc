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
  const Operand* m = nullptr;                                // op[0..6] in the inputs' order, or null: values only
};

// Every output's values (y[0..2]: dq, dk, dv) and, with operands' bounds, magnitudes (mag[0..2]).
struct BackwardResult {
  Values y[3], mag[3];
};

BackwardResult run_backward(const SdpaGeom& s, const BackwardOperands& x) {
  BackwardResult r;
  const int64_t dims[3] = {s.d, s.d, s.dv};
  const int64_t rows[3] = {s.b * s.h * s.sq, s.b * s.hk * s.skv, s.b * s.hk * s.skv};
  const bool with_mag = x.m != nullptr;
  for (int t = 0; t < 3; ++t) {
    r.y[t].assign(static_cast<size_t>(rows[t] * dims[t]), 0.0);
    if (with_mag) r.mag[t].assign(r.y[t].size(), 0.0);
  }
  const Operand* m = x.m;
  const int bias_at = 6;
  const SdpaBackwardFactors f =
      with_mag ? sdpa_backward_factors(s.scale, m[0].carries, m[1].carries, m[2].carries, m[3].carries, m[4].carries,
                                       x.bias && m[bias_at].carries, m[5].carries)
               : SdpaBackwardFactors{};
  const int64_t group = s.h / s.hk;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      const int64_t kv_head = b * s.hk + h / group;
      // A padding mask: queries past the entry's length have no keys (their dq rows stay 0), keys past it no
      // queries (their dk, dv rows stay 0).
      const int64_t lq = x.seq_len_q ? sdpa_length((*x.seq_len_q)[b], s.sq) : s.sq;
      const int64_t lkv = x.seq_len_kv ? sdpa_length((*x.seq_len_kv)[b], s.skv) : s.skv;
      for (int64_t i = 0; i < s.sq; ++i) {
        const int64_t row = (b * s.h + h) * s.sq + i;
        int64_t first = 0, last = 0;
        sdpa_keys(s.band, i, lq, lkv, &first, &last);
        const double* qi = x.q->data() + row * s.d;
        const double* oi = x.o->data() + row * s.dv;
        const double* gi = x.dout->data() + row * s.dv;
        double di = 0.0, ni = 0.0;  // D_i = dO_i . O_i, and its error bound's sum
        for (int64_t d = 0; d < s.dv; ++d) di += gi[d] * oi[d];
        if (with_mag)
          for (int64_t d = 0; d < s.dv; ++d) ni += (*m[4].mag)[row * s.dv + d] * (*m[3].mag)[row * s.dv + d];
        for (int64_t j = first; j < last; ++j) {
          const int64_t krow = kv_head * s.skv + j;
          const double* kj = x.k->data() + krow * s.d;
          const double* vj = x.v->data() + krow * s.dv;
          const int64_t bias_row = s.bias.present ? sdpa_bias_row(s.bias, b, h, i, s.sq, s.skv) : 0;
          double dot = 0.0, dp = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += qi[d] * kj[d];
          for (int64_t d = 0; d < s.dv; ++d) dp += gi[d] * vj[d];
          const double score = dot * s.scale + (x.bias ? (*x.bias)[bias_row + j] : 0.0);
          const double p = std::exp(score - (*x.stats)[row]);
          const double ds = p * (dp - di);
          double* dqi = r.y[0].data() + row * s.d;
          double* dkj = r.y[1].data() + krow * s.d;
          double* dvj = r.y[2].data() + krow * s.dv;
          for (int64_t d = 0; d < s.d; ++d) dqi[d] += s.scale * ds * kj[d];
          for (int64_t d = 0; d < s.d; ++d) dkj[d] += s.scale * ds * qi[d];
          for (int64_t d = 0; d < s.dv; ++d) dvj[d] += p * gi[d];
          if (!with_mag) continue;
          double qk = 0.0, gv = 0.0;
          for (int64_t d = 0; d < s.d; ++d) qk += (*m[0].mag)[row * s.d + d] * (*m[1].mag)[krow * s.d + d];
          for (int64_t d = 0; d < s.dv; ++d) gv += (*m[4].mag)[row * s.dv + d] * (*m[2].mag)[krow * s.dv + d];
          const SdpaBackwardPair e = sdpa_backward_pair(
              f, p, ds, dp - di, qk, x.bias ? (*m[bias_at].mag)[bias_row + j] : 0.0, (*m[5].mag)[row], gv, ni);
          double* mq = r.mag[0].data() + row * s.d;
          double* mk = r.mag[1].data() + krow * s.d;
          double* mv = r.mag[2].data() + krow * s.dv;
          for (int64_t d = 0; d < s.d; ++d) mq[d] += e.dq * (*m[1].mag)[krow * s.d + d];
          for (int64_t d = 0; d < s.d; ++d) mk[d] += e.dk * (*m[0].mag)[row * s.d + d];
          for (int64_t d = 0; d < s.dv; ++d) mv[d] += e.dv * (*m[4].mag)[row * s.dv + d];
        }
      }
    }
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
  BackwardOperands x{
      in[0], in[1], in[2], in[3], in[4], in[5], at(roles.bias), at(roles.seq_len_q), at(roles.seq_len_kv)};
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
