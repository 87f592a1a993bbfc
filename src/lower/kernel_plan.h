// Kiln's own kernels as a third source of engine configurations, for graphs cuDNN runs badly or not at all. One so
// far: the AMAX of a whole tensor (a lone reduce_amax over every axis), which the FP8 recipe's and matmul+AMAX's
// unfused chains need after cuBLASLt's GEMM (issue 37: cuDNN 9.19 offers no configuration of it at 8192x8192 that
// launches, bench/results/h100/fp8-parts). LoweredGraph offers them as HeuristicMode::kKiln's candidates
// ("knl1_blocks=4_threads=256": kKilnKernelEngineBase), and they are tuned, checked against the reference, stored
// and served like any other configuration. Only for src/lower/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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

class KernelPlan : public AltPlan {
 public:
  // The launch configurations offered on the current device: 256 or 512 threads, 2, 4 or 8 blocks per SM.
  static StatusOr<std::vector<EngineConfig>> candidates(const AmaxProblem& p);
  // Exactly `config`: NotSupported for a kernel or knob Kiln does not have.
  static StatusOr<KernelPlan> build(const AmaxProblem& p, const EngineConfig& config);
  // Bytes serialize() wrote ("KILNKRN1\n" then the identity): any Kiln that has the kernel runs it.
  static StatusOr<KernelPlan> deserialize(const AmaxProblem& p, const std::vector<uint8_t>& bytes);
  static bool is_blob(const std::vector<uint8_t>& bytes);

  std::vector<uint8_t> serialize() const override;
  const EngineConfig& config() const override { return config_; }
  int64_t workspace_size() const override { return 0; }
  Status execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const override;

 private:
  AmaxProblem problem_;
  EngineConfig config_;
  int blocks_ = 0, threads_ = 0;
};

}  // namespace kiln::lower_detail
