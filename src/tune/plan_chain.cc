// PlanChain: parts of a partitioned graph run back to back on shared buffers (kiln/tune/plan_chain.h).
#include "kiln/tune/plan_chain.h"

#include <algorithm>

namespace kiln {

namespace {

// One plan per part, at least one part: InvalidArgument naming the graph otherwise.
Status check_parts(const Graph& graph, size_t parts, size_t plans) {
  if (parts == plans && parts > 0) return Status::ok();
  return invalid_argument("plan chain for graph '" + graph.name + "': " + std::to_string(parts) + " parts and " +
                          std::to_string(plans) + " plans");
}

// The workspace the chain's plans share: the largest of theirs.
int64_t shared_workspace(const std::vector<LoweredGraph>& plans) {
  int64_t bytes = 0;
  for (const LoweredGraph& p : plans) bytes = std::max(bytes, p.workspace_size());
  return bytes;
}

}  // namespace

StatusOr<PlanChain> PlanChain::create(const Graph& graph, std::vector<GraphPart> parts, std::vector<LoweredGraph> plans,
                                      const std::map<int, HostTensor>& inputs) {
  KILN_RETURN_IF_ERROR(check_parts(graph, parts.size(), plans.size()));
  PlanChain c;
  c.graph_ = &graph;
  c.workspace_bytes_ = shared_workspace(plans);
  KILN_ASSIGN_OR_RETURN(c.io_, allocate_graph_buffers(graph, inputs, c.workspace_bytes_));
  KILN_RETURN_IF_ERROR(c.wire(std::move(parts), std::move(plans)));
  return c;
}

StatusOr<PlanChain> PlanChain::create(const Graph& graph, std::vector<GraphPart> parts, std::vector<LoweredGraph> plans,
                                      const GraphBuffers& inputs_from) {
  KILN_RETURN_IF_ERROR(check_parts(graph, parts.size(), plans.size()));
  PlanChain c;
  c.graph_ = &graph;
  c.workspace_bytes_ = shared_workspace(plans);
  KILN_ASSIGN_OR_RETURN(c.io_, allocate_graph_buffers(graph, c.workspace_bytes_));
  KILN_RETURN_IF_ERROR(copy_graph_inputs(graph, inputs_from, c.io_));
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  KILN_RETURN_IF_ERROR(c.wire(std::move(parts), std::move(plans)));
  return c;
}

// Buffers for the tensors that cross between parts, and each step's pointers.
Status PlanChain::wire(std::vector<GraphPart> parts, std::vector<LoweredGraph> plans) {
  const Graph& graph = *graph_;
  std::map<int, void*> all = io_.pointers();
  for (const GraphPart& p : parts) {
    for (size_t t = 0; t < p.graph.tensors.size(); ++t) {
      const int original = p.tensor_map[t];
      const TensorDesc& d = p.graph.tensors[t];
      // A tensor virtual in the graph but not in the part crosses between parts: it needs memory.
      if (d.by_value || !graph.is_virtual(original) || p.graph.is_virtual(static_cast<int>(t)) ||
          intermediates_.count(original))
        continue;
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, allocate_tensor_buffer(p.graph, static_cast<int>(t)));
      all[original] = b.data();
      intermediate_bytes_ += 2.0 * static_cast<double>(d.element_count()) *
                             static_cast<double>(dtype_size(p.graph.dtype_of(static_cast<int>(t))));
      intermediates_.emplace(original, std::move(b));
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    Step s{std::move(parts[i]), std::move(plans[i]), {}};
    for (size_t t = 0; t < s.part.graph.tensors.size(); ++t) {
      if (s.part.graph.is_virtual(static_cast<int>(t))) continue;
      auto it = all.find(s.part.tensor_map[t]);
      if (it != all.end()) s.pointers[static_cast<int>(t)] = it->second;
    }
    steps_.push_back(std::move(s));
  }
  return Status::ok();
}

Status PlanChain::run(cudnnHandle_t handle) const {
  for (const Step& s : steps_) {
    Status st = s.plan.execute(handle, s.pointers, io_.workspace.data());
    if (!st.is_ok()) return st.with_context("part '" + s.part.graph.name + "'");
  }
  return Status::ok();
}

Status PlanChain::poison(cudaStream_t stream) { return poison_outputs(*graph_, io_, stream); }

StatusOr<std::vector<HostTensor>> PlanChain::download_outputs() const { return kiln::download_outputs(*graph_, io_); }

std::map<int, void*> PlanChain::output_pointers() const { return kiln::output_pointers(*graph_, io_); }

}  // namespace kiln
