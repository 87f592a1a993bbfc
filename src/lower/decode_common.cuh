// What the paged decode's two forms share (decode_kernel.cu: keys in registers; decode_staged_kernel.cu: keys staged
// in shared memory): the launch's parameters, an entry's keys and a key's cache row as the references read them, the
// rows' 16-byte loads, and the second launch that merges each query head's splits into o. Device code only; for
// src/lower/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/core/status.h"
#include "lower/kernel_elements.cuh"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {

struct DecodeParams {
  int b, h, hk, block_size, pages, blocks, splits, chunk;
  int block_shift;   // log2(block_size) where it is a power of two, else -1 (a division)
  float scale_log2;  // attn_scale * log2(e): the scores in base 2
  bool aligned;      // q, k and v 16-byte aligned (the staged form: k and v): rows read 16 bytes at a time
};

// The parameters of `pr` split in chunks of `chunk` keys; `aligned` from the buffers.
DecodeParams decode_params(const PagedDecodeProblem& pr, int64_t chunk, const PagedDecodeBuffers& x);

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Sixteen bytes of a row from `p`: one load when aligned, else element by element.
template <typename T>
__device__ __forceinline__ uint4 load16(const T* p, bool aligned) {
  if (aligned) return __ldg(reinterpret_cast<const uint4*>(p));
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = p[i];
  return raw;
}

// The eight elements of `raw` as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_float(e[i]);
}

// Entry b's keys: its seq_len_kv clamped to the caches' extent, none where its seq_len_q is 0 (a padded query).
__device__ __forceinline__ int entry_keys(const DecodeParams& p, const int* lq, const int* lkv, int b) {
  const int keys = p.pages * p.block_size;
  const int n = lkv[b];
  return lq[b] <= 0 ? 0 : (n < 0 ? 0 : (n > keys ? keys : n));
}

// Where key j (of key head `head`) starts in a cache through `table` (indexed from `first_page`), in rows of D
// elements; the table's block clamped to the cache, as the references read it.
__device__ __forceinline__ int64_t key_row(const DecodeParams& p, const int* table, int first_page, int head, int j) {
  const int page = p.block_shift >= 0 ? j >> p.block_shift : j / p.block_size;
  const int within = j - page * p.block_size;
  int block = table[page - first_page];
  block = block < 0 ? 0 : (block >= p.blocks ? p.blocks - 1 : block);
  return (static_cast<int64_t>(block) * p.hk + head) * p.block_size + within;
}

// One split's partial for a query head in the workspace: D weighted sums, then the running max and the sum.
__device__ __forceinline__ float* decode_partial(const DecodeParams& p, float* part, int b, int qhead, int split,
                                                 int d) {
  return part + ((static_cast<int64_t>(b) * p.h + qhead) * p.splits + split) * (d + 2);
}

// o for one query head a CTA of D threads: its splits' partials merged (0 where no split saw a key).
template <typename T, int D>
__global__ void decode_merge_kernel(DecodeParams p, const float* __restrict__ part, T* __restrict__ o) {
  const int64_t row = blockIdx.x;
  const int d = threadIdx.x;
  const float* in = part + row * p.splits * (D + 2);
  float mx = -INFINITY;
  for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, in[s * (D + 2) + D]);
  float sum = 0.f, den = 0.f;
  if (mx != -INFINITY)
    for (int s = 0; s < p.splits; ++s) {
      const float* x = in + s * (D + 2);
      const float c = fast_exp2(x[D] - mx);
      sum = fmaf(c, x[d], sum);
      den = fmaf(c, x[D + 1], den);
    }
  o[row * D + d] = from_float<T>(den > 0.f ? sum / den : 0.f);
}

// The staged form's launch (decode_staged_kernel.cu) with `stages` 2 or 3 (tiles of shared memory, all but one in
// flight while one is read); the merge launch after it where there is more than one split.
Status launch_paged_decode_staged(const PagedDecodeProblem& pr, const DecodeParams& p, int stages,
                                  const PagedDecodeBuffers& x, void* workspace, cudaStream_t stream);

}  // namespace kiln::lower_detail
