// Kiln's own kernels as a third source of engine configurations, for graphs cuDNN runs badly or not at all:
//   knl1  the AMAX of a whole tensor (a lone reduce_amax over every axis), which the FP8 recipe's and matmul+AMAX's
//         unfused chains need after cuBLASLt's GEMM (issue 37: cuDNN 9.19 offers no configuration of it at 8192x8192
//         that launches, bench/results/h100/fp8-parts);
//   knl2  a lone layer_norm or rms_norm (inference), one pass over x held in registers: cuDNN's norm engines run at
//         about 90% of the copy bandwidth where torch.compile's reach 98% (issue 37), and they are runtime-compiled,
//         so a stored one costs a compile at start; Kiln's is compiled into the library;
//   knl3  a skinny GEMM (at most 16 rows of a; fp16, bf16, or fp8_e4m3 with b column-major) with its bias,
//         activation (ReLU, GELU erf or tanh) and the AMAX of its result: the decode-sized GEMM whose time is reading
//         b once, which cuDNN's and cuBLASLt's tiles run at about 70% of the copy bandwidth (issue 37:
//         matmul+bias+GELU and matmul+AMAX 16x8192x8192; the FP8 recipe's GEMM+AMAX segment, where cuDNN's FP8
//         engine reads b at 1.84 TB/s on the H100);
//   knl4  decode attention over paged K/V caches (one query a head, a padding mask's lengths, fp16 or bf16), each
//         entry's keys split over CTAs of `chunk` keys (flash-decoding), then the splits merged: cuDNN's paged decode
//         runs a CTA per entry and key head, which leaves most of an H100 idle at small batches (issue 36: 0.96-0.99x
//         PyTorch's cuDNN on dense tensors at batch 8-256, bench/results/h100/attn-decode-d2); the keys in registers
//         on the CUDA cores, or staged through shared memory with the products on the tensor cores (within 0-7% of
//         cuDNN's paged decode on an H100, bench/results/h100/session-2026-12-07h).
// LoweredGraph offers them as HeuristicMode::kKiln's candidates ("knl1_blocks=4_threads=256": kKilnKernelEngineBase),
// and they are tuned, checked against the reference, stored and served like any other configuration. Only for
// src/lower/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "lower/alt_plan.h"

namespace kiln::lower_detail {

// The AMAX of a whole tensor: max |x| over `count` densely packed elements of `dtype`, into one fp32.
struct AmaxProblem {
  int input = -1, output = -1;  // Kiln tensors
  DataType dtype = DataType::kFloat32;
  int64_t count = 0;
};

// `graph` (validated, static shapes) as that problem: one reduce_amax node over every axis of a dense (row-major,
// no gaps) graph input of fp32, fp16 or bf16, into an fp32 graph output. nullopt with the reason otherwise.
std::optional<AmaxProblem> match_whole_amax(const Graph& graph, std::string* why_not);

// The kernel's launch, in amax_kernel.cu: `out` is set to max |x| (NaN where any element is NaN, as torch.amax), on
// `stream`, `blocks` blocks of `threads` threads (a grid-stride loop; one atomic per block).
Status launch_whole_amax(const void* input, DataType dtype, int64_t count, float* out, int blocks, int threads,
                         cudaStream_t stream);

// A layer_norm (y = (x - mean) rstd scale + bias) or rms_norm (y = x rstd scale) over every axis but the first, with
// rstd = 1/sqrt(mean of (x - mean)^2, or of x^2, + epsilon), in fp32: `rows` rows of `hidden` densely packed
// elements. x is fp32, fp16 or bf16; y is x's dtype or fp32; scale (and bias) x's dtype or fp32.
struct NormProblem {
  int x = -1, scale = -1, bias = -1, y = -1;  // Kiln tensors (bias -1: rms_norm)
  DataType x_dtype = DataType::kFloat32, y_dtype = DataType::kFloat32, param_dtype = DataType::kFloat32;
  int64_t rows = 0, hidden = 0;
  float epsilon = 1e-5f;
  bool layer() const { return bias >= 0; }
};

// `graph` (validated, static shapes) as that problem: one layer_norm or rms_norm node whose x, scale and bias are
// dense graph inputs and whose y is a dense graph output, in the dtypes above. nullopt with the reason otherwise.
std::optional<NormProblem> match_norm(const Graph& graph, std::string* why_not);

// How the norm kernel runs (vectorized): CTAs of `threads` threads, `group` threads a row (32 to `threads`, a power of two),
// each holding `per_thread` 16-byte chunks of x (1, 2, 4 or 8); `vectorized` false: the hidden size is not a whole
// number of chunks, and a plain loop over the row runs (also where a caller's buffer is not 16-byte aligned).
struct NormLaunch {
  int threads = 256, group = 256, per_thread = 1;
  bool vectorized = true;
  // true (knl2's persist=1): only the CTAs the device holds at once, each stepping over the rows and loading its
  // next while it reduces and writes the current; false: a CTA for each `threads / group` rows.
  bool persist = false;
};
// Elements of `x_dtype` in one 16-byte chunk.
inline int64_t norm_chunk_elements(DataType x_dtype) { return 16 / static_cast<int64_t>(dtype_size(x_dtype)); }
// The kernel's launch, in norm_kernel.cu; `bias` null for rms_norm.
Status launch_norm(const NormProblem& p, const NormLaunch& l, const void* x, const void* scale, const void* bias,
                   void* y, cudaStream_t stream);

// y = act(a b + bias): a [m, k] (m at most 16) row-major and dense; b [k, n] dense, row-major or column-major (b^T
// [n, k] row-major, as a PyTorch Linear holds its weight); a and b both fp16, both bf16, or both fp8_e4m3 (fp8 only
// with b column-major: the FP8 tensor cores' layout); bias one value per column (fp32, fp16 or bf16) or none; y [m, n]
// row-major and dense, fp32, fp16 or bf16; fp32 accumulation.
struct SkinnyGemmProblem {
  int a = -1, b = -1, bias = -1, y = -1;  // Kiln tensors (bias -1: none)
  int amax = -1;                          // an fp32 [1, ..] graph output, max |y| (a reduce_amax of y); -1: none
  DataType dtype = DataType::kBFloat16, bias_dtype = DataType::kFloat32, y_dtype = DataType::kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  bool b_cols = false;  // b column-major
  enum class Act { kNone, kRelu, kGeluErf, kGeluTanh } act = Act::kNone;
};
// Elements of K a stage of 128 bytes holds (64 fp16/bf16, 128 fp8): k is a multiple of it (the match's floor).
inline int64_t skinny_k_step(const SkinnyGemmProblem& p) { return 128 / static_cast<int64_t>(dtype_size(p.dtype)); }

// A launch form of the skinny GEMM (knl3[_kbytes=512]_split=S_stages=P_tile=T): K split over `split` CTAs of a cluster
// (1, 2, 4 or 8); CTAs of `tile` columns; `stages` stages in flight, each holding `kbytes` bytes of K per row. The
// forms: tile 64 or 128 with 4 or 8 stages of 128 bytes (warps of 16 columns); for a column-major b, also tile 64
// with 4 stages of 512 bytes (each row of b^T read 512 bytes at a time).
struct SkinnyForm {
  int split = 1, tile = 128, stages = 4, kbytes = 128;
};
// Elements of K a stage of form `f` holds for `p`; 0 where `f` is no form of the kernel for p's layout.
inline int64_t skinny_stage_k(const SkinnyGemmProblem& p, const SkinnyForm& f) {
  const int64_t e = static_cast<int64_t>(dtype_size(p.dtype));
  if (f.kbytes == 512) return p.b_cols && f.tile == 64 && f.stages == 4 ? 512 / e : 0;
  const bool standard = (f.tile == 64 || f.tile == 128) && (f.stages == 4 || f.stages == 8) && f.kbytes == 128;
  return standard ? 128 / e : 0;
}
// Whether form `f` runs `p`: a form of the kernel for p's layout whose tile divides n and whose split times stage
// divides k. The candidates, the build and the launch all ask this.
inline bool skinny_form_fits(const SkinnyGemmProblem& p, const SkinnyForm& f) {
  const int64_t step = skinny_stage_k(p, f);
  return step > 0 && p.n % f.tile == 0 && p.k % (f.split * step) == 0;
}

// `graph` as that problem: one matmul, then optionally a bias_add and then one of relu, gelu_erf, gelu_tanh (the
// chain cuBLASLt's match walks, cublaslt_plan.h), and optionally a reduce_amax of the result over every axis into an
// fp32 graph output (matmul+AMAX, for FP8 scaling), with the shapes and dtypes above. nullopt with the reason
// otherwise.
std::optional<SkinnyGemmProblem> match_skinny_gemm(const Graph& graph, std::string* why_not);

// The kernel's launch, in skinny_gemm_kernel.cu, in form `f`: n a multiple of its tile, k of its split times
// skinny_stage_k(p, f); InvalidArgument before any device call otherwise. a and b not 16-byte aligned run a plain
// loop.
Status launch_skinny_gemm(const SkinnyGemmProblem& p, const SkinnyForm& f, const void* a, const void* b,
                          const void* bias, void* y, float* amax, cudaStream_t stream);

// o = softmax(scale q.k^T) v for one query a head (decode) over paged caches: q [b, h, 1, d] and o dense row-major;
// the caches [blocks, hk, block_size, d] dense, read through page tables int32 [b, 1, pages, 1] (k's and v's own);
// each entry's keys its seq_len_kv (clamped to pages * block_size), none where its seq_len_q is 0 (o then 0, as a
// padded row); no bias, statistics or band but causal bottom-right (which, with one query, is every key); fp16 or
// bf16 throughout; d 64 or 128, h / hk 1, 2, 4 or 8.
struct PagedDecodeProblem {
  int q = -1, k = -1, v = -1, seq_len_q = -1, seq_len_kv = -1, table_k = -1, table_v = -1, o = -1;  // Kiln tensors
  DataType dtype = DataType::kBFloat16;
  int64_t b = 0, h = 0, hk = 0, d = 0, block_size = 0, pages = 0, blocks = 0;
  float scale = 0;
  int64_t keys() const { return pages * block_size; }
};
// knl4_chunk=C: each CTA reads at most C keys of one entry and key head; ceil(pages * block_size / C) splits.
inline int64_t paged_decode_splits(const PagedDecodeProblem& p, int64_t chunk) {
  return (p.keys() + chunk - 1) / chunk;
}
// The workspace of knl4_chunk=C (stages 0) or knl4_chunk=C_stages=S: each split's partial output, running max and
// sum (fp32) for every query head; none where the staged form's one split writes o itself.
inline int64_t paged_decode_workspace(const PagedDecodeProblem& p, int64_t chunk, int64_t stages) {
  const int64_t splits = paged_decode_splits(p, chunk);
  return stages > 0 && splits == 1 ? 0 : p.b * p.h * splits * (p.d + 2) * 4;
}
// The staged form's shared memory at head dim `d` and `stages` tiles: the stages of 64 keys of K and V, then the
// CTA's staged page-table entries (kPagedDecodeTablesCap of each table; a CTA over more pages reads the tables).
constexpr int64_t kPagedDecodeTablesCap = 512;
constexpr int64_t paged_decode_staged_smem(int64_t d, int64_t stages) {
  return stages * 2 * 64 * d * 2 + 2 * kPagedDecodeTablesCap * 4;
}
std::optional<PagedDecodeProblem> match_paged_decode(const Graph& graph, std::string* why_not);
// The kernels' launch, in decode_kernel.cu: the splits, then their merge into o (none where one split holds every
// key and the form writes o itself). `stages` 0: the keys in registers (knl4_chunk=C); 2 or 3: staged through shared
// memory with that many tiles in flight (knl4_chunk=C_stages=S, decode_staged_kernel.cu). The pointers as execute()
// has them.
struct PagedDecodeBuffers {
  const void *q, *k, *v, *seq_len_q, *seq_len_kv, *table_k, *table_v;
  void* o;
};
Status launch_paged_decode(const PagedDecodeProblem& p, int64_t chunk, int stages, const PagedDecodeBuffers& x,
                           void* workspace, cudaStream_t stream);

// Any of Kiln's kernels' problems.
using KernelProblem = std::variant<AmaxProblem, NormProblem, SkinnyGemmProblem, PagedDecodeProblem>;
// The first of Kiln's kernels that runs `graph`; nullopt with each kernel's reason otherwise.
std::optional<KernelProblem> match_kiln_kernel(const Graph& graph, std::string* why_not);

class KernelPlan : public AltPlan {
 public:
  // The launch configurations offered on the current device. AMAX: 256 or 512 threads, 2, 4 or 8 blocks per SM.
  // Norm: 128, 256 or 512 threads, every group size from 32 up whose rows fit 1-8 chunks a thread. Skinny GEMM:
  // tiles of 64 and 128 columns, K split 1, 2, 4 or 8 ways where the shape divides, 4 or 8 stages in flight. Paged
  // decode: chunks of 64 to 4096 keys (powers of two), up to the first that holds every key, each in registers and
  // staged through shared memory with 2 and 3 tiles in flight.
  static StatusOr<std::vector<EngineConfig>> candidates(const KernelProblem& p);
  // Exactly `config`: NotSupported for a kernel or knob Kiln does not have, or one that does not run `p`.
  static StatusOr<KernelPlan> build(const KernelProblem& p, const EngineConfig& config);
  // Bytes serialize() wrote ("KILNKRN1\n" then the identity): any Kiln that has the kernel runs it.
  static StatusOr<KernelPlan> deserialize(const KernelProblem& p, const std::vector<uint8_t>& bytes);
  static bool is_blob(const std::vector<uint8_t>& bytes);

  std::vector<uint8_t> serialize() const override;
  const EngineConfig& config() const override { return config_; }
  int64_t workspace_size() const override { return workspace_; }
  Status execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const override;

 private:
  Status build_amax(const AmaxProblem& p);
  Status build_norm(const NormProblem& p);
  Status build_skinny(const SkinnyGemmProblem& p);
  Status build_decode(const PagedDecodeProblem& p);

  KernelProblem problem_;
  EngineConfig config_;
  int blocks_ = 0, threads_ = 0;  // knl1
  NormLaunch norm_;               // knl2
  SkinnyForm skinny_;             // knl3
  int64_t chunk_ = 0;             // knl4
  int stages_ = 0;                // knl4: 0 the keys in registers, 2 or 3 staged
  int64_t workspace_ = 0;
};

}  // namespace kiln::lower_detail
