// launch_paged_decode_staged (decode_common.cuh): the paged decode's staged form, knl4_chunk=C_stages=S. Each
// (entry, key head, split of `chunk` keys) gets a CTA of 4 warps that streams its keys through shared memory in
// tiles of 64, S tiles in flight (cp.async, 16 bytes a copy, rows past the entry's keys zero-filled, each row's
// 16-byte chunks XOR-swizzled by row so that the eight rows of an ldmatrix tile fall in eight banks). The tensor
// cores do the products: the key head's G query heads are the rows of a 16-row tile (rows G.. zero), and each warp
// takes 16 keys of every tile with an online softmax of its own (fp32, base 2), no barrier between the warps but
// the one a tile that frees its stage. Scores: mma.sync m16n8k16 of q (in registers for the whole CTA) against the
// keys (ldmatrix); the weights, rounded to the inputs' dtype as the product's a operand, against V (ldmatrix.trans);
// fp32 accumulators. The warps' maxima, sums and outputs are merged in shared memory at the end; one split writes o
// itself, more write their partials for decode_merge_kernel. Buffers not 16-byte aligned are copied element by
// element into the same tiles. No atomics: the same sums in the same order every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "lower/cp_async.cuh"
#include "lower/decode_common.cuh"
#include "lower/dynamic_smem.h"
#include "lower/mma.cuh"

namespace kiln::lower_detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 64;                      // 16 a warp
constexpr int kTablesCap = kPagedDecodeTablesCap;  // pages of a CTA's keys whose entries it stages

// A tile of 64 keys of K or V at head dim D in shared memory: rows of D/8 16-byte chunks.
template <int D>
struct Tile {
  static constexpr int kChunks = D / 8;  // 16-byte chunks a row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kBytes = kTileKeys * kRowBytes;
  static constexpr int kKSteps = D / 16;  // k16 steps of the scores
  static constexpr int kNTiles = D / 8;   // n8 tiles of the output
};

// The shared memory of one launch form: S stages of a K tile and a V tile, then the staged table entries. At the
// end the stages hold each warp's maxima, sums and outputs for the merge.
template <int D, int G, int S>
struct StagedLayout {
  static constexpr int kStages = S * 2 * Tile<D>::kBytes;
  static constexpr int kWarpFloats = 2 * G + G * D;
  static constexpr int kTables = kStages;
  static constexpr int kBytes = kTables + 2 * kTablesCap * 4;
  static_assert(kWarps * kWarpFloats * 4 <= kStages, "the warps' merge fits where the stages were");
  static_assert(kBytes == paged_decode_staged_smem(D, S), "the size kernel_plan offers and builds by");
  static_assert(kBytes <= 227 * 1024, "fits an SM");
};

// Two elements as the 32 bits of an mma operand register (the first in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  uint32_t r;
  T* e = reinterpret_cast<T*>(&r);
  e[0] = lo;
  e[1] = hi;
  return r;
}

// Copies tile `t` of the CTA's keys [begin, end) into `stage` (K then V): cp.async where the buffers are aligned,
// element by element otherwise; rows past `end` are zeros.
template <typename T, int D>
__device__ __forceinline__ void load_tile(const DecodeParams& p, const T* kc, const T* vc, const int* tk, const int* tv,
                                          int first_page, int head, int begin, int end, int t, unsigned char* stage) {
  using L = Tile<D>;
  const int base = begin + t * kTileKeys;
  for (int c = threadIdx.x; c < kTileKeys * L::kChunks; c += kThreads) {
    const int r = c / L::kChunks, ch = c % L::kChunks, j = base + r;
    const bool live = j < end;
    const int64_t rk = live ? key_row(p, tk, first_page, head, j) : 0;
    const int64_t rv = live ? key_row(p, tv, first_page, head, j) : 0;
    unsigned char* dk = stage + r * L::kRowBytes + swizzled(r, ch);
    unsigned char* dv = dk + L::kBytes;
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

// A warp's running softmax over its keys for the query head of its lane's row (lane / 4): the max and this lane's
// share of the sum (its quad's four lanes hold the rest), and the output's n8 tiles (rows lane / 4 and + 8).
template <int D>
struct WarpState {
  float m = -INFINITY, l = 0.f;
  float acc[D / 8][4] = {};
};

// One tile for one warp: its 16 keys' scores against q (a fragments qa: a0 and a2 of each k-step), the online
// softmax (keys at or past `live` count as -inf), and the weighted sum of V into the state.
template <typename T, int D>
__device__ __forceinline__ void warp_tile(const unsigned char* kt, const uint32_t (&qa)[D / 16][2], float scale_log2,
                                          int live, WarpState<D>& st) {
  using L = Tile<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane % 4, mat = lane / 8;
  const int key0 = warp * 16;
  float sc[2][4] = {};
#pragma unroll
  for (int ks = 0; ks < L::kKSteps; ++ks) {  // tiles: keys 0-7 and 8-15, dims 16 ks + 0-7 and + 8-15
    uint32_t kb[4];
    const int r = key0 + (mat / 2) * 8 + lane % 8, ch = ks * 2 + mat % 2;
    ldmatrix_x4<false>(kb, smem_u32(kt + r * L::kRowBytes + swizzled(r, ch)));
    const uint32_t a[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
    mma_step<T>(sc[0], a, kb[0], kb[1]);
    mma_step<T>(sc[1], a, kb[2], kb[3]);
  }
  float x[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = key0 + (i / 2) * 8 + quad * 2 + i % 2;
    x[i] = key < live ? sc[i / 2][i % 2] * scale_log2 : -INFINITY;
  }
  float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(st.m, mx);
  const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no live key yet: weights 0, nothing to rescale
  const float alpha = fast_exp2(st.m - m_use);
  float w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = fast_exp2(x[i] - m_use);
  st.l = st.l * alpha + ((w[0] + w[1]) + (w[2] + w[3]));
  st.m = m_new;
  const uint32_t pa[4] = {pack2(from_float<T>(w[0]), from_float<T>(w[1])), 0u,
                          pack2(from_float<T>(w[2]), from_float<T>(w[3])), 0u};
  const unsigned char* vt = kt + L::kBytes;
#pragma unroll
  for (int n = 0; n < L::kNTiles; n += 2) {  // tiles: keys 0-7 and 8-15, dims 8 n + 0-7 and 8 (n + 1) + 0-7
    st.acc[n][0] *= alpha;
    st.acc[n][1] *= alpha;
    st.acc[n + 1][0] *= alpha;
    st.acc[n + 1][1] *= alpha;
    uint32_t vb[4];
    const int r = key0 + (mat % 2) * 8 + lane % 8, ch = n + mat / 2;
    ldmatrix_x4<true>(vb, smem_u32(vt + r * L::kRowBytes + swizzled(r, ch)));
    mma_step<T>(st.acc[n], pa, vb[0], vb[1]);
    mma_step<T>(st.acc[n + 1], pa, vb[2], vb[3]);
  }
}

template <typename T, int D, int G, int S>
__global__ void __launch_bounds__(kThreads)
    decode_staged_kernel(DecodeParams p, const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                         const int* __restrict__ lq, const int* __restrict__ lkv, const int* __restrict__ tk,
                         const int* __restrict__ tv, float* __restrict__ part, T* __restrict__ o) {
  using L = StagedLayout<D, G, S>;
  extern __shared__ __align__(128) unsigned char smem[];
  int* s_tk = reinterpret_cast<int*>(smem + L::kTables);
  int* s_tv = s_tk + kTablesCap;
  const int split = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
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
  // q as the a operand: row `row` is query head head * G + row (rows G.. zero); a0 and a2 of each k-step.
  uint32_t qa[Tile<D>::kKSteps][2];
  const T* qrow = q + (static_cast<int64_t>(b) * p.h + head * G + (row < G ? row : 0)) * D + quad * 2;
#pragma unroll
  for (int ks = 0; ks < Tile<D>::kKSteps; ++ks) {
    qa[ks][0] = row < G ? pack2(qrow[ks * 16], qrow[ks * 16 + 1]) : 0u;
    qa[ks][1] = row < G ? pack2(qrow[ks * 16 + 8], qrow[ks * 16 + 9]) : 0u;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < S - 1; ++t) {
    if (t < tiles)
      load_tile<T, D>(p, kc, vc, tabk, tabv, first_page, head, begin, end, t, smem + t * 2 * Tile<D>::kBytes);
    cp_async_commit();
  }
  WarpState<D> st;
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile t is in; every warp is past tile t-1, whose stage the next load takes
    const int next = t + S - 1;
    if (next < tiles)
      load_tile<T, D>(p, kc, vc, tabk, tabv, first_page, head, begin, end, next,
                      smem + (next % S) * 2 * Tile<D>::kBytes);
    cp_async_commit();
    warp_tile<T, D>(smem + (t % S) * 2 * Tile<D>::kBytes, qa, p.scale_log2, end - (begin + t * kTileKeys), st);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: each warp's state goes there
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 1);
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 2);
  float* mine = reinterpret_cast<float*>(smem) + warp * L::kWarpFloats;  // max [G], sum [G], o [G][D]
  if (row < G) {
    if (quad == 0) {
      mine[row] = st.m;
      mine[G + row] = st.l;
    }
#pragma unroll
    for (int n = 0; n < Tile<D>::kNTiles; ++n) {
      mine[2 * G + row * D + n * 8 + quad * 2] = st.acc[n][0];
      mine[2 * G + row * D + n * 8 + quad * 2 + 1] = st.acc[n][1];
    }
  }
  __syncthreads();
  const float* all = reinterpret_cast<const float*>(smem);
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, all[w * L::kWarpFloats + g]);
    float sum = 0.f, den = 0.f;
    if (mx != -INFINITY)
      for (int w = 0; w < kWarps; ++w) {
        const float* x = all + w * L::kWarpFloats;
        const float c = fast_exp2(x[g] - mx);  // a warp without a live key: exp2(-inf) = 0
        sum = fmaf(c, x[2 * G + g * D + d], sum);
        den = fmaf(c, x[G + g], den);
      }
    if (p.splits == 1) {
      o[(static_cast<int64_t>(b) * p.h + head * G + g) * D + d] = from_float<T>(den > 0.f ? sum / den : 0.f);
      continue;
    }
    float* out = decode_partial(p, part, b, head * G + g, split, D);
    out[d] = sum;
    if (d == 0) {
      out[D] = mx;
      out[D + 1] = den;
    }
  }
}

template <typename T, int D, int G, int S>
Status launch_staged(const PagedDecodeProblem& pr, const DecodeParams& p, const PagedDecodeBuffers& x, float* part,
                     cudaStream_t stream) {
  using L = StagedLayout<D, G, S>;
  const auto kernel = decode_staged_kernel<T, D, G, S>;
  static DynamicSmemGrant grant;  // the shared memory past 48 KiB, once a device
  KILN_RETURN_IF_ERROR(grant.allow(reinterpret_cast<const void*>(kernel), L::kBytes, "the paged decode"));
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.hk), static_cast<unsigned>(p.b));
  kernel<<<grid, kThreads, L::kBytes, stream>>>(
      p, static_cast<const T*>(x.q), static_cast<const T*>(x.k), static_cast<const T*>(x.v),
      static_cast<const int*>(x.seq_len_q), static_cast<const int*>(x.seq_len_kv), static_cast<const int*>(x.table_k),
      static_cast<const int*>(x.table_v), part, static_cast<T*>(x.o));
  if (p.splits > 1)
    decode_merge_kernel<T, D><<<static_cast<unsigned>(pr.b * pr.h), D, 0, stream>>>(p, part, static_cast<T*>(x.o));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    grant.forget();
    return internal_error(std::string("paged decode launch: ") + cudaGetErrorString(err));
  }
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

Status launch_paged_decode_staged(const PagedDecodeProblem& pr, const DecodeParams& params, int stages,
                                  const PagedDecodeBuffers& x, void* workspace, cudaStream_t stream) {
  DecodeParams p = params;  // q is read element by element: only k and v need 16-byte alignment for cp.async
  p.aligned = reinterpret_cast<uintptr_t>(x.k) % 16 == 0 && reinterpret_cast<uintptr_t>(x.v) % 16 == 0;
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
