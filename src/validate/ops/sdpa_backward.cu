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
};

// The operands' values (q, k, v, o, dO, L, bias) and, in a magnitude pass, their bounds (null otherwise); with a
// padding mask each entry's lengths (null otherwise).
struct BwdTensors {
  const double *q, *k, *v, *o, *g, *l, *bias;
  const double *bq, *bk, *bv, *bo, *bg, *bl, *bbias;
  const double *lq, *lkv;
};

// Entry b's valid queries and keys: its lengths with a padding mask, else every one.
__device__ inline void entry_lengths(const BwdParams& p, const BwdTensors& t, int64_t b, int64_t* lq, int64_t* lkv) {
  *lq = t.lq ? sdpa_length(t.lq[b], p.sq) : p.sq;
  *lkv = t.lkv ? sdpa_length(t.lkv[b], p.skv) : p.skv;
}

// One (query row, key) pair: P, dS and, with bounds, the pair's error factors.
struct BwdPair {
  double p, ds;
  SdpaBackwardPair e;
};

// Query row `row` (batch b, head h, position i) against key row `krow` (key j); every lane of the warp calls it
// (device_ops.cuh warp_dot) and gets the same pair.
__device__ BwdPair pair_of(const BwdParams& p, const BwdTensors& t, const SdpaBackwardFactors& f, bool mag, int64_t b,
                           int64_t h, int64_t i, int64_t row, int64_t krow, int64_t j, int lane) {
  const double* qi = t.q + row * p.d;
  const double* kj = t.k + krow * p.d;
  const double* gi = t.g + row * p.dv;
  const int64_t bias_row = p.bias.present ? sdpa_bias_row(p.bias, b, h, i, p.sq, p.skv) : 0;
  const double score = warp_dot(qi, kj, p.d, lane) * p.scale + (t.bias ? t.bias[bias_row + j] : 0.0);
  const double pr = exp(score - t.l[row]);
  const double g = warp_dot(gi, t.v + krow * p.dv, p.dv, lane) - warp_dot(gi, t.o + row * p.dv, p.dv, lane);
  BwdPair r{pr, pr * g, SdpaBackwardPair{0, 0, 0}};
  if (mag)
    r.e = sdpa_backward_pair(f, pr, r.ds, g, warp_dot(t.bq + row * p.d, t.bk + krow * p.d, p.d, lane),
                             t.bbias ? t.bbias[bias_row + j] : 0.0, t.bl[row],
                             warp_dot(t.bg + row * p.dv, t.bv + krow * p.dv, p.dv, lane),
                             warp_dot(t.bg + row * p.dv, t.bo + row * p.dv, p.dv, lane));
  return r;
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
// (value: the node's rounded dq).
__global__ void dq_kernel(BwdParams p, BwdTensors t, SdpaBackwardFactors f, int mag, const double* value, double* y) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t rows = p.b * p.h * p.sq, per_block = blockDim.x / kWarp;
  for (int64_t row = blockIdx.x * per_block + threadIdx.x / kWarp; row < rows; row += gridDim.x * per_block) {
    const int64_t i = row % p.sq, h = (row / p.sq) % p.h, b = row / (p.sq * p.h);
    const int64_t kv_head = b * p.hk + h / (p.h / p.hk);
    double acc[kWarpCols] = {};
    int64_t first = 0, last = 0, lq = 0, lkv = 0;
    entry_lengths(p, t, b, &lq, &lkv);
    sdpa_keys(p.band, i, lq, lkv, &first, &last);
    for (int64_t j = first; j < last; ++j) {
      const int64_t krow = kv_head * p.skv + j;
      const BwdPair r = pair_of(p, t, f, mag != 0, b, h, i, row, krow, j, lane);
      const double w = mag ? r.e.dq : p.scale * r.ds;
      const double* src = (mag ? t.bk : t.k) + krow * p.d;
#pragma unroll
      for (int c = 0; c < kWarpCols; ++c)
        if (lane + c * kWarp < p.d) acc[c] += w * src[lane + c * kWarp];
    }
    write_row(acc, p.d, lane, mag != 0, value ? value + row * p.d : nullptr, y + row * p.d);
  }
}

// dk (which 1) or dv (which 2): one warp per key row, over every query row of its key head's group that sees it.
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
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        int64_t first = 0, last = 0;
        sdpa_keys(p.band, i, lq, lkv, &first, &last);
        if (j < first || j >= last) continue;
        const int64_t row = (b * p.h + h) * p.sq + i;
        const BwdPair r = pair_of(p, t, f, mag != 0, b, h, i, row, krow, j, lane);
        double w;
        const double* src;
        if (which == 1) {
          w = mag ? r.e.dk : p.scale * r.ds;
          src = (mag ? t.bq : t.q) + row * p.d;
        } else {
          w = mag ? r.e.dv : r.p;
          src = (mag ? t.bg : t.g) + row * p.dv;
        }
#pragma unroll
        for (int c = 0; c < kWarpCols; ++c)
          if (lane + c * kWarp < width) acc[c] += w * src[lane + c * kWarp];
      }
    write_row(acc, width, lane, mag != 0, value ? value + krow * width : nullptr, y + krow * width);
  }
}

BwdParams params_of(const SdpaGeom& g) {
  return BwdParams{g.b, g.h, g.hk, g.sq, g.skv, g.d, g.dv, g.scale, g.band, g.bias};
}

void launch(const NodePlan& p, const BwdTensors& t, const SdpaBackwardFactors& f, bool mag, const double* value,
            double* y) {
  const BwdParams bp = params_of(p.sdpa);
  if (p.output == 0) {
    dq_kernel<<<grid_for(bp.b * bp.h * bp.sq * kWarp), kThreads>>>(bp, t, f, mag ? 1 : 0, value, y);
  } else {
    dkv_kernel<<<grid_for(bp.b * bp.hk * bp.skv * kWarp), kThreads>>>(bp, t, f, mag ? 1 : 0, p.output, value, y);
  }
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
                                  int64_t, const std::string& where) {
  KILN_RETURN_IF_ERROR(fits_a_warp(p, where));
  const SdpaInputs roles = sdpa_inputs(node);
  const auto at = [&](int i) { return i >= 0 ? in[static_cast<size_t>(i)] : nullptr; };
  const BwdTensors t{in[0],   in[1],   in[2],   in[3],   in[4],   in[5],   at(roles.bias),      nullptr,
                     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, at(roles.seq_len_q), at(roles.seq_len_kv)};
  launch(p, t, SdpaBackwardFactors{}, false, nullptr, y);
  return Status::ok();
}

Status sdpa_backward_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                      const double* y, double* by, int64_t, bool, const std::string& where) {
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
                     at(roles.seq_len_kv)};
  const SdpaBackwardFactors f = sdpa_backward_factors(p.sdpa.scale, op[0].carries, op[1].carries, op[2].carries,
                                                      op[3].carries, op[4].carries, b && b->carries, op[5].carries);
  launch(p, t, f, true, y, by);
  return Status::ok();
}

}  // namespace kiln::validate_internal
