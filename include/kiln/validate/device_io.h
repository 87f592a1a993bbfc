// kiln/validate/device_io.h: device buffers for one graph execution: inputs uploaded from HostTensors, outputs
// poisoned before each run (so an unwritten element shows as NaN, never as a plausible value), outputs
// read back as HostTensors, workspace sized from the plan.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/host_tensor.h"

namespace kiln {

struct GraphBuffers {
  std::map<int, DeviceBuffer> tensors;  // by tensor index: every non-virtual, non-by-value tensor
  DeviceBuffer workspace;
  std::map<int, void*> pointers() const;
};

// Recorded inputs: `<dir>/<tensor name>.bin` for every graph input that is not by value, each exactly
// HostTensor::encode's bytes for the tensor's dtype, dims and strides. Errors name the tensor and file.
StatusOr<std::map<int, HostTensor>> read_graph_inputs(const Graph& graph, const std::string& dir);
// The cheap check of the same, before any GPU work: every file exists and has the size its tensor needs.
// InvalidArgument naming the tensor, the file and the sizes otherwise.
Status check_graph_input_files(const Graph& graph, const std::string& dir);

// A device buffer large enough for tensor `tensor` of `graph` (its strided span, in its dtype); not filled.
StatusOr<DeviceBuffer> allocate_tensor_buffer(const Graph& graph, int tensor);

// Allocates every graph input and output (strided spans), uploads `inputs` (keyed by tensor index),
// and allocates `workspace_bytes` of workspace. Outputs are poisoned.
StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                              int64_t workspace_bytes);
// Allocates every graph input and output (strided spans) and `workspace_bytes` of workspace, filling
// nothing but the poison of the outputs: for inputs that are generated (generate_inputs_on_device) or
// copied (copy_graph_inputs) on the device.
StatusOr<GraphBuffers> allocate_graph_buffers(const Graph& graph, int64_t workspace_bytes,
                                              cudaStream_t stream = nullptr);
// Copies every graph input of `from` into `to` on the device (both allocated for `graph`).
Status copy_graph_inputs(const Graph& graph, const GraphBuffers& from, GraphBuffers& to, cudaStream_t stream = nullptr);
// Fills every output with 0xFF bytes (NaN for floating types).
Status poison_outputs(const Graph& graph, GraphBuffers& buffers, cudaStream_t stream = nullptr);
// Device pointers of the graph's outputs (tensor index -> pointer).
std::map<int, void*> output_pointers(const Graph& graph, const GraphBuffers& buffers);
// Reads back the outputs, in the order of graph.outputs.
StatusOr<std::vector<HostTensor>> download_outputs(const Graph& graph, const GraphBuffers& buffers);

}  // namespace kiln
