#include "kiln/device_io.h"

namespace kiln {
namespace {

// The bytes of a tensor's strided span, computed without allocating its host copy.
StatusOr<size_t> tensor_bytes(const Graph& g, int idx) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(idx)];
  StatusOr<int64_t> bytes = HostTensor::checked_byte_size(g.dtype_of(idx), d.shape(), d.strides);
  if (!bytes.is_ok()) return bytes.status().with_context("tensor '" + d.name + "'");
  return static_cast<size_t>(*bytes);
}

StatusOr<GraphBuffers> allocate_graph_buffers_unchecked(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                                        int64_t workspace_bytes);
StatusOr<std::vector<HostTensor>> download_outputs_unchecked(const Graph& graph, const GraphBuffers& buffers);

}  // namespace

StatusOr<DeviceBuffer> allocate_tensor_buffer(const Graph& graph, int tensor) {
  KILN_ASSIGN_OR_RETURN(size_t bytes, tensor_bytes(graph, tensor));
  return DeviceBuffer::allocate(bytes);
}

StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                              int64_t workspace_bytes) {
  return catch_exceptions("graph '" + graph.name + "': device buffers",
                          [&] { return allocate_graph_buffers_unchecked(graph, inputs, workspace_bytes); });
}

StatusOr<std::vector<HostTensor>> download_outputs(const Graph& graph, const GraphBuffers& buffers) {
  return catch_exceptions("graph '" + graph.name + "': reading outputs back",
                          [&] { return download_outputs_unchecked(graph, buffers); });
}

std::map<int, void*> GraphBuffers::pointers() const {
  std::map<int, void*> out;
  for (auto& [idx, buf] : tensors) out[idx] = buf.data();
  return out;
}

namespace {

StatusOr<GraphBuffers> allocate_graph_buffers_unchecked(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                                        int64_t workspace_bytes) {
  GraphBuffers b;
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    int idx = static_cast<int>(i);
    const TensorDesc& d = graph.tensors[i];
    if (d.by_value || graph.is_virtual(idx)) continue;
    KILN_ASSIGN_OR_RETURN(size_t size, tensor_bytes(graph, idx));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(size));
    if (graph.is_graph_input(idx)) {
      auto it = inputs.find(idx);
      if (it == inputs.end()) return invalid_argument("no data for input tensor '" + d.name + "'");
      if (it->second.byte_size() != size)
        return invalid_argument("input tensor '" + d.name + "': data has " + std::to_string(it->second.byte_size()) +
                                " bytes, the graph needs " + std::to_string(size));
      std::vector<uint8_t> bytes = it->second.encode();
      KILN_RETURN_IF_ERROR(buf.copy_from_host(bytes.data(), bytes.size()));
    }
    b.tensors.emplace(idx, std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b.workspace, DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(workspace_bytes, 0))));
  KILN_RETURN_IF_ERROR(poison_outputs(graph, b));
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return b;
}

}  // namespace

Status poison_outputs(const Graph& graph, GraphBuffers& buffers, cudaStream_t stream) {
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it != buffers.tensors.end()) KILN_RETURN_IF_ERROR(it->second.fill_bytes(0xFF, stream));
  }
  return Status::ok();
}

namespace {

StatusOr<std::vector<HostTensor>> download_outputs_unchecked(const Graph& graph, const GraphBuffers& buffers) {
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<HostTensor> out;
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it == buffers.tensors.end()) return internal_error("no buffer for output '" + graph.tensors[idx].name + "'");
    const TensorDesc& d = graph.tensors[static_cast<size_t>(idx)];
    KILN_ASSIGN_OR_RETURN(size_t size, tensor_bytes(graph, idx));
    std::vector<uint8_t> bytes(size);
    KILN_RETURN_IF_ERROR(it->second.copy_to_host(bytes.data(), bytes.size()));
    KILN_ASSIGN_OR_RETURN(HostTensor t, HostTensor::decode(graph.dtype_of(idx), d.shape(), bytes.data(), bytes.size(), d.strides));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

}  // namespace kiln
