// launch_norm (src/lower/kernel_plan.h): a layer_norm or rms_norm over rows, one group of threads a row. The
// vectorized kernel reads its row once, in 16-byte chunks held in registers, reduces the statistics over the group
// (warp shuffles, then shared memory across the group's warps), and writes y from the registers: x is read once
// and y written once, the least memory the op can move. The plain loop (a hidden size that is no whole number of
// chunks, or a caller's buffer that is not 16-byte aligned) reads the row from memory for each pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <cstdint>
#include <string>

#include "lower/kernel_elements.cuh"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

// The sum of `v` over this thread's group of `group` threads (32 to blockDim.x, a power of two; groups are
// consecutive threads). Every thread of the CTA calls it, together; `partial` holds one float a warp.
__device__ __forceinline__ float group_sum(float v, int group, float* partial) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (group == 32) return v;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int warps = group / 32, first = static_cast<int>(threadIdx.x) / group * warps;
  float s = 0.0f;
  for (int w = 0; w < warps; ++w) s += partial[first + w];
  return s;
}

// E elements of T from `p` (16-byte aligned; E * sizeof(T) a multiple of 16) as floats.
template <typename T, int E>
__device__ __forceinline__ void load_chunk(const T* __restrict__ p, float (&f)[E]) {
  constexpr int kPer = 16 / sizeof(T);
#pragma unroll
  for (int w = 0; w < E / kPer; ++w) {
    const uint4 bits = __ldg(reinterpret_cast<const uint4*>(p) + w);
    const T* e = reinterpret_cast<const T*>(&bits);
#pragma unroll
    for (int j = 0; j < kPer; ++j) f[w * kPer + j] = to_float(e[j]);
  }
}

template <typename T, int E>
__device__ __forceinline__ void store_chunk(T* __restrict__ p, const float (&f)[E]) {
  constexpr int kPer = 16 / sizeof(T);
#pragma unroll
  for (int w = 0; w < E / kPer; ++w) {
    uint4 bits;
    T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
    for (int j = 0; j < kPer; ++j) e[j] = from_float<T>(f[w * kPer + j]);
    reinterpret_cast<uint4*>(p)[w] = bits;
  }
}

// One row a group: chunk c of a row is read by thread c % group, as its (c / group)th of PER chunks. The CTAs step
// over the row groups (a grid-stride loop: with a grid smaller than the rows, as `persist` launches it, each CTA
// keeps its place on the SM and loads its next rows while it reduces and writes the current ones).
template <typename Tx>
__device__ __forceinline__ const uint4* row_chunks(const Tx* x, int64_t row, int chunks) {
  return reinterpret_cast<const uint4*>(x) + row * chunks;
}

template <typename Tx, typename Ty, typename Ts, int PER, bool kPrefetch>
__global__ void __launch_bounds__(512)
    norm_rows_kernel(const Tx* __restrict__ x, const Ts* __restrict__ scale, const Ts* __restrict__ bias,
                     Ty* __restrict__ y, int64_t rows, int chunks, int group, float inv_hidden, float epsilon) {
  constexpr int E = 16 / sizeof(Tx);
  __shared__ float partial[2][2][16];  // [iteration parity][mean, variance][warp]
  const int t = static_cast<int>(threadIdx.x) % group;
  const int64_t per_cta = blockDim.x / group, first = threadIdx.x / group;
  const int64_t steps = (rows + per_cta - 1) / per_cta;  // row groups of the whole grid
  uint4 raw[PER], next[kPrefetch ? PER : 1];
  auto load = [&](uint4* into, int64_t step) {
    const int64_t row = step * per_cta + first;
    const uint4* xr = row_chunks(x, row, chunks);
#pragma unroll
    for (int v = 0; v < PER; ++v) {
      const int c = t + v * group;
      into[v] = step < steps && row < rows && c < chunks ? __ldcs(xr + c) : make_uint4(0, 0, 0, 0);  // read once
    }
  };
  load(raw, blockIdx.x);
  int parity = 0;
  for (int64_t step = blockIdx.x; step < steps; step += gridDim.x, parity ^= 1) {
    if constexpr (kPrefetch) load(next, step + gridDim.x);  // in flight while this row is reduced and written
    const int64_t row = step * per_cta + first;
    float mean = 0.0f;
    if (bias) {  // layer_norm: the mean first, then the variance about it (from registers: no second read)
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < PER; ++v) {
        const Tx* e = reinterpret_cast<const Tx*>(&raw[v]);
#pragma unroll
        for (int j = 0; j < E; ++j) s += to_float(e[j]);  // absent chunks are zeros
      }
      mean = group_sum(s, group, partial[parity][0]) * inv_hidden;
    }
    float ss = 0.0f;
#pragma unroll
    for (int v = 0; v < PER; ++v) {
      if (t + v * group >= chunks) continue;
      const Tx* e = reinterpret_cast<const Tx*>(&raw[v]);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const float d = to_float(e[j]) - mean;
        ss += d * d;
      }
    }
    // A dead group (past the last row) still joins the CTA's reductions.
    const float rstd = rsqrtf(group_sum(ss, group, partial[parity][1]) * inv_hidden + epsilon);
    if (row < rows) {
      Ty* yr = y + row * chunks * E;
#pragma unroll
      for (int v = 0; v < PER; ++v) {
        const int c = t + v * group;
        if (c >= chunks) continue;
        float g[E], b[E], out[E];
        load_chunk<Ts, E>(scale + c * E, g);
        if (bias) load_chunk<Ts, E>(bias + c * E, b);
        const Tx* e = reinterpret_cast<const Tx*>(&raw[v]);
#pragma unroll
        for (int j = 0; j < E; ++j) out[j] = (to_float(e[j]) - mean) * rstd * g[j] + (bias ? b[j] : 0.0f);
        store_chunk<Ty, E>(yr + c * E, out);
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int v = 0; v < PER; ++v) raw[v] = next[v];
    } else {
      if (step + gridDim.x < steps) load(raw, step + gridDim.x);
    }
  }
}

// The plain loop: a CTA a row, each pass reading the row from memory.
template <typename Tx, typename Ty, typename Ts>
__global__ void __launch_bounds__(512)
    norm_rows_plain_kernel(const Tx* __restrict__ x, const Ts* __restrict__ scale, const Ts* __restrict__ bias,
                           Ty* __restrict__ y, int64_t hidden, float inv_hidden, float epsilon) {
  __shared__ float partial[2][16];
  const Tx* xr = x + static_cast<int64_t>(blockIdx.x) * hidden;
  float mean = 0.0f;
  if (bias) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) s += to_float(xr[i]);
    mean = group_sum(s, blockDim.x, partial[0]) * inv_hidden;
  }
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float d = to_float(xr[i]) - mean;
    ss += d * d;
  }
  const float rstd = rsqrtf(group_sum(ss, blockDim.x, partial[1]) * inv_hidden + epsilon);
  Ty* yr = y + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    yr[i] = from_float<Ty>((to_float(xr[i]) - mean) * rstd * to_float(scale[i]) + (bias ? to_float(bias[i]) : 0.0f));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The CTAs of `threads` threads of the prefetching kernel the current device holds at once (its SMs times the CTAs
// an SM holds), worked out once a device, kernel and CTA size.
template <typename Tx, typename Ty, typename Ts, int PER>
int64_t resident(int threads) {
  static std::atomic<int64_t> cached[64][3] = {};  // [device][threads 128, 256, 512]
  int device = 0;
  const int slot = threads == 128 ? 0 : threads == 256 ? 1 : threads == 512 ? 2 : -1;
  if (slot < 0 || cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    cudaGetLastError();       // a failed query is not the launch's error
    return int64_t{1} << 30;  // unknown: a CTA a row group, as without persist
  }
  int64_t n = cached[device][slot].load(std::memory_order_relaxed);
  if (n > 0) return n;
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_rows_kernel<Tx, Ty, Ts, PER, true>, threads, 0) !=
          cudaSuccess ||
      sms <= 0 || per_sm <= 0) {
    cudaGetLastError();
    return int64_t{1} << 30;
  }
  n = int64_t{sms} * per_sm;
  cached[device][slot].store(n, std::memory_order_relaxed);
  return n;
}

template <typename Tx, typename Ty, typename Ts>
Status launch_typed(const NormProblem& p, const NormLaunch& l, const void* x, const void* scale, const void* bias,
                    void* y, cudaStream_t stream) {
  const auto* xs = static_cast<const Tx*>(x);
  const auto* ss = static_cast<const Ts*>(scale);
  const auto* bs = static_cast<const Ts*>(bias);
  auto* ys = static_cast<Ty*>(y);
  const float inv_hidden = 1.0f / static_cast<float>(p.hidden);
  const bool vec = l.vectorized && aligned16(x) && aligned16(scale) && aligned16(y) && (!bias || aligned16(bias));
  if (!vec) {
    norm_rows_plain_kernel<Tx, Ty, Ts>
        <<<static_cast<unsigned>(p.rows), l.threads, 0, stream>>>(xs, ss, bs, ys, p.hidden, inv_hidden, p.epsilon);
  } else {
    const int chunks = static_cast<int>(p.hidden / norm_chunk_elements(p.x_dtype));
    const int64_t rows_per_cta = l.threads / l.group;
    const int64_t steps = (p.rows + rows_per_cta - 1) / rows_per_cta;
    const auto run = [&](auto per) {
      constexpr int kPer = decltype(per)::value;
      if (l.persist) {
        const auto blocks = static_cast<unsigned>(std::min<int64_t>(steps, resident<Tx, Ty, Ts, kPer>(l.threads)));
        norm_rows_kernel<Tx, Ty, Ts, kPer, true>
            <<<blocks, l.threads, 0, stream>>>(xs, ss, bs, ys, p.rows, chunks, l.group, inv_hidden, p.epsilon);
      } else {
        norm_rows_kernel<Tx, Ty, Ts, kPer, false><<<static_cast<unsigned>(steps), l.threads, 0, stream>>>(
            xs, ss, bs, ys, p.rows, chunks, l.group, inv_hidden, p.epsilon);
      }
    };
    switch (l.per_thread) {
      case 1: run(std::integral_constant<int, 1>()); break;
      case 2: run(std::integral_constant<int, 2>()); break;
      case 4: run(std::integral_constant<int, 4>()); break;
      case 8: run(std::integral_constant<int, 8>()); break;
      default: return invalid_argument("the norm kernel: " + std::to_string(l.per_thread) + " chunks a thread");
    }
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error(std::string("launching the norm kernel: ") + cudaGetErrorString(e));
  return Status::ok();
}

// y and the parameters each in x's dtype (Tx) or fp32.
template <typename Tx>
Status launch_for_x(const NormProblem& p, const NormLaunch& l, const void* x, const void* scale, const void* bias,
                    void* y, cudaStream_t stream) {
  const bool y_fp32 = p.y_dtype == DataType::kFloat32, s_fp32 = p.param_dtype == DataType::kFloat32;
  if (y_fp32 && s_fp32) return launch_typed<Tx, float, float>(p, l, x, scale, bias, y, stream);
  if (y_fp32) return launch_typed<Tx, float, Tx>(p, l, x, scale, bias, y, stream);
  if (s_fp32) return launch_typed<Tx, Tx, float>(p, l, x, scale, bias, y, stream);
  return launch_typed<Tx, Tx, Tx>(p, l, x, scale, bias, y, stream);
}

}  // namespace

Status launch_norm(const NormProblem& p, const NormLaunch& l, const void* x, const void* scale, const void* bias,
                   void* y, cudaStream_t stream) {
  const auto x_or_fp32 = [&](DataType t) { return t == p.x_dtype || t == DataType::kFloat32; };
  if (l.threads < 32 || l.threads > 512 || l.threads % 32 != 0 || l.group < 32 || l.group > l.threads ||
      l.threads % l.group != 0 || !x_or_fp32(p.y_dtype) || !x_or_fp32(p.param_dtype) || p.rows < 1 || p.hidden < 1)
    return invalid_argument("the norm kernel cannot run " + std::to_string(p.rows) + " rows of " +
                            std::to_string(p.hidden) + " with groups of " + std::to_string(l.group) + " in CTAs of " +
                            std::to_string(l.threads));
  if (p.rows > 0x7fffffff) return invalid_argument("the norm kernel: more rows than a grid holds");
  const int64_t chunk = norm_chunk_elements(p.x_dtype);
  if (l.vectorized && (p.hidden % chunk != 0 || int64_t{l.per_thread} * l.group * chunk < p.hidden))
    return invalid_argument("the norm kernel: rows of " + std::to_string(p.hidden) + " do not fit groups of " +
                            std::to_string(l.group) + " holding " + std::to_string(l.per_thread) + " chunks each");
  switch (p.x_dtype) {
    case DataType::kFloat32: return launch_typed<float, float, float>(p, l, x, scale, bias, y, stream);
    case DataType::kFloat16: return launch_for_x<__half>(p, l, x, scale, bias, y, stream);
    case DataType::kBFloat16: return launch_for_x<__nv_bfloat16>(p, l, x, scale, bias, y, stream);
    default: return invalid_argument(std::string("the norm kernel on ") + dtype_name(p.x_dtype));
  }
}

}  // namespace kiln::lower_detail
