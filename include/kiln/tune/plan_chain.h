// kiln/tune/plan_chain.h: several plans run back to back as one computation: the parts of a partitioned graph
// (kiln/graph/decompose.h), each with its own plan, on shared buffers. The graph's inputs and outputs live in
// one GraphBuffers; each tensor that crosses between parts gets one buffer of its own. Used for the
// unfused alternative (kiln/tune/unfused.h) and for graphs that run as fused segments (kiln/tools/runner.h).
#pragma once

#include <map>
#include <vector>

#include "kiln/graph/decompose.h"
#include "kiln/lower/lower.h"
#include "kiln/validate/device_io.h"

namespace kiln {

class PlanChain {
 public:
  // `plans[i]` is built for `parts[i].graph`. Uploads `inputs` (the graph's, by tensor index) and sizes
  // the workspace for the largest plan.
  static StatusOr<PlanChain> create(const Graph& graph, std::vector<GraphPart> parts, std::vector<LoweredGraph> plans,
                                    const std::map<int, HostTensor>& inputs);
  // The same with the graph's inputs copied on the device from `inputs_from` (buffers for `graph`, e.g.
  // the fused graph's evaluation): no host data involved.
  static StatusOr<PlanChain> create(const Graph& graph, std::vector<GraphPart> parts, std::vector<LoweredGraph> plans,
                                    const GraphBuffers& inputs_from);

  // Enqueues every part on the handle's stream, in order.
  Status run(cudnnHandle_t handle) const;
  // Poisons the graph's outputs (kiln/validate/device_io.h).
  Status poison(cudaStream_t stream);
  StatusOr<std::vector<HostTensor>> download_outputs() const;
  // The graph's output buffers (tensor index -> device pointer), e.g. for a DeviceChecker.
  std::map<int, void*> output_pointers() const;

  size_t size() const { return steps_.size(); }
  const GraphPart& part(size_t i) const { return steps_[i].part; }
  const LoweredGraph& plan(size_t i) const { return steps_[i].plan; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Bytes written to and read back from memory between parts (each crossing tensor once each way).
  double intermediate_bytes() const { return intermediate_bytes_; }

 private:
  struct Step {
    GraphPart part;
    LoweredGraph plan;
    std::map<int, void*> pointers;  // part tensor index -> device pointer
  };
  PlanChain() = default;
  Status wire(std::vector<GraphPart> parts, std::vector<LoweredGraph> plans);
  const Graph* graph_ = nullptr;  // not owned: must outlive the chain
  std::vector<Step> steps_;
  GraphBuffers io_;
  std::map<int, DeviceBuffer> intermediates_;  // original tensor index -> buffer
  int64_t workspace_bytes_ = 0;
  double intermediate_bytes_ = 0;
};

}  // namespace kiln
