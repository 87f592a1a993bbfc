// For the device tier's injected faults (first-use verification, shadow sampling): a plan that runs the real plan, then
// overwrites the first 16 bytes of one output (8 fp16 elements): the "deliberately wrong candidate".
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <utility>

#include "kiln/runtime/plan_types.h"

namespace kiln::test {

class CorruptingExecutor : public PlanExecutor {
 public:
  CorruptingExecutor(std::shared_ptr<const ExecutablePlan> real, int output)
      : real_(std::move(real)), output_(output) {}
  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    KILN_RETURN_IF_ERROR(real_->run_unchecked(stream, pointers, workspace));
    if (cudaMemsetAsync(pointers.at(output_), 0x7b, 16, stream) != cudaSuccess)
      return internal_error("cudaMemsetAsync");
    return Status::ok();
  }

 private:
  std::shared_ptr<const ExecutablePlan> real_;
  int output_;
};

}  // namespace kiln::test
