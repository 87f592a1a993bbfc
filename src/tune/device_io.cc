#include "kiln/device_io.h"

#include <algorithm>

namespace kiln {
namespace {

HostTensor shaped_like(const Graph& g, int idx) {
  const TensorDesc& d = g.tensors[idx];
  return HostTensor::zeros(g.dtype_of(idx), d.shape(), d.strides);
}

}  // namespace

StatusOr<DeviceBuffer> allocate_tensor_buffer(const Graph& graph, int tensor) {
  return DeviceBuffer::allocate(shaped_like(graph, tensor).byte_size());
}

std::map<int, void*> GraphBuffers::pointers() const {
  std::map<int, void*> out;
  for (auto& [idx, buf] : tensors) out[idx] = buf.data();
  return out;
}

StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                              int64_t workspace_bytes) {
  GraphBuffers b;
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    int idx = static_cast<int>(i);
    const TensorDesc& d = graph.tensors[i];
    if (d.by_value || graph.is_virtual(idx)) continue;
    HostTensor shape = shaped_like(graph, idx);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(shape.byte_size()));
    if (graph.is_graph_input(idx)) {
      auto it = inputs.find(idx);
      if (it == inputs.end()) return invalid_argument("no data for input tensor '" + d.name + "'");
      if (it->second.byte_size() != shape.byte_size())
        return invalid_argument("input tensor '" + d.name + "': data has " + std::to_string(it->second.byte_size()) +
                                " bytes, the graph needs " + std::to_string(shape.byte_size()));
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

StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, int64_t workspace_bytes) {
  GraphBuffers b;
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const int idx = static_cast<int>(i);
    if (graph.tensors[i].by_value || graph.is_virtual(idx)) continue;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, allocate_tensor_buffer(graph, idx));
    b.tensors.emplace(idx, std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b.workspace, DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(workspace_bytes, 0))));
  KILN_RETURN_IF_ERROR(poison_outputs(graph, b));
  return b;
}

Status copy_graph_inputs(const Graph& graph, const GraphBuffers& from, GraphBuffers& to, cudaStream_t stream) {
  for (const auto& [idx, buf] : from.tensors) {
    if (!graph.is_graph_input(idx)) continue;
    auto it = to.tensors.find(idx);
    if (it == to.tensors.end() || it->second.size() != buf.size())
      return internal_error("copy of input '" + graph.tensors[static_cast<size_t>(idx)].name + "': buffers differ");
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(it->second.data(), buf.data(), buf.size(), cudaMemcpyDeviceToDevice, stream));
  }
  return Status::ok();
}

std::map<int, void*> output_pointers(const Graph& graph, const GraphBuffers& buffers) {
  std::map<int, void*> out;
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it != buffers.tensors.end()) out[idx] = it->second.data();
  }
  return out;
}

Status poison_outputs(const Graph& graph, GraphBuffers& buffers, cudaStream_t stream) {
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it != buffers.tensors.end()) KILN_RETURN_IF_ERROR(it->second.fill_bytes(0xFF, stream));
  }
  return Status::ok();
}

StatusOr<std::vector<HostTensor>> download_outputs(const Graph& graph, const GraphBuffers& buffers) {
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<HostTensor> out;
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it == buffers.tensors.end()) return internal_error("no buffer for output '" + graph.tensors[idx].name + "'");
    HostTensor shape = shaped_like(graph, idx);
    std::vector<uint8_t> bytes(shape.byte_size());
    KILN_RETURN_IF_ERROR(it->second.copy_to_host(bytes.data(), bytes.size()));
    KILN_ASSIGN_OR_RETURN(HostTensor t, HostTensor::decode(shape.dtype, shape.dims, bytes.data(), bytes.size(), shape.strides));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kiln
