// The scaled dot-product attention family's node plan (geometry, scale) and host reference.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/core/strings.h"
#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

// A backward pass's own tensors: do shaped as o, stats [B, H, Sq, 1], and dq, dk, dv shaped as q, k, v.
Status sdpa_backward_tensors(const Graph& g, const Node& node, const std::string& where, const SdpaGeom& s) {
  const auto q = tensor_dims(g, node.inputs[0]), k = tensor_dims(g, node.inputs[1]), v = tensor_dims(g, node.inputs[2]);
  const std::vector<std::pair<int, std::vector<int64_t>>> want = {{node.inputs[4], {s.b, s.h, s.sq, s.dv}},
                                                                  {node.inputs[5], {s.b, s.h, s.sq, 1}},
                                                                  {node.outputs[0], q},
                                                                  {node.outputs[1], k},
                                                                  {node.outputs[2], v}};
  for (const auto& [t, dims] : want)
    if (tensor_dims(g, t) != dims)
      return invalid_argument(where + ": " + tensor_label(g, t) + " " + dims_str(tensor_dims(g, t)) + " must be " +
                              dims_str(dims));
  return Status::ok();
}

Status sdpa_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const bool backward = is_attention_backward(node.op);
  const bool fp8 = node.op == OpKind::kSdpaFp8;
  const bool fp8_backward = node.op == OpKind::kSdpaFp8Backward;
  if (fp8_backward && (node.inputs.size() != (node.sdpa.padding ? 20u : 18u) || node.outputs.size() != 7))
    return invalid_argument(where + ": sdpa_fp8_backward takes q, k, v, o, do, stats, twelve scales (, the two "
                                    "lengths) and writes dq, dk, dv, amax_dq, amax_dk, amax_dv and amax_dp");
  for (size_t o = kFp8bAmaxDq; fp8_backward && o <= kFp8bAmaxDp; ++o)
    if (tensor_dims(g, node.outputs[o]) != std::vector<int64_t>{1, 1, 1, 1})
      return invalid_argument(where + ": amax " + tensor_label(g, node.outputs[o]) + " must be [1, 1, 1, 1]");
  for (size_t i = kFp8bDescaleQ; fp8_backward && i <= kFp8bScaleDp; ++i)
    if (tensor_dims(g, node.inputs[i]) != std::vector<int64_t>{1, 1, 1, 1})
      return invalid_argument(where + ": scale " + tensor_label(g, node.inputs[i]) + " must be [1, 1, 1, 1]");
  if (fp8 && (node.inputs.size() != (node.sdpa.padding ? 11u : 9u) || node.outputs.size() < 2))
    return invalid_argument(where + ": sdpa_fp8 takes q, k, v, six scales (, the two lengths) and writes o and amax_o "
                                    "(, stats)");
  if (fp8 && tensor_dims(g, node.outputs[kFp8AmaxO]) != std::vector<int64_t>{1, 1, 1, 1})
    return invalid_argument(where + ": amax_o " + tensor_label(g, node.outputs[kFp8AmaxO]) + " must be [1, 1, 1, 1]");
  for (size_t i = kFp8DescaleQ; fp8 && i <= kFp8ScaleO; ++i)
    if (tensor_dims(g, node.inputs[i]) != std::vector<int64_t>{1, 1, 1, 1})
      return invalid_argument(where + ": scale " + tensor_label(g, node.inputs[i]) + " must be [1, 1, 1, 1]");
  const size_t stats_out = fp8 ? kFp8Stats : 1;
  if (backward && !fp8_backward && (node.inputs.size() < 6 || node.outputs.size() != 3))
    return invalid_argument(where + ": sdpa_backward takes q, k, v, o, do, stats (, bias) (, the two lengths) and "
                                    "writes dq, dk, dv");
  const auto q = tensor_dims(g, node.inputs[0]), k = tensor_dims(g, node.inputs[1]), v = tensor_dims(g, node.inputs[2]),
             o = tensor_dims(g, backward ? node.inputs[3] : node.outputs[0]);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || o.size() != 4)
    return invalid_argument(where + ": q, k, v and o must be [B, H, S, D]");
  SdpaGeom& s = p.sdpa;
  s.b = q[0];
  s.h = q[1];
  s.sq = q[2];
  s.d = q[3];
  s.hk = k[1];
  s.skv = k[2];
  s.dv = v[3];
  const SdpaInputs roles = sdpa_inputs(node);
  if (node.sdpa.paged) {  // k and v are caches [blocks, Hk, block_size, D]; the tables say which block is which page
    if (roles.page_table_k < 0) return invalid_argument(where + ": paged caches without page tables");
    const auto tk = tensor_dims(g, node.inputs[static_cast<size_t>(roles.page_table_k)]),
               tv = tensor_dims(g, node.inputs[static_cast<size_t>(roles.page_table_v)]);
    if (tk.size() != 4 || tk != tv || k[0] != v[0] || k[2] != v[2])
      return invalid_argument(where + ": page tables " + dims_str(tk) + " / " + dims_str(tv) + " and caches " +
                              dims_str(k) + " / " + dims_str(v) + " must agree");
    s.paging = SdpaPaging{1, k[2], tk[2], k[0]};
    s.skv = tk[2] * k[2];
  } else if (k[0] != s.b || v[0] != s.b) {
    return invalid_argument(where + ": k " + dims_str(k) + " / v " + dims_str(v) + " do not fit q " + dims_str(q));
  }
  if (k[3] != s.d || v[1] != s.hk || (!node.sdpa.paged && v[2] != s.skv))
    return invalid_argument(where + ": k " + dims_str(k) + " / v " + dims_str(v) + " do not fit q " + dims_str(q));
  if (s.hk <= 0 || s.h % s.hk != 0)
    return invalid_argument(where + ": query heads " + std::to_string(s.h) + " must be a multiple of key heads " +
                            std::to_string(s.hk));
  if (o != std::vector<int64_t>{s.b, s.h, s.sq, s.dv})
    return invalid_argument(where + ": " + (backward ? "input " : "output ") +
                            tensor_label(g, backward ? node.inputs[3] : node.outputs[0]) + " " + dims_str(o) +
                            " must be " + dims_str({s.b, s.h, s.sq, s.dv}));
  if (backward) KILN_RETURN_IF_ERROR(sdpa_backward_tensors(g, node, where, s));
  if (!backward && node.outputs.size() > stats_out &&
      tensor_dims(g, node.outputs[stats_out]) != std::vector<int64_t>{s.b, s.h, s.sq, 1})
    return invalid_argument(where + ": statistics " + tensor_label(g, node.outputs[stats_out]) + " " +
                            dims_str(tensor_dims(g, node.outputs[stats_out])) + " must be " +
                            dims_str({s.b, s.h, s.sq, 1}));
  s.scale = node.sdpa.attn_scale ? *node.sdpa.attn_scale : 1.0 / std::sqrt(static_cast<double>(s.d));
  if (roles.bias >= 0) {
    const auto b = tensor_dims(g, node.inputs[static_cast<size_t>(roles.bias)]);
    if (b.size() != 4 || (b[0] != 1 && b[0] != s.b) || (b[1] != 1 && b[1] != s.h) || b[2] != s.sq || b[3] != s.skv)
      return invalid_argument(where + ": bias " + dims_str(b) + " must be [B or 1, H or 1, Sq, Skv] for q " +
                              dims_str(q) + " and k " + dims_str(k));
    s.bias = SdpaBias{1, b[0], b[1]};
  }
  const SdpaAttrs& a = node.sdpa;
  // The references take the mask the plan drew (kiln/validate/dropout_probe.h); without it this plan serves the
  // geometry (the cost) only: prepare_graph refuses to compute values of it.
  if (a.dropout > 0 && roles.dropout_keep >= 0) {
    if (fp8 || fp8_backward)
      return not_supported(where + ": dropout " + shortest_number(a.dropout) + ": FP8 attention takes no mask");
    const auto keep = tensor_dims(g, node.inputs[static_cast<size_t>(roles.dropout_keep)]);
    if (keep != std::vector<int64_t>{s.b, s.h, s.sq, s.skv})
      return invalid_argument(where + ": the dropout mask " + dims_str(keep) + " must be " +
                              dims_str({s.b, s.h, s.sq, s.skv}));
    s.dropout = a.dropout;
  }
  s.band.left = a.left_bound.value_or(0);
  s.band.right = a.effective_right_bound().value_or(-1);
  s.band.bottom_right = a.alignment == DiagonalAlignment::kBottomRight ? 1 : 0;
  s.band.padding = a.padding && roles.seq_len_q >= 0 ? 1 : 0;
  s.ragged = a.ragged && roles.ragged_q >= 0 ? 1 : 0;
  // The longest sum a row makes: its keys (a band's longest row; with a padding mask at most every key), or the
  // head dim.
  int64_t keys = s.band.padding ? s.skv : 0;
  for (int64_t i = 0; i < s.sq && keys < s.skv; ++i) {
    int64_t first = 0, last = 0;
    sdpa_keys(s.band, i, s.sq, s.skv, &first, &last);
    keys = std::max(keys, last - first);
  }
  p.reduction_length = std::max(keys, s.d);
  // A backward pass also sums dO.O over Dv, and dK, dV over every query of the key head's group.
  if (backward) p.reduction_length = std::max({p.reduction_length, s.dv, s.sq * (s.h / s.hk)});
  return Status::ok();
}

namespace {

// Shared by the value and the magnitude pass: per query row, the probabilities p_j over the keys it attends to,
// [first, last) (p[j] for key j), and the row's output.
// The node's optional inputs as the references read them (null: absent).
struct SdpaExtras {
  const Values* bias = nullptr;
  const Values* seq_len_q = nullptr;
  const Values* seq_len_kv = nullptr;
  const Values* page_table_k = nullptr;
  const Values* page_table_v = nullptr;
  const Values *ragged_q = nullptr, *ragged_k = nullptr, *ragged_v = nullptr, *ragged_o = nullptr;
  const Values* keep = nullptr;  // dropout's mask, [B, H, Sq, Skv] (SdpaGeom::dropout)
};

// Probability p of query row `row` (dense [B, H, Sq] order) for key j as o sums it: with dropout, kept and scaled by
// 1 / (1 - dropout), or dropped (sdpa_math.h sdpa_dropped).
double weight(const SdpaGeom& s, const SdpaExtras& x, int64_t row, int64_t j, double p) {
  return x.keep ? sdpa_dropped(p, (*x.keep)[static_cast<size_t>(row * s.skv + j)], s.dropout) : p;
}

// Where key (value) j's row of kv head `kv_head` starts in k (v): through the page table where the caches are
// paged, through the offsets (`ragged`, null otherwise) where the tensors are ragged.
int64_t kv_row(const SdpaGeom& s, const Values* table, const Values* ragged, int64_t kv_head, int64_t j,
               int64_t width) {
  if (ragged)
    return sdpa_ragged_row((*ragged)[static_cast<size_t>(kv_head / s.hk)], s.hk, width, s.b, s.skv, kv_head % s.hk, j) *
           width;
  return sdpa_kv_row(s.paging, table ? table->data() : nullptr, kv_head, s.hk, s.skv, j, width);
}

// A query row (b, h, i): `row` its index in q's dense [B, H, Sq] order (the statistics' and the bias's), `q` and
// `o` the rows it reads of q and writes of o (`row` itself unless ragged).
struct SdpaRowAt {
  int64_t row, q, o;
};
SdpaRowAt row_at(const SdpaGeom& s, const SdpaExtras& x, int64_t b, int64_t h, int64_t i) {
  const int64_t row = (b * s.h + h) * s.sq + i;
  if (!x.ragged_q) return SdpaRowAt{row, row, row};
  return SdpaRowAt{row, sdpa_ragged_row((*x.ragged_q)[static_cast<size_t>(b)], s.h, s.d, s.b, s.sq, h, i),
                   sdpa_ragged_row((*x.ragged_o)[static_cast<size_t>(b)], s.h, s.dv, s.b, s.sq, h, i)};
}

// `all_rows`: ragged, also an entry's rows past its length, as rows without keys (the dense statistics' rows, which
// cuDNN writes -infinity; measured on an H100 with cuDNN 9.19); else they are not visited (o's: not its own).
template <typename RowFn>
void for_each_sdpa_row(const SdpaGeom& s, const Values& q, const Values& k, const SdpaExtras& x, bool all_rows,
                       RowFn&& row_fn) {
  std::vector<double> score(static_cast<size_t>(s.skv));
  const int64_t group = s.h / s.hk;
  const Values* bias = x.bias;
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      const int64_t hk = h / group;
      const int64_t kv_head = b * s.hk + hk;
      const int64_t lq = x.seq_len_q ? sdpa_length((*x.seq_len_q)[b], s.sq) : s.sq;
      const int64_t lkv = x.seq_len_kv ? sdpa_length((*x.seq_len_kv)[b], s.skv) : s.skv;
      // Ragged, an entry's rows past its length are not its own (the next entry's, or a gap): not visited.
      for (int64_t i = 0; i < (x.ragged_q && !all_rows ? lq : s.sq); ++i) {
        const SdpaRowAt at = row_at(s, x, b, h, i);
        const double* qi = q.data() + at.q * s.d;
        int64_t first = 0, last = 0;
        sdpa_keys(s.band, i, lq, lkv, &first, &last);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j < last; ++j) {
          double dot = 0.0;
          const double* kj = k.data() + kv_row(s, x.page_table_k, x.ragged_k, kv_head, j, s.d);
          for (int64_t d = 0; d < s.d; ++d) dot += qi[d] * kj[d];
          score[j] = dot * s.scale + (bias ? (*bias)[sdpa_bias_row(s.bias, b, h, i, s.sq, s.skv) + j] : 0.0);
          mx = std::max(mx, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j < last; ++j) {
          score[j] = std::exp(score[j] - mx);
          sum += score[j];
        }
        for (int64_t j = first; j < last; ++j) score[j] /= sum;
        row_fn(at, kv_head, first, last, score.data(), sdpa_log_sum_exp(mx, sum));
      }
    }
}

// The offset of query row `row`'s bias terms (row = (b * H + h) * Sq + i).
int64_t bias_row_of(const SdpaGeom& s, int64_t row) {
  return sdpa_bias_row(s.bias, row / (s.h * s.sq), (row / s.sq) % s.h, row % s.sq, s.sq, s.skv);
}

// A row with no keys (a padded query) is written as zeros; ragged, what no entry's row covers is left NaN (what an
// unwritten, poisoned output holds).
Values run_sdpa(const SdpaGeom& s, const Values& q, const Values& k, const Values& v, const SdpaExtras& x) {
  Values o(static_cast<size_t>(s.b * s.h * s.sq * s.dv), x.ragged_o ? std::nan("") : 0.0);
  for_each_sdpa_row(s, q, k, x, false,
                    [&](const SdpaRowAt& at, int64_t kv_head, int64_t first, int64_t last, const double* p, double) {
                      double* oi = o.data() + at.o * s.dv;
                      std::fill(oi, oi + s.dv, 0.0);
                      for (int64_t j = first; j < last; ++j) {
                        const double* vj = v.data() + kv_row(s, x.page_table_v, x.ragged_v, kv_head, j, s.dv);
                        const double w = weight(s, x, at.row, j, p[j]);
                        for (int64_t d = 0; d < s.dv; ++d) oi[d] += w * vj[d];
                      }
                    });
  return o;
}

// The softmax statistics, dense [B, H, Sq, 1] also when q is ragged: each row's log-sum-exp (-infinity for a row
// without keys: a padded row, ragged too).
Values run_sdpa_stats(const SdpaGeom& s, const Values& q, const Values& k, const SdpaExtras& x) {
  Values lse(static_cast<size_t>(s.b * s.h * s.sq), 0.0);
  for_each_sdpa_row(s, q, k, x, true,
                    [&](const SdpaRowAt& at, int64_t, int64_t, int64_t, const double*, double l) { lse[at.row] = l; });
  return lse;
}

// With a bias, a score's error also holds the bias's own (if it carries any) and the rounding of the sum:
// S_j += (1 + E_bias) B_bias_j. `y` is o, or with `stats` the statistics (sdpa_stats_magnitude).
Values sdpa_magnitude_of(const SdpaGeom& s, const Operand& q, const Operand& k, const Operand& v, const Operand* bias,
                         const SdpaExtras& x, const Values& y, bool stats) {
  Values m(y.size(), 0.0);
  const double qk_factor = contraction_factor(q.carries, k.carries) * std::fabs(s.scale);
  const double bias_factor = bias && bias->carries ? 2.0 : 1.0;
  const int64_t width = stats ? 1 : s.dv;
  for_each_sdpa_row(s, *q.value, *k.value, x, stats,
                    [&](const SdpaRowAt& at, int64_t kv_head, int64_t first, int64_t last, const double* p, double) {
                      const int64_t out_row = stats ? at.row : at.o;
                      const double* bq = q.mag->data() + at.q * s.d;
                      const double* oi = y.data() + out_row * width;
                      double* mi = m.data() + out_row * width;
                      double acc = 0.0;  // with stats: sum_j p_j S_j
                      for (int64_t j = first; j < last; ++j) {
                        const double* bk = k.mag->data() + kv_row(s, x.page_table_k, x.ragged_k, kv_head, j, s.d);
                        double s_mag = 0.0;
                        for (int64_t d = 0; d < s.d; ++d) s_mag += bq[d] * bk[d];
                        s_mag *= qk_factor;
                        if (bias) s_mag += bias_factor * (*bias->mag)[bias_row_of(s, at.row) + j];
                        if (stats) {
                          acc += p[j] * s_mag;
                          continue;
                        }
                        const double* bv = v.mag->data() + kv_row(s, x.page_table_v, x.ragged_v, kv_head, j, s.dv);
                        const double w = weight(s, x, at.row, j, p[j]);
                        for (int64_t d = 0; d < s.dv; ++d)
                          mi[d] += sdpa_magnitude_term(w, bv[d], oi[d], s_mag, v.carries);
                      }
                      if (stats) mi[0] = sdpa_stats_magnitude(acc, oi[0]);
                      for (int64_t d = 0; d < width; ++d) mi[d] = std::max(mi[d], std::fabs(oi[d]));
                    });
  return m;
}

}  // namespace

HostNodeResult sdpa_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                         const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  if (node.op == OpKind::kSdpaBackward) return sdpa_backward_host(p, node, in, op, sop);
  if (node.op == OpKind::kSdpaFp8) return sdpa_fp8_host(p, node, in, op, sop);
  if (node.op == OpKind::kSdpaFp8Backward) return sdpa_fp8_backward_host(p, node, in, op, sop);
  HostNodeResult r;
  const SdpaInputs roles = sdpa_inputs(node);
  SdpaExtras x;
  if (roles.bias >= 0) x.bias = in[static_cast<size_t>(roles.bias)];
  if (roles.seq_len_q >= 0) {
    x.seq_len_q = in[static_cast<size_t>(roles.seq_len_q)];
    x.seq_len_kv = in[static_cast<size_t>(roles.seq_len_kv)];
  }
  if (roles.page_table_k >= 0) {
    x.page_table_k = in[static_cast<size_t>(roles.page_table_k)];
    x.page_table_v = in[static_cast<size_t>(roles.page_table_v)];
  }
  if (roles.ragged_q >= 0) {
    x.ragged_q = in[static_cast<size_t>(roles.ragged_q)];
    if (roles.ragged_k >= 0) {  // over paged caches only q and o are ragged
      x.ragged_k = in[static_cast<size_t>(roles.ragged_k)];
      x.ragged_v = in[static_cast<size_t>(roles.ragged_v)];
    }
    x.ragged_o = in[static_cast<size_t>(roles.ragged_o)];
  }
  if (p.sdpa.dropout > 0) x.keep = in[static_cast<size_t>(roles.dropout_keep)];
  const bool stats = p.output == 1;
  r.y = stats ? run_sdpa_stats(p.sdpa, *in[0], *in[1], x) : run_sdpa(p.sdpa, *in[0], *in[1], *in[2], x);
  if (op) {
    const auto bias_of = [&](const std::vector<Operand>& o) {
      return roles.bias >= 0 ? &o[static_cast<size_t>(roles.bias)] : nullptr;
    };
    r.m = sdpa_magnitude_of(p.sdpa, (*op)[0], (*op)[1], (*op)[2], bias_of(*op), x, r.y, stats);
    r.sc = sdpa_magnitude_of(p.sdpa, (*sop)[0], (*sop)[1], (*sop)[2], bias_of(*sop), x, r.y, stats);
  }
  return r;
}

}  // namespace kiln::validate_internal
