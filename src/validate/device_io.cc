#include "kiln/validate/device_io.h"

#include <sys/stat.h>

#include <algorithm>

namespace kiln {
namespace {

// The bytes of a tensor's strided span in its dtype, from its dims and strides (no host storage made;
// an overflowing footprint is a Status).
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

StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                              int64_t workspace_bytes) {
  return catch_exceptions("graph '" + graph.name + "': device buffers",
                          [&] { return allocate_graph_buffers_unchecked(graph, inputs, workspace_bytes); });
}

StatusOr<std::vector<HostTensor>> download_outputs(const Graph& graph, const GraphBuffers& buffers) {
  return catch_exceptions("graph '" + graph.name + "': reading outputs back",
                          [&] { return download_outputs_unchecked(graph, buffers); });
}

StatusOr<std::map<int, HostTensor>> read_graph_inputs(const Graph& g, const std::string& dir) {
  std::map<int, HostTensor> inputs;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int idx = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    if (!g.is_graph_input(idx) || d.by_value) continue;
    const std::string path = dir + "/" + d.name + ".bin";
    auto t = HostTensor::read_file(path, g.dtype_of(idx), d.shape(), d.strides);
    if (!t.is_ok()) return t.status().with_context("input tensor '" + d.name + "'");
    inputs.emplace(idx, std::move(t).value());
  }
  return inputs;
}

Status check_graph_input_files(const Graph& g, const std::string& dir) {
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int idx = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    if (!g.is_graph_input(idx) || d.by_value) continue;
    const std::string path = dir + "/" + d.name + ".bin";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      return invalid_argument("input tensor '" + d.name + "': no file '" + path + "'");
    KILN_ASSIGN_OR_RETURN(const size_t want, tensor_bytes(g, idx));
    if (static_cast<size_t>(st.st_size) != want)
      return invalid_argument("input tensor '" + d.name + "': '" + path + "' has " + std::to_string(st.st_size) +
                              " bytes, the graph needs " + std::to_string(want));
  }
  return Status::ok();
}

StatusOr<DeviceBuffer> allocate_tensor_buffer(const Graph& graph, int tensor) {
  KILN_ASSIGN_OR_RETURN(const size_t bytes, tensor_bytes(graph, tensor));
  return DeviceBuffer::allocate(bytes);
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
    KILN_ASSIGN_OR_RETURN(const size_t bytes_needed, tensor_bytes(graph, idx));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(bytes_needed));
    if (graph.is_graph_input(idx)) {
      auto it = inputs.find(idx);
      if (it == inputs.end()) return invalid_argument("no data for input tensor '" + d.name + "'");
      if (it->second.byte_size() != bytes_needed)
        return invalid_argument("input tensor '" + d.name + "': data has " + std::to_string(it->second.byte_size()) +
                                " bytes, the graph needs " + std::to_string(bytes_needed));
      std::vector<uint8_t> bytes = it->second.encode();
      KILN_RETURN_IF_ERROR(buf.copy_from_host(bytes.data(), bytes.size()));
    }
    b.tensors.emplace(idx, std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b.workspace,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(workspace_bytes, 0))));
  KILN_RETURN_IF_ERROR(poison_outputs(graph, b));
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return b;
}
}  // namespace

StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, int64_t workspace_bytes, cudaStream_t stream) {
  GraphBuffers b;
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const int idx = static_cast<int>(i);
    if (graph.tensors[i].by_value || graph.is_virtual(idx)) continue;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, allocate_tensor_buffer(graph, idx));
    b.tensors.emplace(idx, std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b.workspace,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(workspace_bytes, 0))));
  KILN_RETURN_IF_ERROR(poison_outputs(graph, b, stream));
  return b;
}

Status copy_graph_inputs(const Graph& graph, const GraphBuffers& from, GraphBuffers& to, cudaStream_t stream) {
  for (const auto& [idx, buf] : from.tensors) {
    if (!graph.is_graph_input(idx)) continue;
    auto it = to.tensors.find(idx);
    if (it == to.tensors.end() || it->second.size() != buf.size())
      return internal_error("copy of input '" + graph.tensors[static_cast<size_t>(idx)].name + "': buffers differ");
    KILN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(it->second.data(), buf.data(), buf.size(), cudaMemcpyDeviceToDevice, stream));
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

namespace {
StatusOr<std::vector<HostTensor>> download_outputs_unchecked(const Graph& graph, const GraphBuffers& buffers) {
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<HostTensor> out;
  for (int idx : graph.outputs) {
    auto it = buffers.tensors.find(idx);
    if (it == buffers.tensors.end()) return internal_error("no buffer for output '" + graph.tensors[idx].name + "'");
    const TensorDesc& d = graph.tensors[static_cast<size_t>(idx)];
    KILN_ASSIGN_OR_RETURN(const size_t size, tensor_bytes(graph, idx));
    std::vector<uint8_t> bytes(size);
    KILN_RETURN_IF_ERROR(it->second.copy_to_host(bytes.data(), bytes.size()));
    KILN_ASSIGN_OR_RETURN(HostTensor t,
                          HostTensor::decode(graph.dtype_of(idx), d.shape(), bytes.data(), bytes.size(), d.strides));
    out.push_back(std::move(t));
  }
  return out;
}
}  // namespace

}  // namespace kiln
