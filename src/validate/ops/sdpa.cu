// The scaled dot-product attention family's device reference: one thread per query row, two passes
// (max, then exp-sum and weighted values).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

struct SdpaParams {
  int64_t b, h, hk, sq, skv, d, dv;
  double scale;
  SdpaBand band;
  SdpaBias bias;
  SdpaPaging paging;
};

SdpaParams sdpa_params(const SdpaGeom& g) {
  return SdpaParams{g.b, g.h, g.hk, g.sq, g.skv, g.d, g.dv, g.scale, g.band, g.bias, g.paging};
}

// A node's optional inputs on the device (null: absent).
struct SdpaExtras {
  const double* bias;
  const double* seq_len_q;
  const double* seq_len_kv;
  const double* page_table_k;
  const double* page_table_v;
};

// Key (value) j's row of kv head `kv_head` in k (v): packed, or through the page table.
__device__ inline const double* sdpa_key(const SdpaParams& p, const SdpaExtras& x, const double* k, int64_t kv_head,
                                         int64_t j) {
  return k + sdpa_kv_row(p.paging, x.page_table_k, kv_head, p.hk, p.skv, j, p.d);
}
__device__ inline const double* sdpa_value(const SdpaParams& p, const SdpaExtras& x, const double* v, int64_t kv_head,
                                           int64_t j) {
  return v + sdpa_kv_row(p.paging, x.page_table_v, kv_head, p.hk, p.skv, j, p.dv);
}

// Query row idx's score for key j (kj its key): scaled q.k, plus the bias term where there is a bias (`bias` points
// at the row's terms, or is null).
__device__ double sdpa_score(const SdpaParams& p, const double* qi, const double* kj, const double* bias, int64_t j) {
  double dot = 0.0;
  for (int64_t d = 0; d < p.d; ++d) dot += qi[d] * kj[d];
  return dot * p.scale + (bias ? bias[j] : 0.0);
}

// The keys of query row (kv head `kv_head`) through k: `sk` locates them.
struct SdpaKeys {
  const double* k;
  int64_t kv_head;
};

__device__ double sdpa_row_max(const SdpaParams& p, const SdpaExtras& x, const double* qi, SdpaKeys ks,
                               const double* bias, int64_t first, int64_t last) {
  double mx = -INFINITY;
  for (int64_t j = first; j < last; ++j) mx = fmax(mx, sdpa_score(p, qi, sdpa_key(p, x, ks.k, ks.kv_head, j), bias, j));
  return mx;
}

__device__ double sdpa_weight(const SdpaParams& p, const SdpaExtras& x, const double* qi, SdpaKeys ks,
                              const double* bias, int64_t j, double mx) {
  return exp(sdpa_score(p, qi, sdpa_key(p, x, ks.k, ks.kv_head, j), bias, j) - mx);
}

// A query row's coordinates: its position i, the K/V head (b * hk + h / group) it reads, where its bias terms
// start (0 without a bias), and the keys it attends to, [first, last) (none for a padded query).
struct SdpaRow {
  int64_t i, kv_head, bias_row, first, last;
};
__device__ inline SdpaRow sdpa_row(const SdpaParams& p, const SdpaExtras& x, int64_t idx) {
  const int64_t h = (idx / p.sq) % p.h;
  const int64_t b = idx / (p.sq * p.h);
  const int64_t i = idx % p.sq;
  SdpaRow r{i, b * p.hk + h / (p.h / p.hk), p.bias.present ? sdpa_bias_row(p.bias, b, h, i, p.sq, p.skv) : 0, 0, 0};
  const int64_t lq = x.seq_len_q ? sdpa_length(x.seq_len_q[b], p.sq) : p.sq;
  const int64_t lkv = x.seq_len_kv ? sdpa_length(x.seq_len_kv[b], p.skv) : p.skv;
  sdpa_keys(p.band, i, lq, lkv, &r.first, &r.last);
  return r;
}

// o, or with `stats` the row's log-sum-exp (one value a row; a row without keys: -infinity).
__global__ void sdpa_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                            const double* __restrict__ v, SdpaExtras x, int stats, double* __restrict__ o) {
  const int64_t rows = p.b * p.h * p.sq;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SdpaRow row = sdpa_row(p, x, idx);
    const double* qi = q + idx * p.d;
    const SdpaKeys ks{k, row.kv_head};
    double* oi = o + idx * p.dv;
    const double* bi = x.bias ? x.bias + row.bias_row : nullptr;
    const int64_t first = row.first, last = row.last;
    const double mx = sdpa_row_max(p, x, qi, ks, bi, first, last);
    if (stats) {
      double sum = 0.0;
      for (int64_t j = first; j < last; ++j) sum += sdpa_weight(p, x, qi, ks, bi, j, mx);
      o[idx] = sdpa_log_sum_exp(mx, sum);
      continue;
    }
    for (int64_t d = 0; d < p.dv; ++d) oi[d] = 0.0;
    double sum = 0.0;
    for (int64_t j = first; j < last; ++j) {
      const double e = sdpa_weight(p, x, qi, ks, bi, j, mx);
      const double* vj = sdpa_value(p, x, v, row.kv_head, j);
      sum += e;
      for (int64_t d = 0; d < p.dv; ++d) oi[d] += e * vj[d];
    }
    const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (int64_t d = 0; d < p.dv; ++d) oi[d] *= inv;
  }
}

// The magnitude pass of SDPA (reference_math.h sdpa_magnitude_term; with `stats`, sdpa_stats_magnitude_term),
// one thread per query row.
__global__ void sdpa_magnitude_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                                      const double* __restrict__ o, const double* __restrict__ bq,
                                      const double* __restrict__ bk, const double* __restrict__ bv, double qk_factor,
                                      int ev, SdpaExtras x, const double* __restrict__ bbias, double bias_factor,
                                      int stats, double* __restrict__ bo) {
  const int64_t rows = p.b * p.h * p.sq;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SdpaRow row = sdpa_row(p, x, idx);
    const int64_t head = row.kv_head;
    const double* qi = q + idx * p.d;
    const SdpaKeys ks{k, head};
    const double* bqi = bq + idx * p.d;
    const int64_t width = stats ? 1 : p.dv;
    const double* oi = o + idx * width;
    double* mi = bo + idx * width;
    const double* bi = x.bias ? x.bias + row.bias_row : nullptr;
    const int64_t first = row.first, last = row.last;
    const double mx = sdpa_row_max(p, x, qi, ks, bi, first, last);
    double sum = 0.0;
    for (int64_t j = first; j < last; ++j) sum += sdpa_weight(p, x, qi, ks, bi, j, mx);
    double acc = 0.0;  // with stats: sum_j p_j S_j
    for (int64_t d = 0; d < width; ++d) mi[d] = 0.0;
    for (int64_t j = first; j < last; ++j) {
      const double pj = sdpa_weight(p, x, qi, ks, bi, j, mx) / sum;
      const double* bkj = sdpa_key(p, x, bk, head, j);
      const double* bvj = sdpa_value(p, x, bv, head, j);
      double s_mag = 0.0;
      for (int64_t d = 0; d < p.d; ++d) s_mag += bqi[d] * bkj[d];
      s_mag *= qk_factor;
      if (bbias) s_mag += bias_factor * bbias[row.bias_row + j];
      if (stats) {
        acc += pj * s_mag;
        continue;
      }
      for (int64_t d = 0; d < p.dv; ++d) mi[d] += sdpa_magnitude_term(pj, bvj[d], oi[d], s_mag, ev != 0);
    }
    if (stats) mi[0] = sdpa_stats_magnitude(acc, oi[0]);
    for (int64_t d = 0; d < width; ++d) mi[d] = fmax(mi[d], fabs(oi[d]));
  }
}

}  // namespace

// The node's optional inputs among `in` (kiln/graph/graph.h sdpa_inputs).
template <typename T, typename Get>
SdpaExtras sdpa_extras(const Node& n, const std::vector<T>& in, Get get) {
  const SdpaInputs r = sdpa_inputs(n);
  const auto at = [&](int i) -> const double* { return i >= 0 ? get(in[static_cast<size_t>(i)]) : nullptr; };
  return SdpaExtras{at(r.bias), at(r.seq_len_q), at(r.seq_len_kv), at(r.page_table_k), at(r.page_table_v)};
}

Status sdpa_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                         int64_t count, const std::string& where) {
  if (node.op == OpKind::kSdpaBackward) return sdpa_backward_device_value(node, p, in, y, count, where);
  if (node.op == OpKind::kSdpaFp8) return sdpa_fp8_device_value(node, p, in, y, count, where);
  const SdpaParams sp = sdpa_params(p.sdpa);
  const int64_t rows = sp.b * sp.h * sp.sq;
  const SdpaExtras x = sdpa_extras(node, in, [](const double* v) { return v; });
  sdpa_kernel<<<grid_for(rows), kThreads>>>(sp, in[0], in[1], in[2], x, p.output == 1 ? 1 : 0, y);
  return Status::ok();
}

Status sdpa_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t count, bool scale_pass, const std::string& where) {
  if (node.op == OpKind::kSdpaBackward)
    return sdpa_backward_device_magnitude(node, p, op, y, by, count, scale_pass, where);
  if (node.op == OpKind::kSdpaFp8) return sdpa_fp8_device_magnitude(node, p, op, y, by, count, scale_pass, where);
  const SdpaParams sp = sdpa_params(p.sdpa);
  const int64_t rows = sp.b * sp.h * sp.sq;
  const double qk_factor = contraction_factor(op[0].carries, op[1].carries) * std::fabs(p.sdpa.scale);
  const SdpaExtras x = sdpa_extras(node, op, [](const DeviceOperand& o) { return o.value; });
  const int bias = sdpa_inputs(node).bias;
  const DeviceOperand* b = bias >= 0 ? &op[static_cast<size_t>(bias)] : nullptr;
  sdpa_magnitude_kernel<<<grid_for(rows), kThreads>>>(sp, op[0].value, op[1].value, y, op[0].mag, op[1].mag, op[2].mag,
                                                      qk_factor, op[2].carries ? 1 : 0, x, b ? b->mag : nullptr,
                                                      b && b->carries ? 2.0 : 1.0, p.output == 1 ? 1 : 0, by);
  return Status::ok();
}

}  // namespace kiln::validate_internal
