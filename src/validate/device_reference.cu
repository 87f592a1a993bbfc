// The device reference: naive CUDA kernels in fp32 (fp32 accumulation), one launch per node, operating on
// packed row-major fp32 arrays (the host gathers strided inputs into that form and scatters outputs back
// through the graph's strides). Written for clarity, not speed: each kernel is the textbook loop.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kiln/cuda_handles.h"
#include "kiln/reference.h"
#include "validate/reference_common.h"

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
  float scale;
  int causal;
};

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));
}

// ---- convolution ----------------------------------------------------------------------------------

__global__ void conv_fprop_kernel(ConvParams p, const float* __restrict__ x, const float* __restrict__ w,
                                  float* __restrict__ y) {
  const int64_t total = p.n * p.k * p.out[0] * p.out[1] * p.out[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t o2 = r % p.out[2]; r /= p.out[2];
    const int64_t o1 = r % p.out[1]; r /= p.out[1];
    const int64_t o0 = r % p.out[0]; r /= p.out[0];
    const int64_t k = r % p.k;
    const int64_t n = r / p.k;
    const int64_t grp = k / kg;
    float acc = 0.f;
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
__global__ void conv_dgrad_kernel(ConvParams p, const float* __restrict__ dy, const float* __restrict__ w,
                                  float* __restrict__ dx) {
  const int64_t total = p.n * p.c * p.in[0] * p.in[1] * p.in[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t i2 = r % p.in[2]; r /= p.in[2];
    const int64_t i1 = r % p.in[1]; r /= p.in[1];
    const int64_t i0 = r % p.in[0]; r /= p.in[0];
    const int64_t ch = r % p.c;
    const int64_t n = r / p.c;
    const int64_t grp = ch / cg, ci = ch % cg;
    float acc = 0.f;
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

__global__ void conv_wgrad_kernel(ConvParams p, const float* __restrict__ x, const float* __restrict__ dy,
                                  float* __restrict__ dw) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t total = p.k * cg * p.filt[0] * p.filt[1] * p.filt[2];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = idx;
    const int64_t f2 = r % p.filt[2]; r /= p.filt[2];
    const int64_t f1 = r % p.filt[1]; r /= p.filt[1];
    const int64_t f0 = r % p.filt[0]; r /= p.filt[0];
    const int64_t ci = r % cg;
    const int64_t k = r / cg;
    const int64_t ch = (k / kg) * cg + ci;
    float acc = 0.f;
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

__global__ void matmul_kernel(MatmulParams p, const float* __restrict__ a, const float* __restrict__ b,
                              float* __restrict__ c) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
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
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
      const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
      as[threadIdx.y][threadIdx.x] = (row < p.m && ka < p.k) ? a[ao + row * p.k + ka] : 0.f;
      bs[threadIdx.y][threadIdx.x] = (kb < p.k && col < p.n) ? b[bo + kb * p.n + col] : 0.f;
      __syncthreads();
      for (int kk = 0; kk < kTile; ++kk) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
      __syncthreads();
    }
    if (row < p.m && col < p.n) c[bi * p.m * p.n + row * p.n + col] = acc;
  }
}

// ---- pointwise ------------------------------------------------------------------------------------

__device__ float apply_pointwise(PointwiseMode mode, float a, float b) {
  switch (mode) {
    case PointwiseMode::kAdd: return a + b;
    case PointwiseMode::kSub: return a - b;
    case PointwiseMode::kMul: return a * b;
    case PointwiseMode::kDiv: return a / b;
    case PointwiseMode::kMin: return fminf(a, b);
    case PointwiseMode::kMax: return fmaxf(a, b);
    case PointwiseMode::kScale: return a * b;
    case PointwiseMode::kBiasAdd: return a + b;
    case PointwiseMode::kRelu: return a > 0.f ? a : 0.f;
    case PointwiseMode::kGeluErf: return 0.5f * a * (1.f + erff(a * 0.70710678118654752f));
    case PointwiseMode::kGeluTanh:
      return 0.5f * a * (1.f + tanhf(0.79788456080286536f * (a + 0.044715f * a * a * a)));
    case PointwiseMode::kSilu: return a / (1.f + expf(-a));
    case PointwiseMode::kSigmoid: return 1.f / (1.f + expf(-a));
    case PointwiseMode::kTanh: return tanhf(a);
    case PointwiseMode::kExp: return expf(a);
    case PointwiseMode::kIdentity: return a;
  }
  return a;
}

__global__ void pointwise_kernel(BroadcastParams p, PointwiseMode mode, const float* __restrict__ a,
                                 const float* __restrict__ b, float* __restrict__ y, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = idx, oa = 0, ob = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t i = rem % p.dims[d];
      rem /= p.dims[d];
      oa += i * p.sa[d];
      ob += i * p.sb[d];
    }
    y[idx] = apply_pointwise(mode, a[oa], b ? b[ob] : 0.f);
  }
}

// ---- reduction ------------------------------------------------------------------------------------

__global__ void reduction_kernel(ReduceParams p, ReductionMode mode, const float* __restrict__ x,
                                 float* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < p.out_count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = idx, base = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      if (p.reduced[d]) continue;
      base += (rem % p.dims[d]) * p.strides[d];
      rem /= p.dims[d];
    }
    float acc = mode == ReductionMode::kMax ? -INFINITY : (mode == ReductionMode::kMin ? INFINITY : 0.f);
    for (int64_t r = 0; r < p.reduced_count; ++r) {
      int64_t rr = r, off = base;
      for (int d = p.rank - 1; d >= 0; --d) {
        if (!p.reduced[d]) continue;
        off += (rr % p.dims[d]) * p.strides[d];
        rr /= p.dims[d];
      }
      const float v = x[off];
      switch (mode) {
        case ReductionMode::kSum: acc += v; break;
        case ReductionMode::kMax: acc = fmaxf(acc, v); break;
        case ReductionMode::kMin: acc = fminf(acc, v); break;
        case ReductionMode::kAmax: acc = fmaxf(acc, fabsf(v)); break;
      }
    }
    y[idx] = acc;
  }
}

// ---- layer / RMS norm: one block per row ------------------------------------------------------------

__device__ float block_sum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

// `p` maps a position in x to offsets in scale (sa) and bias (sb).
__global__ void norm_kernel(BroadcastParams p, int64_t rows, int64_t inner, int layer, float eps,
                            const float* __restrict__ x, const float* __restrict__ scale,
                            const float* __restrict__ bias, float* __restrict__ y) {
  __shared__ float shared[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * inner;
    float mean = 0.f;
    if (layer) {
      float s = 0.f;
      for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) s += xr[i];
      mean = block_sum(s, shared) / static_cast<float>(inner);
    }
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      const float d = xr[i] - mean;
      ss += d * d;
    }
    const float inv = rsqrtf(block_sum(ss, shared) / static_cast<float>(inner) + eps);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      int64_t rem = row * inner + i, os = 0, ob = 0;
      for (int d = p.rank - 1; d >= 0; --d) {
        const int64_t j = rem % p.dims[d];
        rem /= p.dims[d];
        os += j * p.sa[d];
        ob += j * p.sb[d];
      }
      float v = (xr[i] - mean) * inv * scale[os];
      if (bias) v += bias[ob];
      y[row * inner + i] = v;
    }
  }
}

// ---- SDPA: one thread per query row, two passes (max, then exp-sum and weighted values) -----------

__global__ void sdpa_kernel(SdpaParams p, const float* __restrict__ q, const float* __restrict__ k,
                            const float* __restrict__ v, float* __restrict__ o) {
  const int64_t rows = p.b * p.h * p.sq;
  const int64_t group = p.h / p.hk;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % p.sq;
    const int64_t h = (idx / p.sq) % p.h;
    const int64_t b = idx / (p.sq * p.h);
    const int64_t hk = h / group;
    const float* qi = q + idx * p.d;
    const float* kb = k + (b * p.hk + hk) * p.skv * p.d;
    const float* vb = v + (b * p.hk + hk) * p.skv * p.dv;
    float* oi = o + idx * p.dv;
    const int64_t last = p.causal ? (i + 1 < p.skv ? i + 1 : p.skv) : p.skv;
    float mx = -INFINITY;
    for (int64_t j = 0; j < last; ++j) {
      float dot = 0.f;
      for (int64_t d = 0; d < p.d; ++d) dot += qi[d] * kb[j * p.d + d];
      mx = fmaxf(mx, dot * p.scale);
    }
    for (int64_t d = 0; d < p.dv; ++d) oi[d] = 0.f;
    float sum = 0.f;
    for (int64_t j = 0; j < last; ++j) {
      float dot = 0.f;
      for (int64_t d = 0; d < p.d; ++d) dot += qi[d] * kb[j * p.d + d];
      const float e = expf(dot * p.scale - mx);
      sum += e;
      for (int64_t d = 0; d < p.dv; ++d) oi[d] += e * vb[j * p.dv + d];
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int64_t d = 0; d < p.dv; ++d) oi[d] *= inv;
  }
}

// ---- rounding of stored intermediates ---------------------------------------------------------------

__global__ void round_kernel(DataType dt, float* __restrict__ x, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[idx];
    float r = v;
    switch (dt) {
      case DataType::kFloat32: break;
      case DataType::kFloat16: r = __half2float(__float2half_rn(v)); break;
      case DataType::kBFloat16: r = __bfloat162float(__float2bfloat16_rn(v)); break;
      case DataType::kFp8E4M3:
        r = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3), __NV_E4M3)));
        break;
      case DataType::kFp8E5M2:
        r = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2), __NV_E5M2)));
        break;
      case DataType::kInt8: r = isnan(v) ? 0.f : fminf(fmaxf(rintf(v), -128.f), 127.f); break;
      case DataType::kInt32: case DataType::kInt64: r = isnan(v) ? 0.f : rintf(v); break;
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
  p.n = c.n; p.c = c.c; p.k = c.k; p.groups = c.groups;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = c.in[i]; p.filt[i] = c.filt[i]; p.out[i] = c.out[i];
    p.pad[i] = c.pad[i]; p.stride[i] = c.stride[i]; p.dil[i] = c.dil[i];
  }
  return p;
}

StatusOr<DeviceBuffer> upload(const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(f.size() * sizeof(float)));
  if (!f.empty()) KILN_RETURN_IF_ERROR(buf.copy_from_host(f.data(), f.size() * sizeof(float)));
  return buf;
}

Status run_node(const Graph& g, const NodePlan& p, const std::vector<const float*>& in, float* y, int64_t y_count) {
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
      mp.m = p.mm.m; mp.n = p.mm.n; mp.k = p.mm.k;
      mp.batch_count = p.mm.batch_count();
      const int64_t gx = (mp.n + kTile - 1) / kTile, gy = (mp.m + kTile - 1) / kTile;
      if (gx > 0x7FFFFFFF || gy > 65535) return not_supported(where + ": matrix too large for the device reference grid");
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
    case OpKind::kReduction: {
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
      reduction_kernel<<<grid_for(y_count), kThreads>>>(rp, node.reduction.mode, in[0], y);
      break;
    }
    case OpKind::kLayerNorm: case OpKind::kRmsNorm: {
      BroadcastParams bp;
      KILN_RETURN_IF_ERROR(fill_broadcast(bp, p.norm.x_dims, p.norm.scale_strides, p.norm.bias_strides, where));
      const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(p.norm.rows, 1 << 20)));
      norm_kernel<<<blocks, kThreads>>>(bp, p.norm.rows, p.norm.inner, p.op == OpKind::kLayerNorm ? 1 : 0,
                                        static_cast<float>(node.norm.epsilon), in[0], in[1],
                                        in.size() > 2 ? in[2] : nullptr, y);
      break;
    }
    case OpKind::kSdpa: {
      SdpaParams sp{p.sdpa.b, p.sdpa.h, p.sdpa.hk, p.sdpa.sq, p.sdpa.skv, p.sdpa.d, p.sdpa.dv,
                    static_cast<float>(p.sdpa.scale), p.sdpa.causal ? 1 : 0};
      const int64_t rows = sp.b * sp.h * sp.sq;
      sdpa_kernel<<<grid_for(rows), kThreads>>>(sp, in[0], in[1], in[2], y);
      break;
    }
  }
  return check_launch(g, p.node);
}

}  // namespace

StatusOr<std::vector<HostTensor>> run_device_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return unavailable(std::string("device reference needs a CUDA device: ") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
  }
  KILN_ASSIGN_OR_RETURN(PreparedGraph prep, prepare_graph(g));
  KILN_ASSIGN_OR_RETURN(auto values, load_inputs(g, inputs));
  std::map<int, DeviceBuffer> buffers;
  for (const auto& [t, v] : values) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, upload(v));
    buffers.emplace(t, std::move(b));
  }
  for (const NodePlan& p : prep.plans) {
    const Node& node = g.nodes[static_cast<size_t>(p.node)];
    std::vector<const float*> in;
    for (int t : node.inputs) {
      auto it = buffers.find(t);
      if (it == buffers.end()) return internal_error(node_label(g, p.node) + ": input not computed");
      in.push_back(it->second.as<float>());
    }
    const int out = node.outputs[0];
    const int64_t count = product(tensor_dims(g, out));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::allocate(static_cast<size_t>(count) * sizeof(float)));
    KILN_RETURN_IF_ERROR(run_node(g, p, in, y.as<float>(), count));
    const DataType dt = dtype_of(g, out);
    if (dt != DataType::kFloat32) {
      round_kernel<<<grid_for(count), kThreads>>>(dt, y.as<float>(), count);
      KILN_RETURN_IF_ERROR(check_launch(g, p.node));
    }
    buffers[out] = std::move(y);
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  for (int t : g.outputs) {
    if (values.count(t)) continue;  // a graph input passed straight through
    const int64_t count = product(tensor_dims(g, t));
    std::vector<float> f(static_cast<size_t>(count));
    if (count > 0) KILN_RETURN_IF_ERROR(buffers.at(t).copy_to_host(f.data(), f.size() * sizeof(float)));
    values[t] = std::vector<double>(f.begin(), f.end());
  }
  return make_outputs(g, values);
}

}  // namespace kiln
