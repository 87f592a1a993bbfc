// The scaled dot-product attention family's device reference for the backward pass (sdpa_backward): dq one warp
// per query row, dk and dv one warp per key row (over every query of its key head's group), by the host's formulas
// (sdpa_math.h sdpa_backward_pair); each row's outputs in its lanes' registers (device_ops.cuh warp_dot).
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

struct BwdParams {
  int64_t b, h, hk, sq, skv, d, dv;
  double scale;
  SdpaBand band;
  SdpaBias bias;
  double dropout;  // with BwdTensors::keep (SdpaGeom::dropout)
};

// The operands' values (q, k, v, o, dO, L, bias) and, in a magnitude pass, their bounds (null otherwise); with a
// padding mask each entry's lengths (null otherwise); ragged, q's (dq's), k's (dk's), v's (dv's) and o's (do's)
// offsets (null otherwise).
struct BwdTensors {
  const double *q, *k, *v, *o, *g, *l, *bias;
  const double *bq, *bk, *bv, *bo, *bg, *bl, *bbias;
  const double *lq, *lkv;
  const double *rq, *rk, *rv, *ro;
  const double* keep;  // dropout's mask [B, H, Sq, Skv], or null
};

// Where query row (b, h, i) is in q and dq (`q`), o and do (`o`), the statistics (`row`, dense); where key row
// (b, hk, j) is in k and dk (`k`), v and dv (`v`). In rows of each tensor's own width: the dense index unless
// ragged (sdpa_math.h sdpa_ragged_row).
struct BwdQueryRow {
  int64_t row, q, o;
};
__device__ inline BwdQueryRow query_row(const BwdParams& p, const BwdTensors& t, int64_t b, int64_t h, int64_t i) {
  const int64_t row = (b * p.h + h) * p.sq + i;
  if (!t.rq) return BwdQueryRow{row, row, row};
  return BwdQueryRow{row, sdpa_ragged_row(t.rq[b], p.h, p.d, p.b, p.sq, h, i),
                     sdpa_ragged_row(t.ro[b], p.h, p.dv, p.b, p.sq, h, i)};
}
struct BwdKeyRow {
  int64_t k, v;
};
__device__ inline BwdKeyRow key_row(const BwdParams& p, const BwdTensors& t, int64_t b, int64_t hk, int64_t j) {
  const int64_t krow = (b * p.hk + hk) * p.skv + j;
  if (!t.rk) return BwdKeyRow{krow, krow};
  return BwdKeyRow{sdpa_ragged_row(t.rk[b], p.hk, p.d, p.b, p.skv, hk, j),
                   sdpa_ragged_row(t.rv[b], p.hk, p.dv, p.b, p.skv, hk, j)};
}

// Entry b's valid queries and keys: its lengths with a padding mask, else every one.
__device__ inline void entry_lengths(const BwdParams& p, const BwdTensors& t, int64_t b, int64_t* lq, int64_t* lkv) {
  *lq = t.lq ? sdpa_length(t.lq[b], p.sq) : p.sq;
  *lkv = t.lkv ? sdpa_length(t.lkv[b], p.skv) : p.skv;
}

// One (query row, key) pair: P, P as o summed it (with dropout kept and scaled, or 0: `pd`), dS and, with bounds,
// the pair's error factors (dv's, like `pd`, for the dropped-and-scaled P).
struct BwdPair {
  double p, pd, ds;
  SdpaBackwardPair e;
};

// Query row `r` (batch b, head h, position i) against key row `kr` (key j); every lane of the warp calls it
// (device_ops.cuh warp_dot) and gets the same pair.
__device__ BwdPair pair_of(const BwdParams& p, const BwdTensors& t, const SdpaBackwardFactors& f, bool mag, int64_t b,
                           int64_t h, int64_t i, const BwdQueryRow& r, const BwdKeyRow& kr, int64_t j, int lane) {
  const double* qi = t.q + r.q * p.d;
  const double* kj = t.k + kr.k * p.d;
  const double* gi = t.g + r.o * p.dv;
  const int64_t bias_row = p.bias.present ? sdpa_bias_row(p.bias, b, h, i, p.sq, p.skv) : 0;
  const double score = warp_dot(qi, kj, p.d, lane) * p.scale + (t.bias ? t.bias[bias_row + j] : 0.0);
  const double pr = exp(score - t.l[r.row]);
  // Dropout: dP = (dO . v_j) keep / (1 - dropout); D_i = dO . O_i as o was (dropped) summed.
  const double w = t.keep ? sdpa_dropped(1.0, t.keep[r.row * p.skv + j], p.dropout) : 1.0;
  const double g = w * warp_dot(gi, t.v + kr.v * p.dv, p.dv, lane) - warp_dot(gi, t.o + r.o * p.dv, p.dv, lane);
  BwdPair out{pr, pr * w, pr * g, SdpaBackwardPair{0, 0, 0}};
  if (mag) {
    out.e = sdpa_backward_pair(f, pr, out.ds, g, warp_dot(t.bq + r.q * p.d, t.bk + kr.k * p.d, p.d, lane),
                               t.bbias ? t.bbias[bias_row + j] : 0.0, t.bl[r.row],
                               w * warp_dot(t.bg + r.o * p.dv, t.bv + kr.v * p.dv, p.dv, lane),
                               warp_dot(t.bg + r.o * p.dv, t.bo + r.o * p.dv, p.dv, lane));
    out.e.dv *= w;
  }
  return out;
}

// A row's `width` outputs from its lanes' registers: the value, or with bounds the magnitude, at least |value|.
__device__ void write_row(const double (&acc)[kWarpCols], int64_t width, int lane, bool mag, const double* value,
                          double* y) {
#pragma unroll
  for (int c = 0; c < kWarpCols; ++c) {
    const int64_t d = lane + c * kWarp;
    if (d < width) y[d] = mag ? fmax(acc[c], fabs(value[d])) : acc[c];
  }
}

// dq: one warp per query row. Without bounds y gets the value; with them y gets the magnitude, at least |value|
// (value: the node's rounded dq). Ragged, an entry's rows past its length are not its own: not written.
__global__ void dq_kernel(BwdParams p, BwdTensors t, SdpaBackwardFactors f, int mag, const double* value, double* y) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.h * p.sq, per_block = blockDim.x / kWarp;
  for (int64_t row = blockIdx.x * per_block + threadIdx.x / kWarp; row < rows; row += gridDim.x * per_block) {
    const int64_t i = row % p.sq, h = (row / p.sq) % p.h, b = row / (p.sq * p.h);
    const int64_t hk = h / (p.h / p.hk);
    double acc[kWarpCols] = {};
    int64_t first = 0, last = 0, lq = 0, lkv = 0;
    entry_lengths(p, t, b, &lq, &lkv);
    if (t.rq && i >= lq) continue;
    const BwdQueryRow r = query_row(p, t, b, h, i);
    sdpa_keys(p.band, i, lq, lkv, &first, &last);
    for (int64_t j = first; j < last; ++j) {
      const BwdKeyRow kr = key_row(p, t, b, hk, j);
      const BwdPair pr = pair_of(p, t, f, mag != 0, b, h, i, r, kr, j, lane);
      const double w = mag ? pr.e.dq : p.scale * pr.ds;
      const double* src = (mag ? t.bk : t.k) + kr.k * p.d;
#pragma unroll
      for (int c = 0; c < kWarpCols; ++c)
        if (lane + c * kWarp < p.d) acc[c] += w * src[lane + c * kWarp];
    }
    write_row(acc, p.d, lane, mag != 0, value ? value + r.q * p.d : nullptr, y + r.q * p.d);
  }
}

// dk (which 1) or dv (which 2): one warp per key row, over every query row of its key head's group that sees it.
// Ragged, an entry's keys past its length are not its own: not written.
__global__ void dkv_kernel(BwdParams p, BwdTensors t, SdpaBackwardFactors f, int mag, int which, const double* value,
                           double* y) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.hk * p.skv, per_block = blockDim.x / kWarp;
  const int64_t width = which == 1 ? p.d : p.dv, group = p.h / p.hk;
  for (int64_t krow = blockIdx.x * per_block + threadIdx.x / kWarp; krow < rows; krow += gridDim.x * per_block) {
    const int64_t j = krow % p.skv, kv_head = krow / p.skv, b = kv_head / p.hk, hk = kv_head % p.hk;
    double acc[kWarpCols] = {};
    int64_t lq = 0, lkv = 0;
    entry_lengths(p, t, b, &lq, &lkv);
    if (t.rk && j >= lkv) continue;
    const BwdKeyRow kr = key_row(p, t, b, hk, j);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        int64_t first = 0, last = 0;
        sdpa_keys(p.band, i, lq, lkv, &first, &last);
        if (j < first || j >= last) continue;
        const BwdQueryRow r = query_row(p, t, b, h, i);
        const BwdPair pr = pair_of(p, t, f, mag != 0, b, h, i, r, kr, j, lane);
        double w;
        const double* src;
        if (which == 1) {
          w = mag ? pr.e.dk : p.scale * pr.ds;
          src = (mag ? t.bq : t.q) + r.q * p.d;
        } else {
          w = mag ? pr.e.dv : pr.pd;
          src = (mag ? t.bg : t.g) + r.o * p.dv;
        }
#pragma unroll
        for (int c = 0; c < kWarpCols; ++c)
          if (lane + c * kWarp < width) acc[c] += w * src[lane + c * kWarp];
      }
    const int64_t out_row = which == 1 ? kr.k : kr.v;
    write_row(acc, width, lane, mag != 0, value ? value + out_row * width : nullptr, y + out_row * width);
  }
}

// sdpa_fp8_backward's amax_dp (kSdpaBackwardDsAmax): the largest |dS| (with bounds the largest bound of one, at
// least |dS|) over every pair a query row attends to, one warp per row, into *y as bits (non-negative doubles order as
// their bit patterns, a NaN above every number; *y zeroed first).
__global__ void ds_amax_kernel(BwdParams p, BwdTensors t, SdpaBackwardFactors f, int mag, unsigned long long* y) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.h * p.sq, per_block = blockDim.x / kWarp;
  for (int64_t row = blockIdx.x * per_block + threadIdx.x / kWarp; row < rows; row += gridDim.x * per_block) {
    const int64_t i = row % p.sq, h = (row / p.sq) % p.h, b = row / (p.sq * p.h);
    const int64_t hk = h / (p.h / p.hk);
    int64_t first = 0, last = 0, lq = 0, lkv = 0;
    entry_lengths(p, t, b, &lq, &lkv);
    const BwdQueryRow r = query_row(p, t, b, h, i);
    sdpa_keys(p.band, i, lq, lkv, &first, &last);
    unsigned long long m = 0;
    for (int64_t j = first; j < last; ++j) {
      const BwdPair pr = pair_of(p, t, f, mag != 0, b, h, i, r, key_row(p, t, b, hk, j), j, lane);
      const double v = mag ? fmax(pr.e.ds, fabs(pr.ds)) : fabs(pr.ds);
      const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(isnan(pr.ds) ? NAN : v));
      m = bits > m ? bits : m;
    }
    if (lane == 0 && m > 0) atomicMax(y, m);
  }
}

BwdParams params_of(const SdpaGeom& g) {
  return BwdParams{g.b, g.h, g.hk, g.sq, g.skv, g.d, g.dv, g.scale, g.band, g.bias, g.dropout};
}

// Ragged, what no entry owns stays as the output was: NaN in a value pass (what an unwritten, poisoned output holds:
// all-ones bytes), 0 in a magnitude pass.
Status launch(const NodePlan& p, const BwdTensors& t, const SdpaBackwardFactors& f, bool mag, const double* value,
              double* y, int64_t count) {
  const BwdParams bp = params_of(p.sdpa);
  if (p.output == kSdpaBackwardDsAmax) {
    KILN_CUDA_RETURN_IF_ERROR(cudaMemset(y, 0, sizeof(double)));
    ds_amax_kernel<<<grid_for(bp.b * bp.h * bp.sq * kWarp), kThreads>>>(bp, t, f, mag ? 1 : 0,
                                                                        reinterpret_cast<unsigned long long*>(y));
    return Status::ok();
  }
  if (t.rq) KILN_CUDA_RETURN_IF_ERROR(cudaMemset(y, mag ? 0 : 0xFF, static_cast<size_t>(count) * sizeof(double)));
  if (p.output == 0) {
    dq_kernel<<<grid_for(bp.b * bp.h * bp.sq * kWarp), kThreads>>>(bp, t, f, mag ? 1 : 0, value, y);
  } else {
    dkv_kernel<<<grid_for(bp.b * bp.hk * bp.skv * kWarp), kThreads>>>(bp, t, f, mag ? 1 : 0, p.output, value, y);
  }
  return Status::ok();
}

// Each row's outputs fit its warp's registers (validation allows head dims up to 256, which they do).
Status fits_a_warp(const NodePlan& p, const std::string& where) {
  const int64_t most = static_cast<int64_t>(kWarp) * kWarpCols;
  if (p.sdpa.d > most || p.sdpa.dv > most)
    return not_supported(where + ": the device reference takes head dims up to " + std::to_string(most));
  return Status::ok();
}

}  // namespace

Status sdpa_backward_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                                  int64_t count, const std::string& where) {
  KILN_RETURN_IF_ERROR(fits_a_warp(p, where));
  const SdpaInputs roles = sdpa_inputs(node);
  const auto at = [&](int i) { return i >= 0 ? in[static_cast<size_t>(i)] : nullptr; };
  const BwdTensors t{in[0],
                     in[1],
                     in[2],
                     in[3],
                     in[4],
                     in[5],
                     at(roles.bias),
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     nullptr,
                     at(roles.seq_len_q),
                     at(roles.seq_len_kv),
                     at(roles.ragged_q),
                     at(roles.ragged_k),
                     at(roles.ragged_v),
                     at(roles.ragged_o),
                     p.sdpa.dropout > 0 ? at(roles.dropout_keep) : nullptr};
  return launch(p, t, SdpaBackwardFactors{}, false, nullptr, y, count);
}

Status sdpa_backward_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                      const double* y, double* by, int64_t count, bool, const std::string& where) {
  KILN_RETURN_IF_ERROR(fits_a_warp(p, where));
  const SdpaInputs roles = sdpa_inputs(node);
  const DeviceOperand* b = roles.bias >= 0 ? &op[static_cast<size_t>(roles.bias)] : nullptr;
  const auto at = [&](int i) { return i >= 0 ? op[static_cast<size_t>(i)].value : nullptr; };
  const BwdTensors t{op[0].value,
                     op[1].value,
                     op[2].value,
                     op[3].value,
                     op[4].value,
                     op[5].value,
                     b ? b->value : nullptr,
                     op[0].mag,
                     op[1].mag,
                     op[2].mag,
                     op[3].mag,
                     op[4].mag,
                     op[5].mag,
                     b ? b->mag : nullptr,
                     at(roles.seq_len_q),
                     at(roles.seq_len_kv),
                     at(roles.ragged_q),
                     at(roles.ragged_k),
                     at(roles.ragged_v),
                     at(roles.ragged_o),
                     p.sdpa.dropout > 0 ? at(roles.dropout_keep) : nullptr};
  const SdpaBackwardFactors f = sdpa_backward_factors(p.sdpa.scale, op[0].carries, op[1].carries, op[2].carries,
                                                      op[3].carries, op[4].carries, b && b->carries, op[5].carries);
  return launch(p, t, f, true, y, by, count);
}

}  // namespace kiln::validate_internal
