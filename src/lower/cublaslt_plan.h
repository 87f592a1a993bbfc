// cuBLASLt's matmul algorithms as a second source of engine configurations (issue 37: cuDNN 9.19's FP8 GEMM runs
// 1.18 ms where cuBLASLt's runs 0.82 at 8192^3 on the H100). Only for src/lower/: LoweredGraph offers them as the
// candidates of HeuristicMode::kCublasLt for a graph that is one matmul, optionally with the AMAX of its whole
// output (cuBLASLt's AMAX_D epilogue), builds one by identity ("blt66_tile=18_..."; kCublasLtEngineBase in
// kiln/core/engine_config.h), serializes, loads and executes it. Everything above the lower layer sees an ordinary
// engine configuration: the tuner times and checks it against the reference like any other, the store keeps it,
// the Planner serves it. No cuDNN Frontend here (this file compiles outside lower's frontend unit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "lower/alt_plan.h"

namespace kiln::lower_detail {

// One operand as cuBLASLt reads it: a column-major rows x cols matrix with leading dimension ld, transposed by the
// matmul (op T) or not (op N).
struct BltMatrix {
  int tensor = -1;  // the Kiln tensor
  DataType dtype = DataType::kFloat16;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;  // elements between batches; 0: one matrix for every batch (a broadcast operand)
  bool transposed = false;
};

// A graph cuBLASLt can run: D (m x n, column-major) = op(A) op(B), m, n, k cuBLASLt's. Kiln's y = a b, row-major,
// is D = y^T = b^T a^T: cuBLASLt's A is Kiln's b and its B is Kiln's a.
struct BltProblem {
  BltMatrix a, b, d;
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  // The epilogue, in cuBLASLt's order: + bias (one value per column of y: a graph input [.., N]), then ReLU.
  int bias_tensor = -1;
  DataType bias_dtype = DataType::kFloat32;
  enum class Activation { kNone, kRelu, kGeluErf, kGeluTanh } activation = Activation::kNone;
  // "m=8192 n=8192 k=8192 A fp8_e4m3 T B fp8_e4m3 N D bf16"; ", bias bf16, ReLU" with those.
  std::string describe() const;
};

// `graph` (validated, static shapes) as a cuBLASLt problem: one matmul node, then optionally a bias_add of a
// graph input [.., N] (every other extent 1, unit last stride), then optionally relu, each reading the one before
// and none of those in between a graph output. a and b graph inputs, the result y a graph output; ranks 2 or 3
// (batch broadcast as stride 0); fp32, fp16, bf16 or FP8 inputs with fp32 compute; y fp32, fp16 or bf16; each
// matrix with one unit stride. nullopt, with the first reason in `why_not`, otherwise.
std::optional<BltProblem> match_cublaslt(const Graph& graph, std::string* why_not);
// The same walk with gelu_erf and gelu_tanh also taken as the activation (cuBLASLt runs neither; Kiln's skinny GEMM,
// kernel_plan.h, does).
std::optional<BltProblem> match_gemm_chain(const Graph& graph, std::string* why_not);

// The cuBLASLt library this process loaded (cublasLtGetVersion(), e.g. 130100).
int64_t cublaslt_version();

// A built cuBLASLt plan: the problem's layouts, one algorithm and the cuBLASLt handle of the device it was built or
// loaded on, where it runs. Immutable once built; execute() may be called from many threads at once (each call
// makes its own matmul descriptor on the stack).
class BltPlan : public AltPlan {
 public:
  BltPlan();
  ~BltPlan() override;
  BltPlan(BltPlan&&) noexcept;
  BltPlan& operator=(BltPlan&&) noexcept;

  // The configurations cuBLASLt's heuristic offers for the problem on the current device, in its order, at most
  // `max_count`, each needing at most `max_workspace` bytes; empty (not an error) when it offers none.
  static StatusOr<std::vector<EngineConfig>> candidates(const BltProblem& p, int max_count, int64_t max_workspace);
  // Exactly `config` (one candidates() offered, or an identity from a record or a pin); NotSupported when
  // cuBLASLt cannot run it for this problem on this device.
  static StatusOr<BltPlan> build(const BltProblem& p, const EngineConfig& config);
  // Bytes serialize() wrote: the cuBLASLt version that made them (another version's are refused, NotSupported:
  // its algorithms are its own), the identity and cuBLASLt's algorithm; checked again against this problem.
  static StatusOr<BltPlan> deserialize(const BltProblem& p, const std::vector<uint8_t>& bytes);
  // Whether `bytes` are a cuBLASLt plan's (serialize()'s magic), not a cuDNN Frontend one.
  static bool is_blob(const std::vector<uint8_t>& bytes);
  std::vector<uint8_t> serialize() const override;

  const EngineConfig& config() const override;
  int64_t workspace_size() const override;
  // Runs the plan on `stream`. `ptrs` maps the problem's tensors to device buffers (16-byte aligned: the
  // candidates were chosen for that alignment); `workspace` holds workspace_size() bytes.
  Status execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::lower_detail
