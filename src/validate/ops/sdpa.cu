// The scaled dot-product attention family's device reference: one warp per query row, the max, then the weighted
// values and their sum of exponentials in one pass (each key's score computed twice); the statistics and the
// magnitude pass take the sum first.
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
  double dropout;  // with SdpaExtras::keep (SdpaGeom::dropout)
};

SdpaParams sdpa_params(const SdpaGeom& g) {
  return SdpaParams{g.b, g.h, g.hk, g.sq, g.skv, g.d, g.dv, g.scale, g.band, g.bias, g.paging, g.dropout};
}

// A node's optional inputs on the device (null: absent).
struct SdpaExtras {
  const double* bias;
  const double* seq_len_q;
  const double* seq_len_kv;
  const double* page_table_k;
  const double* page_table_v;
  const double *ragged_q, *ragged_k, *ragged_v, *ragged_o;  // ragged (THD) tensors' offsets
  const double* keep;                                       // dropout's mask [B, H, Sq, Skv] (SdpaGeom::dropout)
};

// Probability (or exponential) p of dense query row `idx` for key j as o sums it (sdpa_math.h sdpa_dropped).
__device__ inline double sdpa_weight(const SdpaParams& p, const SdpaExtras& x, int64_t idx, int64_t j, double e) {
  return x.keep ? sdpa_dropped(e, x.keep[idx * p.skv + j], p.dropout) : e;
}

// Key (value) j's row of kv head `kv_head` in k (v): packed, through the page table, or through the offsets.
__device__ inline int64_t kv_row(const SdpaParams& p, const double* table, const double* ragged, int64_t kv_head,
                                 int64_t j, int64_t width) {
  if (ragged) return sdpa_ragged_row(ragged[kv_head / p.hk], p.hk, width, p.b, p.skv, kv_head % p.hk, j) * width;
  return sdpa_kv_row(p.paging, table, kv_head, p.hk, p.skv, j, width);
}
__device__ inline const double* sdpa_key(const SdpaParams& p, const SdpaExtras& x, const double* k, int64_t kv_head,
                                         int64_t j) {
  return k + kv_row(p, x.page_table_k, x.ragged_k, kv_head, j, p.d);
}
__device__ inline const double* sdpa_value(const SdpaParams& p, const SdpaExtras& x, const double* v, int64_t kv_head,
                                           int64_t j) {
  return v + kv_row(p, x.page_table_v, x.ragged_v, kv_head, j, p.dv);
}

// One warp per query row (device_ops.cuh warp_dot): the row's output in its lanes' registers (kWarpCols a lane),
// written once the row is done; the loads of a key's or value's row coalesced.

// Query row qi's score for key j (kj its key): scaled q.k, plus the bias term where there is a bias (`bias` points
// at the row's terms, or is null).
__device__ inline double sdpa_score(const SdpaParams& p, const double* qi, const double* kj, const double* bias,
                                    int64_t j, int lane) {
  return warp_dot(qi, kj, p.d, lane) * p.scale + (bias ? bias[j] : 0.0);
}

// The row's largest score over its keys [first, last).
__device__ double row_max(const SdpaParams& p, const SdpaExtras& x, const double* qi, const double* k, int64_t kv_head,
                          const double* bias, int64_t first, int64_t last, int lane) {
  double mx = -INFINITY;
  for (int64_t j = first; j < last; ++j) mx = fmax(mx, sdpa_score(p, qi, sdpa_key(p, x, k, kv_head, j), bias, j, lane));
  return mx;
}

// The row's largest score, and the sum of exp(score - max).
struct RowSoftmax {
  double mx = -INFINITY, sum = 0.0;
};
__device__ RowSoftmax row_softmax(const SdpaParams& p, const SdpaExtras& x, const double* qi, const double* k,
                                  int64_t kv_head, const double* bias, int64_t first, int64_t last, int lane) {
  RowSoftmax r;
  r.mx = row_max(p, x, qi, k, kv_head, bias, first, last, lane);
  for (int64_t j = first; j < last; ++j)
    r.sum += exp(sdpa_score(p, qi, sdpa_key(p, x, k, kv_head, j), bias, j, lane) - r.mx);
  return r;
}

// A query row's coordinates: its position i, the K/V head (b * hk + h / group) it reads, where its bias terms
// start (0 without a bias), the keys it attends to, [first, last) (none for a padded query), and the rows it reads
// of q and writes of o (idx itself unless ragged); `skip` for a ragged entry's row past its length, which is not
// its own (another entry's, or a gap) and is neither read nor written in o (the dense statistics' row is written,
// as a padded row's: no keys, -infinity).
struct SdpaRow {
  int64_t i, kv_head, bias_row, first, last, q, o;
  bool skip;
};
__device__ inline SdpaRow sdpa_row(const SdpaParams& p, const SdpaExtras& x, int64_t idx) {
  const int64_t h = (idx / p.sq) % p.h;
  const int64_t b = idx / (p.sq * p.h);
  const int64_t i = idx % p.sq;
  SdpaRow r{i,
            b * p.hk + h / (p.h / p.hk),
            p.bias.present ? sdpa_bias_row(p.bias, b, h, i, p.sq, p.skv) : 0,
            0,
            0,
            idx,
            idx,
            false};
  const int64_t lq = x.seq_len_q ? sdpa_length(x.seq_len_q[b], p.sq) : p.sq;
  const int64_t lkv = x.seq_len_kv ? sdpa_length(x.seq_len_kv[b], p.skv) : p.skv;
  sdpa_keys(p.band, i, lq, lkv, &r.first, &r.last);
  if (x.ragged_q) {
    r.skip = i >= lq;
    r.q = sdpa_ragged_row(x.ragged_q[b], p.h, p.d, p.b, p.sq, h, i);
    r.o = sdpa_ragged_row(x.ragged_o[b], p.h, p.dv, p.b, p.sq, h, i);
  }
  return r;
}

// o, or with `stats` the row's log-sum-exp (one value a row; a row without keys: -infinity). One warp a row.
__global__ void sdpa_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                            const double* __restrict__ v, SdpaExtras x, int stats, double* __restrict__ o) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.h * p.sq, per_block = blockDim.x / kWarp;
  for (int64_t idx = blockIdx.x * per_block + threadIdx.x / kWarp; idx < rows; idx += gridDim.x * per_block) {
    const SdpaRow row = sdpa_row(p, x, idx);
    if (row.skip && !stats) continue;
    const double* qi = q + row.q * p.d;
    const double* bi = x.bias ? x.bias + row.bias_row : nullptr;
    if (stats) {  // a skipped row has no keys (sdpa_keys past lq): -infinity
      const RowSoftmax sm = row_softmax(p, x, qi, k, row.kv_head, bi, row.first, row.last, lane);
      if (lane == 0) o[idx] = sdpa_log_sum_exp(sm.mx, sm.sum);
      continue;
    }
    const double mx = row_max(p, x, qi, k, row.kv_head, bi, row.first, row.last, lane);
    double acc[kWarpCols] = {}, sum = 0.0;
    for (int64_t j = row.first; j < row.last; ++j) {
      const double e = exp(sdpa_score(p, qi, sdpa_key(p, x, k, row.kv_head, j), bi, j, lane) - mx);
      sum += e;
      const double w = sdpa_weight(p, x, idx, j, e);
      const double* vj = sdpa_value(p, x, v, row.kv_head, j);
#pragma unroll
      for (int c = 0; c < kWarpCols; ++c)
        if (lane + c * kWarp < p.dv) acc[c] += w * vj[lane + c * kWarp];
    }
    const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
#pragma unroll
    for (int c = 0; c < kWarpCols; ++c)
      if (lane + c * kWarp < p.dv) o[row.o * p.dv + lane + c * kWarp] = acc[c] * inv;
  }
}

// The magnitude pass of SDPA (sdpa_math.h sdpa_magnitude_term; with `stats`, sdpa_stats_magnitude), one warp a
// query row.
__global__ void sdpa_magnitude_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                                      const double* __restrict__ o, const double* __restrict__ bq,
                                      const double* __restrict__ bk, const double* __restrict__ bv, double qk_factor,
                                      int ev, SdpaExtras x, const double* __restrict__ bbias, double bias_factor,
                                      int stats, double* __restrict__ bo) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.h * p.sq, per_block = blockDim.x / kWarp;
  const int64_t width = stats ? 1 : p.dv;
  for (int64_t idx = blockIdx.x * per_block + threadIdx.x / kWarp; idx < rows; idx += gridDim.x * per_block) {
    const SdpaRow row = sdpa_row(p, x, idx);
    if (row.skip && !stats) continue;
    const int64_t head = row.kv_head, out = stats ? idx : row.o;
    const double* qi = q + row.q * p.d;
    const double* bqi = bq + row.q * p.d;
    const double* bi = x.bias ? x.bias + row.bias_row : nullptr;
    const RowSoftmax sm = row_softmax(p, x, qi, k, head, bi, row.first, row.last, lane);
    double oc[kWarpCols] = {}, acc[kWarpCols] = {};
#pragma unroll
    for (int c = 0; c < kWarpCols; ++c)
      if (lane + c * kWarp < width) oc[c] = o[out * width + lane + c * kWarp];
    double stats_acc = 0.0;  // with stats: sum_j p_j S_j
    for (int64_t j = row.first; j < row.last; ++j) {
      const double pj = exp(sdpa_score(p, qi, sdpa_key(p, x, k, head, j), bi, j, lane) - sm.mx) / sm.sum;
      double s_mag = warp_dot(bqi, sdpa_key(p, x, bk, head, j), p.d, lane) * qk_factor;
      if (bbias) s_mag += bias_factor * bbias[row.bias_row + j];
      if (stats) {
        stats_acc += pj * s_mag;
        continue;
      }
      const double* bvj = sdpa_value(p, x, bv, head, j);
      const double wj = sdpa_weight(p, x, idx, j, pj);
#pragma unroll
      for (int c = 0; c < kWarpCols; ++c)
        if (lane + c * kWarp < p.dv) acc[c] += sdpa_magnitude_term(wj, bvj[lane + c * kWarp], oc[c], s_mag, ev != 0);
    }
    if (stats) {
      if (lane == 0) bo[out] = fmax(sdpa_stats_magnitude(stats_acc, oc[0]), fabs(oc[0]));
      continue;
    }
#pragma unroll
    for (int c = 0; c < kWarpCols; ++c)
      if (lane + c * kWarp < p.dv) bo[out * p.dv + lane + c * kWarp] = fmax(acc[c], fabs(oc[c]));
  }
}

}  // namespace

// A row's output dims fit its warp's registers (validation allows head dims up to 256, which they do).
Status fits_a_warp(const SdpaParams& p, const std::string& where) {
  if (p.dv > static_cast<int64_t>(kWarp) * kWarpCols)
    return not_supported(where + ": the device reference takes v's head dim up to " +
                         std::to_string(kWarp * kWarpCols) + ", not " + std::to_string(p.dv));
  return Status::ok();
}

// The node's optional inputs among `in` (kiln/graph/graph.h sdpa_inputs).
template <typename T, typename Get>
SdpaExtras sdpa_extras(const Node& n, const std::vector<T>& in, Get get) {
  const SdpaInputs r = sdpa_inputs(n);
  const auto at = [&](int i) -> const double* { return i >= 0 ? get(in[static_cast<size_t>(i)]) : nullptr; };
  return SdpaExtras{at(r.bias),     at(r.seq_len_q), at(r.seq_len_kv), at(r.page_table_k), at(r.page_table_v),
                    at(r.ragged_q), at(r.ragged_k),  at(r.ragged_v),   at(r.ragged_o),     at(r.dropout_keep)};
}

Status sdpa_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                         int64_t count, const std::string& where) {
  if (node.op == OpKind::kSdpaBackward) return sdpa_backward_device_value(node, p, in, y, count, where);
  if (node.op == OpKind::kSdpaFp8) return sdpa_fp8_device_value(node, p, in, y, count, where);
  if (node.op == OpKind::kSdpaFp8Backward) return sdpa_fp8_backward_device_value(node, p, in, y, count, where);
  const SdpaParams sp = sdpa_params(p.sdpa);
  KILN_RETURN_IF_ERROR(fits_a_warp(sp, where));
  const int64_t rows = sp.b * sp.h * sp.sq;
  const SdpaExtras x = sdpa_extras(node, in, [](const double* v) { return v; });
  // Ragged, what no entry's row covers in o is left NaN (what an unwritten, poisoned output holds): all-ones bytes.
  // The statistics are dense: every row is written.
  if (x.ragged_o && p.output != 1)
    KILN_CUDA_RETURN_IF_ERROR(cudaMemset(y, 0xFF, static_cast<size_t>(count) * sizeof(double)));
  sdpa_kernel<<<grid_for(rows * kWarp), kThreads>>>(sp, in[0], in[1], in[2], x, p.output == 1 ? 1 : 0, y);
  return Status::ok();
}

Status sdpa_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t count, bool scale_pass, const std::string& where) {
  if (node.op == OpKind::kSdpaBackward)
    return sdpa_backward_device_magnitude(node, p, op, y, by, count, scale_pass, where);
  if (node.op == OpKind::kSdpaFp8) return sdpa_fp8_device_magnitude(node, p, op, y, by, count, scale_pass, where);
  if (node.op == OpKind::kSdpaFp8Backward)
    return sdpa_fp8_backward_device_magnitude(node, p, op, y, by, count, scale_pass, where);
  const SdpaParams sp = sdpa_params(p.sdpa);
  KILN_RETURN_IF_ERROR(fits_a_warp(sp, where));
  const int64_t rows = sp.b * sp.h * sp.sq;
  const double qk_factor = contraction_factor(op[0].carries, op[1].carries) * std::fabs(p.sdpa.scale);
  const SdpaExtras x = sdpa_extras(node, op, [](const DeviceOperand& o) { return o.value; });
  if (x.ragged_o) KILN_CUDA_RETURN_IF_ERROR(cudaMemset(by, 0, static_cast<size_t>(count) * sizeof(double)));
  const int bias = sdpa_inputs(node).bias;
  const DeviceOperand* b = bias >= 0 ? &op[static_cast<size_t>(bias)] : nullptr;
  sdpa_magnitude_kernel<<<grid_for(rows * kWarp), kThreads>>>(
      sp, op[0].value, op[1].value, y, op[0].mag, op[1].mag, op[2].mag, qk_factor, op[2].carries ? 1 : 0, x,
      b ? b->mag : nullptr, b && b->carries ? 2.0 : 1.0, p.output == 1 ? 1 : 0, by);
  return Status::ok();
}

}  // namespace kiln::validate_internal
