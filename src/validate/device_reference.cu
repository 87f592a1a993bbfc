// The device reference: naive CUDA kernels in double precision (double accumulation, so that the
// reference's own error is negligible next to the fp32 kernels it judges, even for reductions of 10^5
// terms), one launch per node, operating on packed row-major double arrays (the host gathers strided
// inputs into that form and scatters outputs back through the graph's strides). Written for clarity, not
// speed: each kernel is the textbook loop. With magnitudes, each node is followed by its magnitude pass
// (reference_math.h), the same rules as the host reference's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/reference.h"
#include "validate/device_elements.cuh"
#include "validate/reference_common.h"
#include "validate/reference_math.h"

namespace kiln {
namespace {

using namespace validate_internal;

constexpr int kMaxRank = 8;
constexpr int kThreads = 256;

struct ConvParams {
  int64_t n, c, k, groups;
  int64_t in[3], filt[3], out[3], pad[3], stride[3], dil[3];
};

struct BroadcastParams {
  int rank;
  int64_t dims[kMaxRank];
  int64_t sa[kMaxRank];
  int64_t sb[kMaxRank];
};

struct MatmulParams {
  int nb;  // batch rank
  int64_t batch[kMaxRank], a_batch[kMaxRank], b_batch[kMaxRank];
  int64_t m, n, k, batch_count;
};

struct ReduceParams {
  int rank;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];  // packed strides of the input
  int reduced[kMaxRank];
  int64_t out_count, reduced_count;
};

struct SdpaParams {
  int64_t b, h, hk, sq, skv, d, dv;
  double scale;
  int causal;
};

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));
}

// ---- convolution ----------------------------------------------------------------------------------

__global__ void conv_fprop_kernel(ConvParams p, const double* __restrict__ x, const double* __restrict__ w,
                                  double* __restrict__ y) {
  const int64_t total = p.n * p.k * p.out[0] * p.out[1] * p.out[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t o2 = r % p.out[2];
    r /= p.out[2];
    const int64_t o1 = r % p.out[1];
    r /= p.out[1];
    const int64_t o0 = r % p.out[0];
    r /= p.out[0];
    const int64_t k = r % p.k;
    const int64_t n = r / p.k;
    const int64_t grp = k / kg;
    double acc = 0.0;
    for (int64_t ci = 0; ci < cg; ++ci) {
      const int64_t ch = grp * cg + ci;
      for (int64_t f0 = 0; f0 < p.filt[0]; ++f0) {
        const int64_t i0 = o0 * p.stride[0] - p.pad[0] + f0 * p.dil[0];
        if (i0 < 0 || i0 >= p.in[0]) continue;
        for (int64_t f1 = 0; f1 < p.filt[1]; ++f1) {
          const int64_t i1 = o1 * p.stride[1] - p.pad[1] + f1 * p.dil[1];
          if (i1 < 0 || i1 >= p.in[1]) continue;
          for (int64_t f2 = 0; f2 < p.filt[2]; ++f2) {
            const int64_t i2 = o2 * p.stride[2] - p.pad[2] + f2 * p.dil[2];
            if (i2 < 0 || i2 >= p.in[2]) continue;
            acc += x[(((n * p.c + ch) * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2] *
                   w[(((k * cg + ci) * p.filt[0] + f0) * p.filt[1] + f1) * p.filt[2] + f2];
          }
        }
      }
    }
    y[idx] = acc;
  }
}

// Gather form: each dx element sums the dy elements whose window covers it.
__global__ void conv_dgrad_kernel(ConvParams p, const double* __restrict__ dy, const double* __restrict__ w,
                                  double* __restrict__ dx) {
  const int64_t total = p.n * p.c * p.in[0] * p.in[1] * p.in[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t i2 = r % p.in[2];
    r /= p.in[2];
    const int64_t i1 = r % p.in[1];
    r /= p.in[1];
    const int64_t i0 = r % p.in[0];
    r /= p.in[0];
    const int64_t ch = r % p.c;
    const int64_t n = r / p.c;
    const int64_t grp = ch / cg, ci = ch % cg;
    double acc = 0.0;
    for (int64_t k = grp * kg; k < (grp + 1) * kg; ++k)
      for (int64_t f0 = 0; f0 < p.filt[0]; ++f0) {
        const int64_t t0 = i0 + p.pad[0] - f0 * p.dil[0];
        if (t0 < 0 || t0 % p.stride[0] != 0 || t0 / p.stride[0] >= p.out[0]) continue;
        const int64_t o0 = t0 / p.stride[0];
        for (int64_t f1 = 0; f1 < p.filt[1]; ++f1) {
          const int64_t t1 = i1 + p.pad[1] - f1 * p.dil[1];
          if (t1 < 0 || t1 % p.stride[1] != 0 || t1 / p.stride[1] >= p.out[1]) continue;
          const int64_t o1 = t1 / p.stride[1];
          for (int64_t f2 = 0; f2 < p.filt[2]; ++f2) {
            const int64_t t2 = i2 + p.pad[2] - f2 * p.dil[2];
            if (t2 < 0 || t2 % p.stride[2] != 0 || t2 / p.stride[2] >= p.out[2]) continue;
            const int64_t o2 = t2 / p.stride[2];
            acc += dy[(((n * p.k + k) * p.out[0] + o0) * p.out[1] + o1) * p.out[2] + o2] *
                   w[(((k * cg + ci) * p.filt[0] + f0) * p.filt[1] + f1) * p.filt[2] + f2];
          }
        }
      }
    dx[idx] = acc;
  }
}

__global__ void conv_wgrad_kernel(ConvParams p, const double* __restrict__ x, const double* __restrict__ dy,
                                  double* __restrict__ dw) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t total = p.k * cg * p.filt[0] * p.filt[1] * p.filt[2];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t f2 = r % p.filt[2];
    r /= p.filt[2];
    const int64_t f1 = r % p.filt[1];
    r /= p.filt[1];
    const int64_t f0 = r % p.filt[0];
    r /= p.filt[0];
    const int64_t ci = r % cg;
    const int64_t k = r / cg;
    const int64_t ch = (k / kg) * cg + ci;
    double acc = 0.0;
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t o0 = 0; o0 < p.out[0]; ++o0) {
        const int64_t i0 = o0 * p.stride[0] - p.pad[0] + f0 * p.dil[0];
        if (i0 < 0 || i0 >= p.in[0]) continue;
        for (int64_t o1 = 0; o1 < p.out[1]; ++o1) {
          const int64_t i1 = o1 * p.stride[1] - p.pad[1] + f1 * p.dil[1];
          if (i1 < 0 || i1 >= p.in[1]) continue;
          for (int64_t o2 = 0; o2 < p.out[2]; ++o2) {
            const int64_t i2 = o2 * p.stride[2] - p.pad[2] + f2 * p.dil[2];
            if (i2 < 0 || i2 >= p.in[2]) continue;
            acc += x[(((n * p.c + ch) * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2] *
                   dy[(((n * p.k + k) * p.out[0] + o0) * p.out[1] + o1) * p.out[2] + o2];
          }
        }
      }
    dw[idx] = acc;
  }
}

// ---- matmul ---------------------------------------------------------------------------------------

constexpr int kTile = 16;

__global__ void matmul_kernel(MatmulParams p, const double* __restrict__ a, const double* __restrict__ b,
                              double* __restrict__ c) {
  __shared__ double as[kTile][kTile];
  __shared__ double bs[kTile][kTile + 1];
  const int64_t row = blockIdx.y * static_cast<int64_t>(kTile) + threadIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
  for (int64_t bi = blockIdx.z; bi < p.batch_count; bi += gridDim.z) {
    int64_t ao = 0, bo = 0, rem = bi;
    for (int d = p.nb - 1; d >= 0; --d) {
      const int64_t i = rem % p.batch[d];
      rem /= p.batch[d];
      ao += i * p.a_batch[d];
      bo += i * p.b_batch[d];
    }
    double acc = 0.0;
    for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
      const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
      as[threadIdx.y][threadIdx.x] = (row < p.m && ka < p.k) ? a[ao + row * p.k + ka] : 0.0;
      bs[threadIdx.y][threadIdx.x] = (kb < p.k && col < p.n) ? b[bo + kb * p.n + col] : 0.0;
      __syncthreads();
      for (int kk = 0; kk < kTile; ++kk) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
      __syncthreads();
    }
    if (row < p.m && col < p.n) c[bi * p.m * p.n + row * p.n + col] = acc;
  }
}

// ---- pointwise ------------------------------------------------------------------------------------

__global__ void pointwise_kernel(BroadcastParams p, PointwiseMode mode, const double* __restrict__ a,
                                 const double* __restrict__ b, double* __restrict__ y, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = idx, oa = 0, ob = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t i = rem % p.dims[d];
      rem /= p.dims[d];
      oa += i * p.sa[d];
      ob += i * p.sb[d];
    }
    y[idx] = pointwise_value(mode, a[oa], b ? b[ob] : 0.0);
  }
}

// ---- reduction ------------------------------------------------------------------------------------

__global__ void reduction_kernel(ReduceParams p, ReductionMode mode, const double* __restrict__ x,
                                 double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < p.out_count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = idx, base = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      if (p.reduced[d]) continue;
      base += (rem % p.dims[d]) * p.strides[d];
      rem /= p.dims[d];
    }
    double acc = mode == ReductionMode::kMax ? -INFINITY : (mode == ReductionMode::kMin ? INFINITY : 0.0);
    for (int64_t r = 0; r < p.reduced_count; ++r) {
      int64_t rr = r, off = base;
      for (int d = p.rank - 1; d >= 0; --d) {
        if (!p.reduced[d]) continue;
        off += (rr % p.dims[d]) * p.strides[d];
        rr /= p.dims[d];
      }
      const double v = x[off];
      switch (mode) {
        case ReductionMode::kSum: acc += v; break;
        case ReductionMode::kMax: acc = fmax(acc, v); break;
        case ReductionMode::kMin: acc = fmin(acc, v); break;
        case ReductionMode::kAmax: acc = fmax(acc, fabs(v)); break;
      }
    }
    y[idx] = acc;
  }
}

__device__ double reduce_init(ReductionMode mode) {
  return mode == ReductionMode::kMax ? -INFINITY : (mode == ReductionMode::kMin ? INFINITY : 0.0);
}

__device__ double reduce_combine(ReductionMode mode, double acc, double v) {
  switch (mode) {
    case ReductionMode::kSum: return acc + v;
    case ReductionMode::kMax: return fmax(acc, v);
    case ReductionMode::kMin: return fmin(acc, v);
    case ReductionMode::kAmax: return fmax(acc, v);  // v is already |x| (or a partial amax)
  }
  return acc;
}

// Few outputs over many reduced elements (a GEMM's AMAX: one output over 8192 x 8192): reduction_kernel
// would give each output one thread, which walks 67M elements alone (about two minutes on an H200). Here
// block (out, chunk) reduces one contiguous range of the reduced index space of output `out` with all its
// threads, then a second kernel combines each output's chunks in a fixed order (deterministic).
__global__ void reduction_partial_kernel(ReduceParams p, ReductionMode mode, const double* __restrict__ x,
                                         double* __restrict__ partial, int64_t chunks) {
  __shared__ double shared[kThreads];
  const int64_t chunk_len = (p.reduced_count + chunks - 1) / chunks;
  for (int64_t out = blockIdx.x; out < p.out_count; out += gridDim.x) {
    int64_t rem = out, base = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      if (p.reduced[d]) continue;
      base += (rem % p.dims[d]) * p.strides[d];
      rem /= p.dims[d];
    }
    const int64_t begin = blockIdx.y * chunk_len;
    const int64_t end = min(p.reduced_count, begin + chunk_len);
    double acc = reduce_init(mode);
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
      int64_t rr = r, off = base;
      for (int d = p.rank - 1; d >= 0; --d) {
        if (!p.reduced[d]) continue;
        off += (rr % p.dims[d]) * p.strides[d];
        rr /= p.dims[d];
      }
      const double v = x[off];
      acc = reduce_combine(mode, acc, mode == ReductionMode::kAmax ? fabs(v) : v);
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) shared[threadIdx.x] = reduce_combine(mode, shared[threadIdx.x], shared[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) partial[out * chunks + blockIdx.y] = shared[0];
    __syncthreads();
  }
}

__global__ void reduction_combine_kernel(int64_t out_count, int64_t chunks, ReductionMode mode,
                                         const double* __restrict__ partial, double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < out_count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc = reduce_init(mode);
    for (int64_t c = 0; c < chunks; ++c) acc = reduce_combine(mode, acc, partial[idx * chunks + c]);
    y[idx] = acc;
  }
}

// ---- layer / RMS norm: one block per row ------------------------------------------------------------

__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Row statistics of a layer/RMS norm (every thread of the block gets them): mean (0 for RMS) and the
// biased variance (mean(x^2) for RMS).
__device__ void norm_row_stats(const double* xr, int64_t inner, int layer, double* shared, double* mean, double* var) {
  double m = 0.0;
  if (layer) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += xr[i];
    m = block_sum(s, shared) / static_cast<double>(inner);
  }
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    const double d = xr[i] - m;
    ss += d * d;
  }
  *mean = m;
  *var = block_sum(ss, shared) / static_cast<double>(inner);
}

// Offsets of element `pos` of x in scale (p.sa) and bias (p.sb).
__device__ void norm_offsets(const BroadcastParams& p, int64_t pos, int64_t* os, int64_t* ob) {
  int64_t rem = pos;
  *os = 0;
  *ob = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t j = rem % p.dims[d];
    rem /= p.dims[d];
    *os += j * p.sa[d];
    *ob += j * p.sb[d];
  }
}

// `p` maps a position in x to offsets in scale (sa) and bias (sb).
__global__ void norm_kernel(BroadcastParams p, int64_t rows, int64_t inner, int layer, double eps,
                            const double* __restrict__ x, const double* __restrict__ scale,
                            const double* __restrict__ bias, double* __restrict__ y) {
  __shared__ double shared[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double* xr = x + row * inner;
    double mean, var;
    norm_row_stats(xr, inner, layer, shared, &mean, &var);
    const double inv = 1.0 / sqrt(var + eps);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t os, ob;
      norm_offsets(p, row * inner + i, &os, &ob);
      double v = (xr[i] - mean) * inv * scale[os];
      if (bias) v += bias[ob];
      y[row * inner + i] = v;
    }
  }
}

// The magnitude pass of a norm (reference_math.h norm_magnitude); bias and bbias are null for RMS norm.
__global__ void norm_magnitude_kernel(BroadcastParams p, int64_t rows, int64_t inner, int layer, double eps,
                                      const double* __restrict__ x, const double* __restrict__ scale,
                                      const double* __restrict__ y, const double* __restrict__ bx,
                                      const double* __restrict__ bs, const double* __restrict__ bbias, int ex, int es,
                                      int eb, double* __restrict__ by) {
  __shared__ double shared[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double* xr = x + row * inner;
    const double* br = bx + row * inner;
    double mean, var;
    norm_row_stats(xr, inner, layer, shared, &mean, &var);
    const double inv = 1.0 / sqrt(var + eps);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += br[i];
    const double bm = block_sum(s, shared) / static_cast<double>(inner);
    double d = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      d += norm_dterm_part(layer != 0, xr[i], mean, br[i], ex != 0, bm);
    const double dterm = block_sum(d, shared) / static_cast<double>(inner);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t os, ob;
      norm_offsets(p, row * inner + i, &os, &ob);
      const double xhat = (xr[i] - mean) * inv;
      by[row * inner + i] =
          norm_magnitude(layer != 0, y[row * inner + i], xhat, scale[os], br[i], bs[os], bbias ? bbias[ob] : 0.0,
                         ex != 0, es != 0, bbias && eb != 0, inv, var, eps, bm, dterm);
    }
  }
}

// ---- SDPA: one thread per query row, two passes (max, then exp-sum and weighted values) -----------

__device__ double sdpa_row_max(const SdpaParams& p, const double* qi, const double* kb, int64_t last) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < last; ++j) {
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

__global__ void sdpa_kernel(SdpaParams p, const double* __restrict__ q, const double* __restrict__ k,
                            const double* __restrict__ v, double* __restrict__ o) {
  const int64_t rows = p.b * p.h * p.sq;
  const int64_t group = p.h / p.hk;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % p.sq;
    const int64_t h = (idx / p.sq) % p.h;
    const int64_t b = idx / (p.sq * p.h);
    const int64_t hk = h / group;
    const double* qi = q + idx * p.d;
    const double* kb = k + (b * p.hk + hk) * p.skv * p.d;
    const double* vb = v + (b * p.hk + hk) * p.skv * p.dv;
    double* oi = o + idx * p.dv;
    const int64_t last = p.causal ? (i + 1 < p.skv ? i + 1 : p.skv) : p.skv;
    const double mx = sdpa_row_max(p, qi, kb, last);
    for (int64_t d = 0; d < p.dv; ++d) oi[d] = 0.0;
    double sum = 0.0;
    for (int64_t j = 0; j < last; ++j) {
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
  const int64_t group = p.h / p.hk;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % p.sq;
    const int64_t h = (idx / p.sq) % p.h;
    const int64_t b = idx / (p.sq * p.h);
    const int64_t head = b * p.hk + h / group;
    const double* qi = q + idx * p.d;
    const double* kb = k + head * p.skv * p.d;
    const double* bqi = bq + idx * p.d;
    const double* bkb = bk + head * p.skv * p.d;
    const double* bvb = bv + head * p.skv * p.dv;
    const double* oi = o + idx * p.dv;
    double* mi = bo + idx * p.dv;
    const int64_t last = p.causal ? (i + 1 < p.skv ? i + 1 : p.skv) : p.skv;
    const double mx = sdpa_row_max(p, qi, kb, last);
    double sum = 0.0;
    for (int64_t j = 0; j < last; ++j) sum += sdpa_weight(p, qi, kb + j * p.d, mx);
    for (int64_t d = 0; d < p.dv; ++d) mi[d] = 0.0;
    for (int64_t j = 0; j < last; ++j) {
      const double pj = sdpa_weight(p, qi, kb + j * p.d, mx) / sum;
      double s_mag = 0.0;
      for (int64_t d = 0; d < p.d; ++d) s_mag += bqi[d] * bkb[j * p.d + d];
      s_mag *= qk_factor;
      for (int64_t d = 0; d < p.dv; ++d) mi[d] += sdpa_magnitude_term(pj, bvb[j * p.dv + d], oi[d], s_mag, ev != 0);
    }
    for (int64_t d = 0; d < p.dv; ++d) mi[d] = fmax(mi[d], fabs(oi[d]));
  }
}

// ---- magnitude helpers ------------------------------------------------------------------------------

__global__ void pointwise_magnitude_kernel(BroadcastParams p, PointwiseMode mode, const double* __restrict__ va,
                                           const double* __restrict__ vb, const double* __restrict__ vy,
                                           const double* __restrict__ ba, const double* __restrict__ bb, int ea, int eb,
                                           double* __restrict__ by, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = idx, oa = 0, ob = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t i = rem % p.dims[d];
      rem /= p.dims[d];
      oa += i * p.sa[d];
      ob += i * p.sb[d];
    }
    by[idx] = pointwise_magnitude(mode, va[oa], vb ? vb[ob] : 0.0, vy[idx], ba[oa], bb ? bb[ob] : 0.0, ea != 0,
                                  vb != nullptr && eb != 0);
  }
}

__global__ void scale_kernel(double* __restrict__ x, double f, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[idx] *= f;
}

__global__ void square_kernel(const double* __restrict__ x, double* __restrict__ y, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = x[idx] * x[idx];
}

// The scale of a contraction or sum from its sum of squared terms (reference_math.h): f sqrt(s + y^2).
__global__ void root_with_kernel(double* __restrict__ s, const double* __restrict__ y, double f, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    s[idx] = f * sqrt(s[idx] + y[idx] * y[idx]);
}

// ---- rounding of stored intermediates ---------------------------------------------------------------

// Rounds to the stored dtype from double in a single rounding (round to nearest, ties to even), as the
// host's round_to_dtype does; integers saturate.
__global__ void round_kernel(DataType dt, double* __restrict__ x, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[idx];
    double r = v;
    switch (dt) {
      case DataType::kFloat32: r = static_cast<double>(__double2float_rn(v)); break;
      case DataType::kFloat16: r = static_cast<double>(__half2float(__double2half(v))); break;
      case DataType::kBFloat16: r = static_cast<double>(__bfloat162float(__double2bfloat16(v))); break;
      case DataType::kFp8E4M3:
        r = static_cast<double>(__half2float(
            __half(__nv_cvt_fp8_to_halfraw(__nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3), __NV_E4M3))));
        break;
      case DataType::kFp8E5M2:
        r = static_cast<double>(
            __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_double_to_fp8(v, __NV_NOSAT, __NV_E5M2), __NV_E5M2))));
        break;
      case DataType::kInt8: r = isnan(v) ? 0.0 : fmin(fmax(rint(v), -128.0), 127.0); break;
      case DataType::kInt32: r = isnan(v) ? 0.0 : fmin(fmax(rint(v), -2147483648.0), 2147483647.0); break;
      case DataType::kInt64: r = isnan(v) ? 0.0 : rint(v); break;
    }
    x[idx] = r;
  }
}

// ---- host side --------------------------------------------------------------------------------------

Status check_launch(const Graph& g, int node) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_status(err, "kernel launch").with_context(node_label(g, node));
  return Status::ok();
}

Status fill_broadcast(BroadcastParams& p, const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                      const std::vector<int64_t>& sb, const std::string& where) {
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return not_supported(where + ": the device reference handles rank <= " + std::to_string(kMaxRank));
  p = BroadcastParams{};
  p.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    p.dims[i] = dims[i];
    p.sa[i] = sa.empty() ? 0 : sa[i];
    p.sb[i] = sb.empty() ? 0 : sb[i];
  }
  return Status::ok();
}

ConvParams conv_params(const ConvGeom& c) {
  ConvParams p{};
  p.n = c.n;
  p.c = c.c;
  p.k = c.k;
  p.groups = c.groups;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = c.in[i];
    p.filt[i] = c.filt[i];
    p.out[i] = c.out[i];
    p.pad[i] = c.pad[i];
    p.stride[i] = c.stride[i];
    p.dil[i] = c.dil[i];
  }
  return p;
}

StatusOr<DeviceBuffer> upload(const std::vector<double>& v) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(std::max<size_t>(1, v.size()) * sizeof(double)));
  if (!v.empty()) KILN_RETURN_IF_ERROR(buf.copy_from_host(v.data(), v.size() * sizeof(double)));
  return buf;
}

StatusOr<std::vector<double>> download(const DeviceBuffer& b, int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  if (count > 0) KILN_RETURN_IF_ERROR(b.copy_to_host(v.data(), v.size() * sizeof(double)));
  return v;
}

Status launch_reduction(const NodePlan& p, ReductionMode mode, const double* x, double* y, int64_t y_count,
                        const std::string& where) {
  if (p.red.in_dims.size() > static_cast<size_t>(kMaxRank)) return not_supported(where + ": rank too large");
  ReduceParams rp{};
  rp.rank = static_cast<int>(p.red.in_dims.size());
  const auto packed = row_major_strides(p.red.in_dims);
  for (int i = 0; i < rp.rank; ++i) {
    rp.dims[i] = p.red.in_dims[static_cast<size_t>(i)];
    rp.strides[i] = packed[static_cast<size_t>(i)];
    rp.reduced[i] = p.red.reduced[static_cast<size_t>(i)] ? 1 : 0;
  }
  rp.out_count = y_count;
  rp.reduced_count = p.red.reduced_count;
  // One thread per output while there are outputs enough to fill the GPU or each reduces little; else
  // the chunked two-pass kernels (kPerChunk reduced elements per block, at most kMaxChunks per output).
  constexpr int64_t kPerChunk = kThreads * 64, kMaxChunks = 1024, kManyOutputs = 1 << 16;
  if (y_count >= kManyOutputs || rp.reduced_count <= kPerChunk) {
    reduction_kernel<<<grid_for(y_count), kThreads>>>(rp, mode, x, y);
    return Status::ok();
  }
  const int64_t chunks = std::min(kMaxChunks, (rp.reduced_count + kPerChunk - 1) / kPerChunk);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer partial,
                        DeviceBuffer::allocate(static_cast<size_t>(y_count * chunks) * sizeof(double)));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(y_count, 1 << 16)), static_cast<unsigned>(chunks));
  reduction_partial_kernel<<<grid, kThreads>>>(rp, mode, x, partial.as<double>(), chunks);
  reduction_combine_kernel<<<grid_for(y_count), kThreads>>>(y_count, chunks, mode, partial.as<double>(), y);
  // `partial` is freed on return: cudaFree waits for the kernels that use it.
  return Status::ok();
}

// The value of one node into y (y_count elements), before rounding to the stored dtype.
Status run_node(const Graph& g, const NodePlan& p, const std::vector<const double*>& in, double* y, int64_t y_count) {
  const Node& node = g.nodes[static_cast<size_t>(p.node)];
  const std::string where = node_label(g, p.node);
  switch (p.op) {
    case OpKind::kConvFprop:
      conv_fprop_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y);
      break;
    case OpKind::kConvDgrad:
      conv_dgrad_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y);
      break;
    case OpKind::kConvWgrad:
      conv_wgrad_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y);
      break;
    case OpKind::kMatmul: {
      if (p.mm.batch.size() > static_cast<size_t>(kMaxRank)) return not_supported(where + ": too many batch dims");
      MatmulParams mp{};
      mp.nb = static_cast<int>(p.mm.batch.size());
      for (size_t i = 0; i < p.mm.batch.size(); ++i) {
        mp.batch[i] = p.mm.batch[i];
        mp.a_batch[i] = p.mm.a_batch[i];
        mp.b_batch[i] = p.mm.b_batch[i];
      }
      mp.m = p.mm.m;
      mp.n = p.mm.n;
      mp.k = p.mm.k;
      mp.batch_count = p.mm.batch_count();
      const int64_t gx = (mp.n + kTile - 1) / kTile, gy = (mp.m + kTile - 1) / kTile;
      if (gx > 0x7FFFFFFF || gy > 65535)
        return not_supported(where + ": matrix too large for the device reference grid");
      dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(mp.batch_count, 1), 65535)));
      matmul_kernel<<<grid, dim3(kTile, kTile)>>>(mp, in[0], in[1], y);
      break;
    }
    case OpKind::kPointwise: {
      BroadcastParams bp;
      KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.pw.out_dims, p.pw.a_strides, p.pw.b_strides, where));
      pointwise_kernel<<<grid_for(y_count), kThreads>>>(bp, node.pointwise.mode, in[0], in.size() > 1 ? in[1] : nullptr,
                                                        y, y_count);
      break;
    }
    case OpKind::kReduction:
      KILN_RETURN_IF_ERROR(launch_reduction(p, node.reduction.mode, in[0], y, y_count, where));
      break;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: {
      BroadcastParams bp;
      KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.norm.x_dims, p.norm.scale_strides, p.norm.bias_strides, where));
      const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(p.norm.rows, 1 << 20)));
      norm_kernel<<<blocks, kThreads>>>(bp, p.norm.rows, p.norm.inner, p.op == OpKind::kLayerNorm ? 1 : 0,
                                        static_cast<double>(node.norm.epsilon), in[0], in[1],
                                        in.size() > 2 ? in[2] : nullptr, y);
      break;
    }
    case OpKind::kSdpa: {
      SdpaParams sp{p.sdpa.b,
                    p.sdpa.h,
                    p.sdpa.hk,
                    p.sdpa.sq,
                    p.sdpa.skv,
                    p.sdpa.d,
                    p.sdpa.dv,
                    static_cast<double>(p.sdpa.scale),
                    p.sdpa.causal ? 1 : 0};
      const int64_t rows = sp.b * sp.h * sp.sq;
      sdpa_kernel<<<grid_for(rows), kThreads>>>(sp, in[0], in[1], in[2], y);
      break;
    }
  }
  return check_launch(g, p.node);
}

// One operand of a node in the magnitude pass.
struct DeviceOperand {
  const double* value = nullptr;
  const double* mag = nullptr;  // the magnitude, or the scale in the scale pass
  bool carries = false;         // written by a node (carries accumulation error)
  int64_t count = 0;            // elements
};

StatusOr<DeviceBuffer> squared(const DeviceOperand& op) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer b,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(1, op.count)) * sizeof(double)));
  square_kernel<<<grid_for(op.count), kThreads>>>(op.mag, b.as<double>(), op.count);
  return b;
}

// The magnitude of one node into `by` (reference_math.h; the host reference applies the same rules), or
// with `scale_pass` its scale: the same rules but for contractions and sums, which take the root of the
// same contraction of squared operands plus y^2. `y` is the node's rounded value.
Status run_node_magnitude(const Graph& g, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                          double* by, int64_t y_count, bool scale_pass) {
  const Node& node = g.nodes[static_cast<size_t>(p.node)];
  const std::string where = node_label(g, p.node) + (scale_pass ? " (scale pass)" : " (magnitude pass)");
  switch (p.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad:
    case OpKind::kMatmul: {
      const double f = contraction_factor(op[0].carries, op[1].carries);
      if (scale_pass) {
        KILN_ASSIGN_OR_RETURN(DeviceBuffer a2, squared(op[0]));
        KILN_ASSIGN_OR_RETURN(DeviceBuffer b2, squared(op[1]));
        KILN_RETURN_IF_ERROR(run_node(g, p, {a2.as<double>(), b2.as<double>()}, by, y_count));
        root_with_kernel<<<grid_for(y_count), kThreads>>>(by, y, f, y_count);
        KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));  // before a2 and b2 are freed
        break;
      }
      KILN_RETURN_IF_ERROR(run_node(g, p, {op[0].mag, op[1].mag}, by, y_count));
      if (f != 1.0) scale_kernel<<<grid_for(y_count), kThreads>>>(by, f, y_count);
      break;
    }
    case OpKind::kPointwise: {
      BroadcastParams bp;
      KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.pw.out_dims, p.pw.a_strides, p.pw.b_strides, where));
      const bool binary = op.size() > 1;
      pointwise_magnitude_kernel<<<grid_for(y_count), kThreads>>>(
          bp, node.pointwise.mode, op[0].value, binary ? op[1].value : nullptr, y, op[0].mag,
          binary ? op[1].mag : nullptr, op[0].carries ? 1 : 0, binary && op[1].carries ? 1 : 0, by, y_count);
      break;
    }
    case OpKind::kReduction:
      // A sum accumulates (its own error and the operand's); max, min and amax pick one element.
      if (node.reduction.mode == ReductionMode::kSum && scale_pass) {
        KILN_ASSIGN_OR_RETURN(DeviceBuffer x2, squared(op[0]));
        KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kSum, x2.as<double>(), by, y_count, where));
        root_with_kernel<<<grid_for(y_count), kThreads>>>(by, y, contraction_factor(op[0].carries, false), y_count);
        KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));  // before x2 is freed
      } else if (node.reduction.mode == ReductionMode::kSum) {
        KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kSum, op[0].mag, by, y_count, where));
        if (op[0].carries) scale_kernel<<<grid_for(y_count), kThreads>>>(by, contraction_factor(true, false), y_count);
      } else {
        KILN_RETURN_IF_ERROR(launch_reduction(p, ReductionMode::kAmax, op[0].mag, by, y_count, where));
      }
      break;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: {
      BroadcastParams bp;
      KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.norm.x_dims, p.norm.scale_strides, p.norm.bias_strides, where));
      const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(p.norm.rows, 1 << 20)));
      const bool has_bias = op.size() > 2;
      norm_magnitude_kernel<<<blocks, kThreads>>>(bp, p.norm.rows, p.norm.inner, p.op == OpKind::kLayerNorm ? 1 : 0,
                                                  node.norm.epsilon, op[0].value, op[1].value, y, op[0].mag, op[1].mag,
                                                  has_bias ? op[2].mag : nullptr, op[0].carries ? 1 : 0,
                                                  op[1].carries ? 1 : 0, has_bias && op[2].carries ? 1 : 0, by);
      break;
    }
    case OpKind::kSdpa: {
      SdpaParams sp{p.sdpa.b,  p.sdpa.h,     p.sdpa.hk,
                    p.sdpa.sq, p.sdpa.skv,   p.sdpa.d,
                    p.sdpa.dv, p.sdpa.scale, p.sdpa.causal ? 1 : 0};
      const int64_t rows = sp.b * sp.h * sp.sq;
      const double qk_factor = contraction_factor(op[0].carries, op[1].carries) * std::fabs(p.sdpa.scale);
      sdpa_magnitude_kernel<<<grid_for(rows), kThreads>>>(sp, op[0].value, op[1].value, y, op[0].mag, op[1].mag,
                                                          op[2].mag, qk_factor, op[2].carries ? 1 : 0, by);
      break;
    }
  }
  return check_launch(g, p.node);
}

__global__ void abs_kernel(const double* __restrict__ x, double* __restrict__ y, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = fabs(x[idx]);
}

__global__ void fill_kernel(double* __restrict__ y, double v, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = v;
}

// A tensor in its dtype through its strides -> packed row-major doubles.
__global__ void gather_kernel(TensorGeom g, DataType dt, const void* __restrict__ x, double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < g.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = load_element(x, dt, element_offset(g, idx));
}

Status require_device() {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return unavailable(std::string("device reference needs a CUDA device: ") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
  }
  return Status::ok();
}

StatusOr<DeviceBuffer> copy_of(const DeviceBuffer& b) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::allocate(b.size()));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(c.data(), b.data(), b.size(), cudaMemcpyDeviceToDevice));
  return c;
}

// The reference on packed double inputs already on the device (`buffers`: one per graph input that a node
// reads or the graph outputs, rounded to its dtype). Every output's values (and magnitudes and scales)
// stay on the device.
StatusOr<DeviceReference> evaluate_packed(const Graph& g, std::map<int, DeviceBuffer> buffers, bool with_magnitudes) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph prep, prepare_graph(g));
  const auto prod = producers(g);
  std::map<int, DeviceBuffer> mag_buffers, scale_buffers;
  if (with_magnitudes)
    for (const auto& [t, b] : buffers) {
      const int64_t count = product(tensor_dims(g, t));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer mb, DeviceBuffer::allocate(b.size()));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer sb, DeviceBuffer::allocate(b.size()));
      abs_kernel<<<grid_for(count), kThreads>>>(b.as<double>(), mb.as<double>(), count);
      abs_kernel<<<grid_for(count), kThreads>>>(b.as<double>(), sb.as<double>(), count);
      KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      mag_buffers.emplace(t, std::move(mb));
      scale_buffers.emplace(t, std::move(sb));
    }
  for (const NodePlan& p : prep.plans) {
    const Node& node = g.nodes[static_cast<size_t>(p.node)];
    std::vector<const double*> in;
    std::vector<DeviceOperand> op, sop;
    for (int t : node.inputs) {
      auto it = buffers.find(t);
      if (it == buffers.end()) return internal_error(node_label(g, p.node) + ": input not computed");
      in.push_back(it->second.as<double>());
      if (with_magnitudes) {
        const bool carries = prod[static_cast<size_t>(t)] >= 0;
        const int64_t count = product(tensor_dims(g, t));
        op.push_back(DeviceOperand{it->second.as<double>(), mag_buffers.at(t).as<double>(), carries, count});
        sop.push_back(DeviceOperand{it->second.as<double>(), scale_buffers.at(t).as<double>(), carries, count});
      }
    }
    const int out = node.outputs[0];
    const int64_t count = product(tensor_dims(g, out));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(double);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::allocate(bytes));
    KILN_RETURN_IF_ERROR(run_node(g, p, in, y.as<double>(), count));
    round_kernel<<<grid_for(count), kThreads>>>(dtype_of(g, out), y.as<double>(), count);
    KILN_RETURN_IF_ERROR(check_launch(g, p.node));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer by, DeviceBuffer::allocate(bytes));
      KILN_RETURN_IF_ERROR(run_node_magnitude(g, p, op, y.as<double>(), by.as<double>(), count, false));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer bs, DeviceBuffer::allocate(bytes));
      KILN_RETURN_IF_ERROR(run_node_magnitude(g, p, sop, y.as<double>(), bs.as<double>(), count, true));
      mag_buffers[out] = std::move(by);
      scale_buffers[out] = std::move(bs);
    }
    buffers[out] = std::move(y);
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  DeviceReference r;
  r.kind = ReferenceKind::kDevice;
  for (int t : g.outputs) {
    DeviceReference::Output o;
    o.count = product(tensor_dims(g, t));
    auto take = [&](std::map<int, DeviceBuffer>& m, DeviceBuffer* dst) -> Status {
      auto it = m.find(t);
      if (it == m.end() || it->second.data() == nullptr)
        return internal_error("output '" + g.tensors[static_cast<size_t>(t)].name + "' was not computed");
      *dst = std::move(it->second);
      return Status::ok();
    };
    // An output listed twice takes a copy; otherwise its buffers move into the result.
    bool repeated = false;
    for (size_t i = 0; i < r.outputs.size(); ++i)
      if (g.outputs[i] == t) {
        KILN_ASSIGN_OR_RETURN(o.values, copy_of(r.outputs[i].values));
        if (with_magnitudes) {
          KILN_ASSIGN_OR_RETURN(o.magnitudes, copy_of(r.outputs[i].magnitudes));
          KILN_ASSIGN_OR_RETURN(o.scales, copy_of(r.outputs[i].scales));
        }
        repeated = true;
        break;
      }
    if (!repeated) {
      KILN_RETURN_IF_ERROR(take(buffers, &o.values));
      if (with_magnitudes) {
        KILN_RETURN_IF_ERROR(take(mag_buffers, &o.magnitudes));
        KILN_RETURN_IF_ERROR(take(scale_buffers, &o.scales));
      }
    }
    r.outputs.push_back(std::move(o));
  }
  return r;
}

StatusOr<ReferenceOutputs> download_outputs_of(const Graph& g, const DeviceReference& ref) {
  if (ref.outputs.size() != g.outputs.size())
    return invalid_argument("device reference of graph '" + g.name + "': " + std::to_string(ref.outputs.size()) +
                            " outputs for the graph's " + std::to_string(g.outputs.size()));
  std::map<int, std::vector<double>> values, mags, scales;
  const bool with_magnitudes = ref.has_magnitudes();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int t = g.outputs[i];
    const DeviceReference::Output& o = ref.outputs[i];
    if (o.count != product(tensor_dims(g, t)))
      return invalid_argument("device reference of graph '" + g.name + "': output '" +
                              g.tensors[static_cast<size_t>(t)].name + "' has the wrong size");
    KILN_ASSIGN_OR_RETURN(values[t], download(o.values, o.count));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(mags[t], download(o.magnitudes, o.count));
      KILN_ASSIGN_OR_RETURN(scales[t], download(o.scales, o.count));
    }
  }
  ReferenceOutputs r;
  r.kind = ref.kind;
  KILN_ASSIGN_OR_RETURN(r.values, make_outputs(g, values));
  if (with_magnitudes) {
    KILN_ASSIGN_OR_RETURN(r.magnitudes, make_magnitude_outputs(g, mags));
    KILN_ASSIGN_OR_RETURN(r.scales, make_magnitude_outputs(g, scales));
  }
  return r;
}

StatusOr<ReferenceOutputs> evaluate_on_device(const Graph& g, const std::map<int, HostTensor>& inputs,
                                              bool with_magnitudes) {
  KILN_RETURN_IF_ERROR(require_device());
  KILN_ASSIGN_OR_RETURN(auto values, load_inputs(g, inputs));
  std::map<int, DeviceBuffer> buffers;
  for (const auto& [t, v] : values) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, upload(v));
    buffers.emplace(t, std::move(b));
  }
  KILN_ASSIGN_OR_RETURN(DeviceReference ref, evaluate_packed(g, std::move(buffers), with_magnitudes));
  return download_outputs_of(g, ref);
}

}  // namespace

StatusOr<std::vector<HostTensor>> run_device_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  return catch_exceptions("graph '" + g.name + "': device reference", [&]() -> StatusOr<std::vector<HostTensor>> {
    KILN_ASSIGN_OR_RETURN(ReferenceOutputs r, evaluate_on_device(g, inputs, false));
    return std::move(r.values);
  });
}

StatusOr<ReferenceOutputs> run_device_reference_with_magnitudes(const Graph& g,
                                                                const std::map<int, HostTensor>& inputs) {
  return catch_exceptions("graph '" + g.name + "': device reference",
                          [&] { return evaluate_on_device(g, inputs, true); });
}

size_t DeviceReference::bytes() const {
  size_t n = 0;
  for (const Output& o : outputs) n += o.values.size() + o.magnitudes.size() + o.scales.size();
  return n;
}

StatusOr<DeviceReference> device_reference_on_device(const Graph& g, const std::map<int, void*>& inputs) {
  KILN_RETURN_IF_ERROR(require_device());
  const auto prod = producers(g);
  std::vector<bool> needed(g.tensors.size(), false);
  for (const Node& n : g.nodes)
    for (int t : n.inputs) needed[static_cast<size_t>(t)] = true;
  for (int t : g.outputs) needed[static_cast<size_t>(t)] = true;
  std::map<int, DeviceBuffer> buffers;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    if (prod[i] >= 0 || !needed[i]) continue;
    const TensorDesc& desc = g.tensors[i];
    const int64_t count = product(tensor_dims(g, t));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b,
                          DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(double)));
    auto it = inputs.find(t);
    if (it != inputs.end() && it->second != nullptr) {
      KILN_ASSIGN_OR_RETURN(TensorGeom geom,
                            tensor_geom(tensor_dims(g, t), tensor_strides(g, t), "input '" + desc.name + "'"));
      gather_kernel<<<grid_for(count), kThreads>>>(geom, dtype_of(g, t), it->second, b.as<double>());
    } else if (desc.by_value) {
      fill_kernel<<<grid_for(count), kThreads>>>(b.as<double>(), desc.value, count);
      round_kernel<<<grid_for(count), kThreads>>>(dtype_of(g, t), b.as<double>(), count);
    } else {
      return invalid_argument("input '" + desc.name + "' (tensor " + std::to_string(t) + ") has no device buffer");
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    buffers.emplace(t, std::move(b));
  }
  return evaluate_packed(g, std::move(buffers), true);
}

StatusOr<DeviceReference> upload_reference(const Graph& g, const ReferenceOutputs& reference) {
  if (reference.values.size() != g.outputs.size())
    return invalid_argument("reference of graph '" + g.name + "': " + std::to_string(reference.values.size()) +
                            " outputs for the graph's " + std::to_string(g.outputs.size()));
  const bool with_magnitudes = !reference.magnitudes.empty() && !reference.scales.empty();
  DeviceReference r;
  r.kind = reference.kind;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    DeviceReference::Output o;
    o.count = reference.values[i].element_count();
    KILN_ASSIGN_OR_RETURN(o.values, upload(reference.values[i].values()));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(o.magnitudes, upload(reference.magnitudes[i].values()));
      KILN_ASSIGN_OR_RETURN(o.scales, upload(reference.scales[i].values()));
    }
    r.outputs.push_back(std::move(o));
  }
  return r;
}

StatusOr<ReferenceOutputs> download_reference(const Graph& g, const DeviceReference& reference) {
  return download_outputs_of(g, reference);
}

}  // namespace kiln
