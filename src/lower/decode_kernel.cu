// launch_paged_decode (src/lower/kernel_plan.h): decode attention over paged K/V caches, split over the keys
// (flash-decoding). The first kernel gives each (entry, key head, split of `chunk` keys) a CTA of 4 warps; a warp
// reads KW keys at once, each by a group of D/8 lanes holding 16 bytes of the key's row (KW = 2 for head dim 128,
// 4 for 64) and U keys in turn before it computes (loads in flight); each group keeps, for every query head of its
// key head, a running max, sum and the weighted sum of values (an online softmax, fp32, in base 2). The CTA merges its
// groups in shared memory and writes its split's partial (D sums, the max, the sum) to the workspace; the second
// kernel merges the splits of each query head into o (0 where the entry has no key or no query). No atomics: the same
// sums in the same order every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "lower/decode_common.cuh"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

constexpr int kWarps = 4;

// Pages of a CTA's keys whose table entries it holds in shared memory (a longer range reads the tables directly).
constexpr int kPageCap = 128;

// A CTA's view of entry b's page tables for keys [first_page * block_size, ...): the entries in shared memory
// where they fit, else the tables themselves.
struct PageView {
  const int *tk, *tv;  // shared (indexed from first_page) or global (indexed from the entry's row)
  int first_page;
};

// The raw K and V rows a lane group reads for one step: U keys from `base` (a key past `end` reads nothing).
template <typename T, int D, int U>
struct StepRows {
  uint4 k[U], v[U];
};
template <typename T, int D, int U>
__device__ __forceinline__ void load_step(const DecodeParams& p, const T* kc, const T* vc, const PageView& pv, int head,
                                          int first_key, int end, int col, StepRows<T, D, U>& r) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = first_key + u;
    if (j < end) {
      r.k[u] = load16(kc + key_row(p, pv.tk, pv.first_page, head, j) * D + col, p.aligned);
      r.v[u] = load16(vc + key_row(p, pv.tv, pv.first_page, head, j) * D + col, p.aligned);
    }
  }
}

template <typename T, int D, int G, int U>
__global__ void __launch_bounds__(kWarps * 32)
    decode_split_kernel(DecodeParams p, const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                        const int* __restrict__ lq, const int* __restrict__ lkv, const int* __restrict__ tk,
                        const int* __restrict__ tv, float* __restrict__ part) {
  constexpr int L = D / 8;    // lanes a key row
  constexpr int KW = 32 / L;  // keys a warp reads at once
  constexpr int NG = kWarps * KW;
  constexpr int kStep = NG * U;  // keys the CTA reads a step
  __shared__ float s_acc[NG][G][D];
  __shared__ float s_m[NG][G], s_l[NG][G];
  __shared__ int s_tk[kPageCap], s_tv[kPageCap];
  const int split = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = warp * KW + lane / L, col = (lane % L) * 8;
  const int keys = entry_keys(p, lq, lkv, b);
  const int begin = split * p.chunk, end = min(begin + p.chunk, keys);
  // The table entries of this CTA's pages, staged in shared memory (read once, not once a key).
  PageView pv{tk + static_cast<int64_t>(b) * p.pages, tv + static_cast<int64_t>(b) * p.pages, 0};
  if (begin < end) {
    const int first_page = begin / p.block_size, pages = (end - 1) / p.block_size - first_page + 1;
    if (pages <= kPageCap) {
      for (int i = threadIdx.x; i < pages; i += kWarps * 32) {
        s_tk[i] = pv.tk[first_page + i];
        s_tv[i] = pv.tv[first_page + i];
      }
      pv = PageView{s_tk, s_tv, first_page};
    }
  }
  __syncthreads();
  float qv[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    unpack8<T>(load16(q + (static_cast<int64_t>(b) * p.h + head * G + g) * D + col, p.aligned), qv[g]);
#pragma unroll
    for (int e = 0; e < 8; ++e) qv[g][e] *= p.scale_log2;
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.f;
  }
  // A register pipeline: the next step's rows are in flight while this step's are computed.
  StepRows<T, D, U> cur, next;
  if (begin < end) load_step<T, D, U>(p, kc, vc, pv, head, begin + grp * U, end, col, cur);
  for (int base = begin; base < end; base += kStep) {
    if (base + kStep < end) load_step<T, D, U>(p, kc, vc, pv, head, base + kStep + grp * U, end, col, next);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = base + grp * U + u < end;  // uniform across the key's group
      float kf[8], vf[8];
      unpack8<T>(valid ? cur.k[u] : make_uint4(0, 0, 0, 0), kf);
      unpack8<T>(valid ? cur.v[u] : make_uint4(0, 0, 0, 0), vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(qv[g][e], kf[e], s);
#pragma unroll
        for (int off = L / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (!valid) continue;
        if (s > m[g]) {  // a new max: rescale what is summed so far
          const float c = fast_exp2(m[g] - s);
          l[g] *= c;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] *= c;
          m[g] = s;
        }
        const float w = fast_exp2(s - m[g]);
        l[g] += w;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
      }
    }
    cur = next;
  }
  // Merge the CTA's groups, then write the split's partial: D weighted sums, the max, the sum.
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s_acc[grp][g][col + e] = acc[g][e];
    if (col == 0) {
      s_m[grp][g] = m[g];
      s_l[grp][g] = l[g];
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < G * D; t += kWarps * 32) {
    const int g = t / D, d = t % D;
    float mx = -INFINITY;
    for (int i = 0; i < NG; ++i) mx = fmaxf(mx, s_m[i][g]);
    float sum = 0.f, den = 0.f;
    if (mx != -INFINITY)
      for (int i = 0; i < NG; ++i) {
        const float c = fast_exp2(s_m[i][g] - mx);  // a group without keys: exp2(-inf) = 0
        sum = fmaf(c, s_acc[i][g][d], sum);
        den = fmaf(c, s_l[i][g], den);
      }
    float* out = decode_partial(p, part, b, head * G + g, split, D);
    out[d] = sum;
    if (d == 0) {
      out[D] = mx;
      out[D + 1] = den;
    }
  }
}

template <typename T, int D, int G>
Status launch_typed(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                    cudaStream_t stream) {
  constexpr int U = G >= 8 ? 2 : 4;  // keys a group loads before computing (registers: G query rows held)
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.hk), static_cast<unsigned>(p.b));
  decode_split_kernel<T, D, G, U><<<grid, kWarps * 32, 0, stream>>>(
      p, static_cast<const T*>(x.q), static_cast<const T*>(x.k), static_cast<const T*>(x.v),
      static_cast<const int*>(x.seq_len_q), static_cast<const int*>(x.seq_len_kv), static_cast<const int*>(x.table_k),
      static_cast<const int*>(x.table_v), part);
  decode_merge_kernel<T, D><<<static_cast<unsigned>(pr.b * pr.h), D, 0, stream>>>(p, part, static_cast<T*>(x.o));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error(std::string("paged decode launch: ") + cudaGetErrorString(err));
  return Status::ok();
}

template <typename T, int D>
Status launch_group(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                    cudaStream_t stream) {
  switch (pr.h / pr.hk) {
    case 1: return launch_typed<T, D, 1>(pr, p, x, part, stream);
    case 2: return launch_typed<T, D, 2>(pr, p, x, part, stream);
    case 4: return launch_typed<T, D, 4>(pr, p, x, part, stream);
    case 8: return launch_typed<T, D, 8>(pr, p, x, part, stream);
    default: return invalid_argument("paged decode: " + std::to_string(pr.h / pr.hk) + " query heads a key head");
  }
}

}  // namespace

DecodeParams decode_params(const PagedDecodeProblem& pr, int64_t chunk, const PagedDecodeBuffers& x) {
  constexpr float kLog2e = 1.4426950408889634f;
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  DecodeParams p;
  p.b = static_cast<int>(pr.b);
  p.h = static_cast<int>(pr.h);
  p.hk = static_cast<int>(pr.hk);
  p.block_size = static_cast<int>(pr.block_size);
  p.pages = static_cast<int>(pr.pages);
  p.blocks = static_cast<int>(pr.blocks);
  p.splits = static_cast<int>(paged_decode_splits(pr, chunk));
  p.chunk = static_cast<int>(chunk);
  p.block_shift = -1;
  for (int s = 0; s < 31; ++s)
    if ((int64_t{1} << s) == pr.block_size) p.block_shift = s;
  p.scale_log2 = pr.scale * kLog2e;
  p.aligned = aligned16(x.q) && aligned16(x.k) && aligned16(x.v);
  return p;
}

Status launch_paged_decode(const PagedDecodeProblem& pr, int64_t chunk, int stages, const PagedDecodeBuffers& x,
                           void* workspace, cudaStream_t stream) {
  const int64_t splits = paged_decode_splits(pr, chunk);
  // keys: a split's first key plus its chunk stays an int (chunks up to 4096)
  if (chunk <= 0 || splits <= 0 || splits > 65535 || pr.hk > 65535 || pr.b > 65535 || pr.keys() > INT32_MAX - 4096 ||
      pr.blocks > INT32_MAX || pr.b * pr.h > INT32_MAX)
    return invalid_argument("paged decode: " + std::to_string(splits) + " splits of " + std::to_string(chunk) +
                            " keys, batch " + std::to_string(pr.b) + ", " + std::to_string(pr.hk) +
                            " key heads: past the launch's grid");
  const DecodeParams p = decode_params(pr, chunk, x);
  if (stages != 0) return launch_paged_decode_staged(pr, p, stages, x, workspace, stream);
  float* part = static_cast<float*>(workspace);
  const bool bf16 = pr.dtype == DataType::kBFloat16;
  if (pr.d == 64)
    return bf16 ? launch_group<__nv_bfloat16, 64>(pr, p, x, part, stream)
                : launch_group<__half, 64>(pr, p, x, part, stream);
  if (pr.d == 128)
    return bf16 ? launch_group<__nv_bfloat16, 128>(pr, p, x, part, stream)
                : launch_group<__half, 128>(pr, p, x, part, stream);
  return invalid_argument("paged decode: head dim " + std::to_string(pr.d) + " (64 or 128)");
}

}  // namespace kiln::lower_detail
