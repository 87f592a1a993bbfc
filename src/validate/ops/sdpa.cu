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
};

SdpaParams sdpa_params(const SdpaGeom& g) {
  return SdpaParams{g.b, g.h, g.hk, g.sq, g.skv, g.d, g.dv, g.scale, g.band};
}

__device__ double sdpa_row_max(const SdpaParams& p, const double* qi, const double* kb, int64_t first, int64_t last) {
  double mx = -INFINITY;
  for (int64_t j = first; j < last; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < p.d; ++d) dot += qi[d] * kb[j * p.d + d];
    mx = fmax(mx, dot * p.scale);
  }
  return mx;
}

__device__ double sdpa_weight(const SdpaParams& p, const double* qi, const double* kj, double mx) {
  double dot = 0.0;
  for (int64_t d = 0; d < p.d; ++d) dot += qi[d] * kj[d];
  return exp(dot * p.scale - mx);
}

// A query row's coordinates: its position i, and the K/V head (b * hk + h / group) it reads.
struct SdpaRow {
  int64_t i, kv_head;
};
__device__ inline SdpaRow sdpa_row(const SdpaParams& p, int64_t idx) {
  const int64_t h = (idx / p.sq) % p.h;
  const int64_t b = idx / (p.sq * p.h);
  return SdpaRow{idx % p.sq, b * p.hk + h / (p.h / p.hk)};
}

__global__ void sdpa_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                            const double* __restrict__ v, double* __restrict__ o) {
  const int64_t rows = p.b * p.h * p.sq;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SdpaRow row = sdpa_row(p, idx);
    const double* qi = q + idx * p.d;
    const double* kb = k + row.kv_head * p.skv * p.d;
    const double* vb = v + row.kv_head * p.skv * p.dv;
    double* oi = o + idx * p.dv;
    int64_t first = 0, last = 0;
    sdpa_keys(p.band, row.i, p.skv, &first, &last);
    const double mx = sdpa_row_max(p, qi, kb, first, last);
    for (int64_t d = 0; d < p.dv; ++d) oi[d] = 0.0;
    double sum = 0.0;
    for (int64_t j = first; j < last; ++j) {
      const double e = sdpa_weight(p, qi, kb + j * p.d, mx);
      sum += e;
      for (int64_t d = 0; d < p.dv; ++d) oi[d] += e * vb[j * p.dv + d];
    }
    const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (int64_t d = 0; d < p.dv; ++d) oi[d] *= inv;
  }
}

// The magnitude pass of SDPA (reference_math.h sdpa_magnitude_term), one thread per query row.
__global__ void sdpa_magnitude_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                                      const double* __restrict__ o, const double* __restrict__ bq,
                                      const double* __restrict__ bk, const double* __restrict__ bv, double qk_factor,
                                      int ev, double* __restrict__ bo) {
  const int64_t rows = p.b * p.h * p.sq;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SdpaRow row = sdpa_row(p, idx);
    const int64_t head = row.kv_head;
    const double* qi = q + idx * p.d;
    const double* kb = k + head * p.skv * p.d;
    const double* bqi = bq + idx * p.d;
    const double* bkb = bk + head * p.skv * p.d;
    const double* bvb = bv + head * p.skv * p.dv;
    const double* oi = o + idx * p.dv;
    double* mi = bo + idx * p.dv;
    int64_t first = 0, last = 0;
    sdpa_keys(p.band, row.i, p.skv, &first, &last);
    const double mx = sdpa_row_max(p, qi, kb, first, last);
    double sum = 0.0;
    for (int64_t j = first; j < last; ++j) sum += sdpa_weight(p, qi, kb + j * p.d, mx);
    for (int64_t d = 0; d < p.dv; ++d) mi[d] = 0.0;
    for (int64_t j = first; j < last; ++j) {
      const double pj = sdpa_weight(p, qi, kb + j * p.d, mx) / sum;
      double s_mag = 0.0;
      for (int64_t d = 0; d < p.d; ++d) s_mag += bqi[d] * bkb[j * p.d + d];
      s_mag *= qk_factor;
      for (int64_t d = 0; d < p.dv; ++d) mi[d] += sdpa_magnitude_term(pj, bvb[j * p.dv + d], oi[d], s_mag, ev != 0);
    }
    for (int64_t d = 0; d < p.dv; ++d) mi[d] = fmax(mi[d], fabs(oi[d]));
  }
}

}  // namespace

Status sdpa_device_value(const Node&, const NodePlan& p, const std::vector<const double*>& in, double* y, int64_t,
                         const std::string&) {
  const SdpaParams sp = sdpa_params(p.sdpa);
  const int64_t rows = sp.b * sp.h * sp.sq;
  sdpa_kernel<<<grid_for(rows), kThreads>>>(sp, in[0], in[1], in[2], y);
  return Status::ok();
}

Status sdpa_device_magnitude(const Node&, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t, bool, const std::string&) {
  const SdpaParams sp = sdpa_params(p.sdpa);
  const int64_t rows = sp.b * sp.h * sp.sq;
  const double qk_factor = contraction_factor(op[0].carries, op[1].carries) * std::fabs(p.sdpa.scale);
  sdpa_magnitude_kernel<<<grid_for(rows), kThreads>>>(sp, op[0].value, op[1].value, y, op[0].mag, op[1].mag, op[2].mag,
                                                      qk_factor, op[2].carries ? 1 : 0, by);
  return Status::ok();
}

}  // namespace kiln::validate_internal
