// launch_skinny_gemm (src/lower/kernel_plan.h): y = act(a b + bias) for a of at most 16 rows, the decode-sized GEMM
// whose time is reading b once. A CTA owns `tile` columns of y and a slice of K: b's slice streams through shared
// memory in stages (cp.async, four or eight in flight), a's 16 rows beside it (rows past M zero), and each warp
// multiplies its 16 (or, in the wide form, 64) columns with the tensor cores (fp32 accumulators; mma.sync m16n8k16
// for fp16 and bf16, m16n8k32 for fp8_e4m3). b is read as it lies: row-major [k, n] (fp16, bf16; ldmatrix.trans
// turns its tiles into the column-major operand) or column-major, b^T [n, k] row-major as a PyTorch Linear's weight
// (any of the three; plain ldmatrix). The forms (Cfg below, SkinnyForm in kernel_plan.h): stages of 128 bytes of K
// with warps of 16 columns; for a row-major b, 32 rows of K a stage and warps of 64 columns (b read 1 KiB a row at a
// time); for a column-major b, 512 bytes of K a stage. With `split` > 1 the CTAs of one tile form a cluster over K:
// each leaves its 16 x tile partial sums in shared memory, and each CTA of the cluster adds one share of the tile's
// elements across the cluster (distributed shared memory, in rank order: the same sums every run) and writes them
// through the epilogue. No workspace, one launch. With an AMAX output, the largest |y| as stored (after the
// activation and the rounding) is raised by one atomic a warp, after the output is cleared on the stream.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <atomic>
#include <string>
#include <type_traits>

#include "lower/cp_async.cuh"
#include "lower/dynamic_smem.h"
#include "lower/kernel_elements.cuh"
#include "lower/mma.cuh"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

namespace cg = cooperative_groups;

// A CTA's layout: kWarps warps of kWarpN columns each (the tile), kStages stages of kStageK elements of K in flight.
// A stage of b is its slice of K for the tile's columns: kStageK rows of kTile elements (b row-major, 16-bit only) or
// kTile rows of kStageK elements (b column-major: rows of b^T). a's 16 rows beside it, each padded to 128 bytes at
// least. Every row in shared memory is a whole number of 16-byte chunks, at least 8, XOR-swizzled by row.
template <typename T, int Warps, int WarpN, int StageK, int Stages, bool BCols>
struct Cfg {
  static constexpr int kWarps = Warps, kWarpN = WarpN, kStageK = StageK, kStages = Stages;
  static constexpr bool kBCols = BCols;
  static constexpr int kE = static_cast<int>(sizeof(T));
  static constexpr int kTile = kWarps * kWarpN;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKBytes = kStageK * kE;                 // bytes of K a stage holds
  static constexpr int kARow = kKBytes < 128 ? 128 : kKBytes;  // a row of a in shared memory
  static constexpr int kBRow = kBCols ? kKBytes : kTile * kE;  // a row of b's stage
  static constexpr int kBRows = kBCols ? kTile : kStageK;
  static constexpr int kBBytes = kBRows * kBRow;
  static constexpr int kABytes = 16 * kARow;
  static constexpr int kStageBytes = kBBytes + kABytes;
  static constexpr int kSmem = kStages * kStageBytes;
  static constexpr int kNTiles = kWarpN / 8;  // the n8 tiles of a warp's accumulators
  static_assert(kKBytes % 32 == 0 && kBRow % 128 == 0 && kWarpN % 16 == 0, "whole k-steps and 8-chunk rows");
  static_assert(kBCols || kE == 2, "a row-major b is 16-bit (ldmatrix.trans)");
  static_assert(kSmem <= 227 * 1024 && 16 * kTile * 4 <= kSmem, "the stages (and the partial sums) fit an SM");
};

__device__ __forceinline__ float load_as_float(const void* p, int64_t i, DataType t) {
  switch (t) {
    case DataType::kBFloat16: return to_float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DataType::kFloat16: return to_float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
// Element i of `p` (a T) <- v rounded; the value stored, as a float.
template <typename T>
__device__ __forceinline__ float store_rounded(void* p, int64_t i, float v) {
  const T r = from_float<T>(v);
  static_cast<T*>(p)[i] = r;
  return to_float(r);
}
// Stores v as y's dtype; the value stored, as a float.
__device__ __forceinline__ float store_float(void* p, int64_t i, float v, DataType t) {
  switch (t) {
    case DataType::kBFloat16: return store_rounded<__nv_bfloat16>(p, i, v);
    case DataType::kFloat16: return store_rounded<__half>(p, i, v);
    default: return store_rounded<float>(p, i, v);
  }
}

struct Epilogue {
  const void* bias;  // null: none
  DataType bias_dtype, y_dtype;
  SkinnyGemmProblem::Act act;
  uint32_t* amax;  // null: none; else max |y| as stored, as float bits (cleared before the launch)

  // The warp's largest of `bits` into amax. Every lane of the warp calls it.
  __device__ __forceinline__ void reduce_amax(uint32_t bits) const {
    if (!amax) return;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, off));
    if (threadIdx.x % 32 == 0) atomicMax(amax, bits);
  }

  __device__ __forceinline__ float apply(float v, int64_t col) const {
    if (bias) v += load_as_float(bias, col, bias_dtype);
    switch (act) {
      case SkinnyGemmProblem::Act::kRelu: return fmaxf(v, 0.0f);
      case SkinnyGemmProblem::Act::kGeluErf: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
      case SkinnyGemmProblem::Act::kGeluTanh:
        return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
      default: return v;
    }
  }
};

// Stage `slot` <- K [k, k + kStageK) of b's columns [n0, n0 + tile) and of a's rows.
template <typename T, typename C>
__device__ __forceinline__ void load_stage(char* smem, int slot, const T* a, const T* b, int m, int64_t n,
                                           int64_t k_dim, int64_t n0, int64_t k) {
  constexpr int64_t kE = C::kE;
  constexpr int kBChunks = C::kBRow / 16, kAChunks = C::kKBytes / 16;  // chunks in a row of b's stage, of a's
  char* bs = smem + slot * C::kStageBytes;
  char* as = bs + C::kBBytes;
  const char* ab = reinterpret_cast<const char*>(a);
  const char* bb = reinterpret_cast<const char*>(b);
  for (int i = threadIdx.x; i < C::kBRows * kBChunks; i += C::kThreads) {
    const int r = i / kBChunks, c = i % kBChunks;
    const char* src = C::kBCols ? bb + ((n0 + r) * k_dim + k) * kE + c * 16  // row n0 + r of b^T
                                : bb + ((k + r) * n + n0) * kE + c * 16;     // row k + r of b
    cp_async16(smem_u32(bs + r * C::kBRow + swizzled(r, c)), src, 16);
  }
  for (int i = threadIdx.x; i < 16 * kAChunks; i += C::kThreads) {
    const int r = i / kAChunks, c = i % kAChunks;
    const bool live = r < m;
    cp_async16(smem_u32(as + r * C::kARow + swizzled(r, c)), live ? ab + (r * k_dim + k) * kE + c * 16 : ab,
               live ? 16 : 0);
  }
}

// Warp `warp`'s kWarpN columns of the stage in `slot` into its accumulators (kNTiles n8 tiles), in steps of 32 bytes
// of K (m16n8k16 for 16-bit, m16n8k32 for fp8).
template <typename T, typename C>
__device__ __forceinline__ void compute_stage(const char* smem, int slot, int warp, int lane,
                                              float (&acc)[C::kNTiles][4]) {
  const char* bs = smem + slot * C::kStageBytes;
  const char* as = bs + C::kBBytes;
  const int q = lane / 8, r8 = lane % 8;
#pragma unroll
  for (int ks = 0; ks < C::kKBytes / 32; ++ks) {
    uint32_t af[4];
    {  // a: rows (q & 1) * 8 + r8, chunk 2 ks + (q >> 1)
      const int row = (q & 1) * 8 + r8, chunk = ks * 2 + (q >> 1);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(af[0]), "=r"(af[1]), "=r"(af[2]), "=r"(af[3])
                   : "r"(smem_u32(as + row * C::kARow + swizzled(row, chunk))));
    }
#pragma unroll
    for (int j = 0; j < C::kWarpN / 16; ++j) {  // the warp's j-th 16 columns
      const int col16 = warp * C::kWarpN + j * 16;
      uint32_t bf[4];
      if constexpr (C::kBCols) {  // b^T: rows col16 + (q >> 1) * 8 + r8, chunk 2 ks + (q & 1)
        const int row = col16 + (q >> 1) * 8 + r8, chunk = ks * 2 + (q & 1);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(bf[0]), "=r"(bf[1]), "=r"(bf[2]), "=r"(bf[3])
                     : "r"(smem_u32(bs + row * C::kBRow + swizzled(row, chunk))));
      } else {  // b: k rows 16 ks + (q & 1) * 8 + r8, column chunk col16 / 8 + (q >> 1), transposed
        const int row = ks * 16 + (q & 1) * 8 + r8, chunk = col16 / 8 + (q >> 1);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(bf[0]), "=r"(bf[1]), "=r"(bf[2]), "=r"(bf[3])
                     : "r"(smem_u32(bs + row * C::kBRow + swizzled(row, chunk))));
      }
      mma_step<T>(acc[2 * j], af, bf[0], bf[1]);
      mma_step<T>(acc[2 * j + 1], af, bf[2], bf[3]);
    }
  }
}

// Grid (split, n / tile); with split > 1 launched as clusters of (split, 1, 1).
template <typename T, typename C>
__global__ void __launch_bounds__(C::kThreads)
    skinny_gemm_kernel(const T* __restrict__ a, const T* __restrict__ b, void* __restrict__ y, int m, int64_t n,
                       int64_t k, int split, Epilogue ep) {
  constexpr int kTile = C::kTile, kStages = C::kStages;
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t k_len = k / split, k_begin = blockIdx.x * k_len;
  const int tiles = static_cast<int>(k_len / C::kStageK);
  float acc[C::kNTiles][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_stage<T, C>(smem, s, a, b, m, n, k, n0, k_begin + int64_t{s} * C::kStageK);
    cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t has landed for every thread, and every warp is done with tile t - 1's slot
    const int next = t + kStages - 1;
    if (next < tiles) load_stage<T, C>(smem, next % kStages, a, b, m, n, k, n0, k_begin + int64_t{next} * C::kStageK);
    cp_async_commit();
    compute_stage<T, C>(smem, t % kStages, warp, lane, acc);
  }
  cp_async_wait<0>();
  __syncthreads();
  // The accumulators: rows lane / 4 and lane / 4 + 8, columns kWarpN warp + 8 j + 2 (lane % 4) + {0, 1}.
  const int row0 = lane / 4, col0 = warp * C::kWarpN + (lane % 4) * 2;
  uint32_t top = 0;  // max |y| of what this thread stored, as bits
  if (split == 1) {
#pragma unroll
    for (int j = 0; j < C::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + (e / 2) * 8;
        const int64_t col = n0 + col0 + j * 8 + (e % 2);
        if (row < m) top = max(top, abs_bits(store_float(y, row * n + col, ep.apply(acc[j][e], col), ep.y_dtype)));
      }
    ep.reduce_amax(top);
    return;
  }
  float* partial = reinterpret_cast<float*>(smem);  // [16][kTile], over the drained stages
#pragma unroll
  for (int j = 0; j < C::kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) partial[(row0 + (e / 2) * 8) * kTile + col0 + j * 8 + (e % 2)] = acc[j][e];
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int share = (m * kTile + split - 1) / split;  // elements of the m live rows this CTA adds up
  for (int i = rank * share + threadIdx.x; i < min((rank + 1) * share, m * kTile); i += C::kThreads) {
    float v = 0.0f;
    for (int q = 0; q < split; ++q) v += cluster.map_shared_rank(partial, q)[i];
    const int row = i / kTile;
    const int64_t col = n0 + i % kTile;
    top = max(top, abs_bits(store_float(y, row * n + col, ep.apply(v, col), ep.y_dtype)));
  }
  ep.reduce_amax(top);
  cluster.sync();  // no CTA leaves while another still reads its shared memory
}

// The plain path for buffers cp.async cannot read (not 16-byte aligned): a thread a column, every row; b row-major
// or (`b_cols`) column-major.
template <typename T>
__global__ void skinny_gemm_plain_kernel(const T* __restrict__ a, const T* __restrict__ b, void* __restrict__ y, int m,
                                         int64_t n, int64_t k, bool b_cols, Epilogue ep) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t top = 0;
  if (col < n) {
    float acc[16] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float bv = to_float(b_cols ? b[col * k + i] : b[i * n + col]);
      for (int r = 0; r < m; ++r) acc[r] += to_float(a[r * k + i]) * bv;
    }
    for (int r = 0; r < m; ++r)
      top = max(top, abs_bits(store_float(y, r * n + col, ep.apply(acc[r], col), ep.y_dtype)));
  }
  ep.reduce_amax(top);  // every lane, past the last column too
}

template <typename T, typename C>
Status launch_tiled(const SkinnyGemmProblem& p, int split, const T* a, const T* b, void* y, const Epilogue& ep,
                    cudaStream_t stream) {
  static DynamicSmemGrant grant;  // the shared memory past 48 KiB, once a device
  KILN_RETURN_IF_ERROR(
      grant.allow(reinterpret_cast<const void*>(skinny_gemm_kernel<T, C>), C::kSmem, "the skinny GEMM"));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(split), static_cast<unsigned>(p.n / C::kTile), 1);
  cfg.blockDim = dim3(C::kThreads, 1, 1);
  cfg.dynamicSmemBytes = C::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = static_cast<unsigned>(split);
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  cfg.attrs = cluster;
  cfg.numAttrs = split > 1 ? 1 : 0;
  const cudaError_t e =
      cudaLaunchKernelEx(&cfg, skinny_gemm_kernel<T, C>, a, b, y, static_cast<int>(p.m), p.n, p.k, split, ep);
  if (e != cudaSuccess) {
    grant.forget();
    return internal_error(std::string("launching the skinny GEMM: ") + cudaGetErrorString(e));
  }
  return Status::ok();
}

template <typename T, bool kBCols>
Status launch_typed(const SkinnyGemmProblem& p, const SkinnyForm& f, const void* a, const void* b, void* y,
                    const Epilogue& ep, cudaStream_t stream) {
  const auto* at = static_cast<const T*>(a);
  const auto* bt = static_cast<const T*>(b);
  const bool aligned = reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  if (!aligned) {
    skinny_gemm_plain_kernel<T><<<static_cast<unsigned>((p.n + 127) / 128), 128, 0, stream>>>(
        at, bt, y, static_cast<int>(p.m), p.n, p.k, kBCols, ep);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      return internal_error(std::string("launching the plain skinny GEMM: ") + cudaGetErrorString(e));
    return Status::ok();
  }
  constexpr int kStd = 128 / static_cast<int>(sizeof(T));  // elements of K in a stage of 128 bytes
  if constexpr (kBCols) {
    if (f.kbytes == 512)  // long rows of b^T: 4 warps of 16 columns, 512 bytes of K a stage
      return launch_tiled<T, Cfg<T, 4, 16, 512 / static_cast<int>(sizeof(T)), 4, true>>(p, f.split, at, bt, y, ep,
                                                                                        stream);
  }
  if (f.tile == 64)
    return f.stages == 8 ? launch_tiled<T, Cfg<T, 4, 16, kStd, 8, kBCols>>(p, f.split, at, bt, y, ep, stream)
                         : launch_tiled<T, Cfg<T, 4, 16, kStd, 4, kBCols>>(p, f.split, at, bt, y, ep, stream);
  return f.stages == 8 ? launch_tiled<T, Cfg<T, 8, 16, kStd, 8, kBCols>>(p, f.split, at, bt, y, ep, stream)
                       : launch_tiled<T, Cfg<T, 8, 16, kStd, 4, kBCols>>(p, f.split, at, bt, y, ep, stream);
}

}  // namespace

Status launch_skinny_gemm(const SkinnyGemmProblem& p, const SkinnyForm& f, const void* a, const void* b,
                          const void* bias, void* y, float* amax, cudaStream_t stream) {
  if (!skinny_form_fits(p, f) || f.split < 1 || f.split > 8 || p.m < 1 || p.m > 16 || p.n / f.tile > 65535)
    return invalid_argument("the skinny GEMM cannot run m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                            " k=" + std::to_string(p.k) + " in tiles of " + std::to_string(f.tile) + " split " +
                            std::to_string(f.split) + ", " + std::to_string(f.stages) + " stages of " +
                            std::to_string(f.kbytes) + " bytes of K");
  if (p.dtype == DataType::kFp8E4M3 && !p.b_cols)
    return invalid_argument("the skinny GEMM reads fp8 b column-major only (the FP8 tensor cores' B)");
  if (amax) {  // +0.0, the AMAX of nothing; the kernel only raises it
    const cudaError_t z = cudaMemsetAsync(amax, 0, sizeof(float), stream);
    if (z != cudaSuccess) return internal_error(std::string("clearing the GEMM's AMAX: ") + cudaGetErrorString(z));
  }
  const Epilogue ep{bias, p.bias_dtype, p.y_dtype, p.act, reinterpret_cast<uint32_t*>(amax)};
  if (p.dtype == DataType::kFp8E4M3) return launch_typed<__nv_fp8_e4m3, true>(p, f, a, b, y, ep, stream);
  if (p.dtype == DataType::kBFloat16)
    return p.b_cols ? launch_typed<__nv_bfloat16, true>(p, f, a, b, y, ep, stream)
                    : launch_typed<__nv_bfloat16, false>(p, f, a, b, y, ep, stream);
  if (p.dtype == DataType::kFloat16)
    return p.b_cols ? launch_typed<__half, true>(p, f, a, b, y, ep, stream)
                    : launch_typed<__half, false>(p, f, a, b, y, ep, stream);
  return invalid_argument(std::string("the skinny GEMM on ") + dtype_name(p.dtype));
}

}  // namespace kiln::lower_detail
