// A plan built by something other than cuDNN Frontend: one of cuBLASLt's matmul algorithms (cublaslt_plan.h) or
// one of Kiln's own kernels (kernel_plan.h). LoweredGraph holds one in place of a frontend plan and hands it its
// caller's buffers. Only for src/lower/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"

namespace kiln::lower_detail {

// Whether `bytes` start with `magic` (a family's first bytes: "KILNBLT1\n", "KILNKRN1\n").
inline bool has_magic(const std::vector<uint8_t>& bytes, const char* magic) {
  const size_t n = std::strlen(magic);
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

class AltPlan {
 public:
  virtual ~AltPlan() = default;
  virtual const EngineConfig& config() const = 0;
  virtual int64_t workspace_size() const = 0;
  // Bytes its family's deserialize() reads back, starting with the family's magic.
  virtual std::vector<uint8_t> serialize() const = 0;
  // Runs on `stream`; `ptrs` maps tensor index -> device buffer; `workspace` holds workspace_size() bytes.
  // Immutable: many threads may run one plan at once.
  virtual Status execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const = 0;
};

}  // namespace kiln::lower_detail
