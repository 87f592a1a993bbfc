// launch_paged_decode_staged (decode_common.cuh): the paged decode's staged form, knl4_chunk=C_stages=S. Each
// (entry, key head, split of `chunk` keys) gets a CTA of 4 warps that streams its keys through shared memory in
// tiles of 64, S tiles in flight (cp.async, 16 bytes a copy, rows past the entry's keys zero-filled, each row's
// chunks XOR-swizzled). A tile is taken in three passes over shared memory, none with a shuffle per key: the scores
// of every query head of the key head (a thread a key and a few heads: each 16-byte piece of the key read once for
// all of them, q in fp32 from shared memory); the online softmax of the tile (a warp a query head: the tile's max,
// the rescale of what is summed so far, the weights); the weighted sum of V (a thread 8 columns and every eighth key,
// or sixteenth for head dim 64, for every query head). The key slices' sums are added in shared memory at the end.
// One split writes o itself; more write their partials for decode_merge_kernel. Buffers not 16-byte aligned are
// copied element by element into the same tiles. No atomics: the same sums in the same order every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "lower/cp_async.cuh"
#include "lower/decode_common.cuh"

namespace kiln::lower_detail {
namespace {

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
constexpr int kTablesCap = 512;  // pages of a CTA's keys whose table entries it stages (more read the tables)

// The shared memory of one launch form: S stages of a K tile and a V tile, then q (fp32), the tile's scores and
// weights, each query head's running max, sum and rescale, and the staged table entries.
template <int D, int G, int S>
struct StagedLayout {
  static constexpr int kChunks = D / 8;  // 16-byte chunks a row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kTileBytes = kTileKeys * kRowBytes;
  static constexpr int kStages = S * 2 * kTileBytes;
  static constexpr int kSlices = kThreads / kChunks;  // key slices of the weighted sum
  static constexpr int kHeadsPerThread = G * kTileKeys > kThreads ? G* kTileKeys / kThreads : 1;
  static constexpr int kQ = kStages, kP = kQ + G * D * 4, kStats = kP + G * kTileKeys * 4;
  static constexpr int kTables = kStats + 3 * G * 4;
  static constexpr int kBytes = kTables + 2 * kTablesCap * 4;
  static_assert(kSlices * G * D * 4 <= kStages, "the key slices' sums fit where the stages were");
  static_assert(kBytes <= 227 * 1024, "fits an SM");
};

// Copies tile `t` of the CTA's keys [begin, end) into `stage` (K then V): cp.async where the buffers are aligned,
// element by element otherwise; rows past `end` are zeros.
template <typename T, int D, int G, int S>
__device__ __forceinline__ void load_tile(const DecodeParams& p, const T* kc, const T* vc, const int* tk, const int* tv,
                                          int first_page, int head, int begin, int end, int t, unsigned char* stage) {
  using L = StagedLayout<D, G, S>;
  const int base = begin + t * kTileKeys;
  for (int c = threadIdx.x; c < kTileKeys * L::kChunks; c += kThreads) {
    const int r = c / L::kChunks, ch = c % L::kChunks, j = base + r;
    const bool live = j < end;
    const int64_t rk = live ? key_row(p, tk, first_page, head, j) : 0;
    const int64_t rv = live ? key_row(p, tv, first_page, head, j) : 0;
    unsigned char* dk = stage + r * L::kRowBytes + swizzled(r, ch);
    unsigned char* dv = dk + L::kTileBytes;
    if (p.aligned) {
      cp_async16(smem_u32(dk), kc + rk * D + ch * 8, live ? 16 : 0);
      cp_async16(smem_u32(dv), vc + rv * D + ch * 8, live ? 16 : 0);
    } else {
      const uint4 zero = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dk) = live ? load16(kc + rk * D + ch * 8, false) : zero;
      *reinterpret_cast<uint4*>(dv) = live ? load16(vc + rv * D + ch * 8, false) : zero;
    }
  }
}

// The tile's scores (base 2, -inf past `end`) into s_p: a thread one key and every other query head (or every
// fourth... as G x 64 keys over 128 threads gives), each 16-byte piece of the key read once.
template <typename T, int D, int G, int S>
__device__ __forceinline__ void tile_scores(const unsigned char* kt, const float* s_q, float* s_p, int live) {
  using L = StagedLayout<D, G, S>;
  const int r = threadIdx.x % kTileKeys, g0 = threadIdx.x / kTileKeys;
  constexpr int kStep = kThreads / kTileKeys;  // query heads between a thread's
  if (g0 >= G) return;
  float s[L::kHeadsPerThread] = {};
#pragma unroll 4
  for (int c = 0; c < L::kChunks; ++c) {
    float kf[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(kt + r * L::kRowBytes + swizzled(r, c)), kf);
#pragma unroll
    for (int i = 0; i < L::kHeadsPerThread; ++i) {
      const float4* q4 = reinterpret_cast<const float4*>(s_q + (g0 + i * kStep) * D + c * 8);
      const float4 a = q4[0], b = q4[1];
      s[i] = fmaf(a.x, kf[0], fmaf(a.y, kf[1], fmaf(a.z, kf[2], fmaf(a.w, kf[3], s[i]))));
      s[i] = fmaf(b.x, kf[4], fmaf(b.y, kf[5], fmaf(b.z, kf[6], fmaf(b.w, kf[7], s[i]))));
    }
  }
#pragma unroll
  for (int i = 0; i < L::kHeadsPerThread; ++i) s_p[(g0 + i * kStep) * kTileKeys + r] = r < live ? s[i] : -INFINITY;
}

// The tile's online softmax, a warp a query head: scores become weights against the new running max; s_stats holds
// each head's max, sum and the rescale of what was summed before this tile.
template <int G>
__device__ __forceinline__ void tile_softmax(float* s_p, float* s_stats) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < G; g += kThreads / 32) {
    float* x = s_p + g * kTileKeys;
    const float x0 = x[lane], x1 = x[lane + 32];
    float mx = fmaxf(x0, x1);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_old = s_stats[g], m_new = fmaxf(m_old, mx);  // finite: a tile has a live key
    const float e0 = fast_exp2(x0 - m_new), e1 = fast_exp2(x1 - m_new);
    x[lane] = e0;
    x[lane + 32] = e1;
    float sum = e0 + e1;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
      const float alpha = fast_exp2(m_old - m_new);  // 0 before the first tile (m_old -inf)
      s_stats[g] = m_new;
      s_stats[G + g] = s_stats[G + g] * alpha + sum;
      s_stats[2 * G + g] = alpha;
    }
  }
}

template <typename T, int D, int G, int S>
__global__ void __launch_bounds__(kThreads)
    decode_staged_kernel(DecodeParams p, const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                         const int* __restrict__ lq, const int* __restrict__ lkv, const int* __restrict__ tk,
                         const int* __restrict__ tv, float* __restrict__ part, T* __restrict__ o) {
  using L = StagedLayout<D, G, S>;
  extern __shared__ __align__(128) unsigned char smem[];
  float* s_q = reinterpret_cast<float*>(smem + L::kQ);
  float* s_p = reinterpret_cast<float*>(smem + L::kP);
  float* s_stats = reinterpret_cast<float*>(smem + L::kStats);  // max [G], sum [G], rescale [G]
  int* s_tk = reinterpret_cast<int*>(smem + L::kTables);
  int* s_tv = s_tk + kTablesCap;
  const int split = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int begin = split * p.chunk, end = min(begin + p.chunk, entry_keys(p, lq, lkv, b));
  const int tiles = begin < end ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  const int* tabk = tk + static_cast<int64_t>(b) * p.pages;
  const int* tabv = tv + static_cast<int64_t>(b) * p.pages;
  int first_page = 0;
  if (tiles > 0) {  // the CTA's table entries, staged where they fit
    const int first = begin / p.block_size, pages = (end - 1) / p.block_size - first + 1;
    if (pages <= kTablesCap) {
      for (int i = threadIdx.x; i < pages; i += kThreads) {
        s_tk[i] = tabk[first + i];
        s_tv[i] = tabv[first + i];
      }
      tabk = s_tk;
      tabv = s_tv;
      first_page = first;
    }
  }
  for (int i = threadIdx.x; i < G * D; i += kThreads)
    s_q[i] = to_float(q[(static_cast<int64_t>(b) * p.h + head * G) * D + i]) * p.scale_log2;
  if (threadIdx.x < G) {
    s_stats[threadIdx.x] = -INFINITY;
    s_stats[G + threadIdx.x] = 0.f;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < S - 1; ++t) {
    if (t < tiles)
      load_tile<T, D, G, S>(p, kc, vc, tabk, tabv, first_page, head, begin, end, t, smem + t * 2 * L::kTileBytes);
    cp_async_commit();
  }
  const int ch = threadIdx.x % L::kChunks, slice = threadIdx.x / L::kChunks;
  float acc[G][8] = {};
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile t is in; every thread is past tile t-1, whose stage the next load takes
    const int next = t + S - 1;
    if (next < tiles)
      load_tile<T, D, G, S>(p, kc, vc, tabk, tabv, first_page, head, begin, end, next,
                            smem + (next % S) * 2 * L::kTileBytes);
    cp_async_commit();
    const unsigned char* kt = smem + (t % S) * 2 * L::kTileBytes;
    tile_scores<T, D, G, S>(kt, s_q, s_p, end - (begin + t * kTileKeys));
    __syncthreads();
    tile_softmax<G>(s_p, s_stats);
    __syncthreads();
    const unsigned char* vt = kt + L::kTileBytes;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float alpha = s_stats[2 * G + g];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= alpha;
    }
#pragma unroll 2
    for (int r = slice; r < kTileKeys; r += L::kSlices) {
      float vf[8];
      unpack8<T>(*reinterpret_cast<const uint4*>(vt + r * L::kRowBytes + swizzled(r, ch)), vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float w = s_p[g * kTileKeys + r];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();                              // the stages are free: the key slices' sums go there
  float* red = reinterpret_cast<float*>(smem);  // [slice][G][D]
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) red[(slice * G + g) * D + ch * 8 + e] = acc[g][e];
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    float sum = 0.f;
    for (int sl = 0; sl < L::kSlices; ++sl) sum += red[(sl * G + g) * D + d];
    const float m = s_stats[g], l = s_stats[G + g];
    if (p.splits == 1) {
      o[(static_cast<int64_t>(b) * p.h + head * G + g) * D + d] = from_float<T>(l > 0.f ? sum / l : 0.f);
      continue;
    }
    float* out = decode_partial(p, part, b, head * G + g, split, D);
    out[d] = sum;
    if (d == 0) {
      out[D] = m;
      out[D + 1] = l;
    }
  }
}

template <typename T, int D, int G, int S>
Status launch_staged(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                     cudaStream_t stream) {
  using L = StagedLayout<D, G, S>;
  const auto kernel = decode_staged_kernel<T, D, G, S>;
  // The shared memory past 48 KiB is allowed per device, once on each (a failure is tried again at the next launch).
  static std::atomic<bool> allowed[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64)
    return internal_error("the paged decode: no current CUDA device (or one past the 64th)");
  if (!allowed[device].load(std::memory_order_acquire)) {
    const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
    if (attr != cudaSuccess)
      return internal_error(std::string("the paged decode's shared memory: ") + cudaGetErrorString(attr));
    allowed[device].store(true, std::memory_order_release);
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.hk), static_cast<unsigned>(p.b));
  kernel<<<grid, kThreads, L::kBytes, stream>>>(
      p, static_cast<const T*>(x.q), static_cast<const T*>(x.k), static_cast<const T*>(x.v),
      static_cast<const int*>(x.seq_len_q), static_cast<const int*>(x.seq_len_kv), static_cast<const int*>(x.table_k),
      static_cast<const int*>(x.table_v), part, static_cast<T*>(x.o));
  if (p.splits > 1)
    decode_merge_kernel<T, D><<<static_cast<unsigned>(pr.b * pr.h), D, 0, stream>>>(p, part, static_cast<T*>(x.o));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error(std::string("paged decode launch: ") + cudaGetErrorString(err));
  return Status::ok();
}

template <typename T, int D, int S>
Status launch_heads(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                    cudaStream_t stream) {
  switch (pr.h / pr.hk) {
    case 1: return launch_staged<T, D, 1, S>(pr, p, x, part, stream);
    case 2: return launch_staged<T, D, 2, S>(pr, p, x, part, stream);
    case 4: return launch_staged<T, D, 4, S>(pr, p, x, part, stream);
    case 8: return launch_staged<T, D, 8, S>(pr, p, x, part, stream);
    default: return invalid_argument("paged decode: " + std::to_string(pr.h / pr.hk) + " query heads a key head");
  }
}

template <typename T, int S>
Status launch_dims(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                   cudaStream_t stream) {
  if (pr.d == 64) return launch_heads<T, 64, S>(pr, p, x, part, stream);
  if (pr.d == 128) return launch_heads<T, 128, S>(pr, p, x, part, stream);
  return invalid_argument("paged decode: head dim " + std::to_string(pr.d) + " (64 or 128)");
}

}  // namespace

Status launch_paged_decode_staged(const PagedDecodeProblem& pr, const DecodeParams& p, int stages,
                                  const PagedDecodeBuffers& x, void* workspace, cudaStream_t stream) {
  float* part = static_cast<float*>(workspace);
  const bool bf16 = pr.dtype == DataType::kBFloat16;
  if (stages == 2)
    return bf16 ? launch_dims<__nv_bfloat16, 2>(pr, p, x, part, stream)
                : launch_dims<__half, 2>(pr, p, x, part, stream);
  if (stages == 3)
    return bf16 ? launch_dims<__nv_bfloat16, 3>(pr, p, x, part, stream)
                : launch_dims<__half, 3>(pr, p, x, part, stream);
  return invalid_argument("paged decode: " + std::to_string(stages) + " stages (2 or 3)");
}

}  // namespace kiln::lower_detail
