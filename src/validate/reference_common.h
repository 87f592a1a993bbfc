// Internal to the validate layer: what the host and device references share around the op math:
// loading graph inputs into packed row-major arrays and writing outputs back through the graph's strides.
#pragma once

#include <map>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"
#include "validate/node_plan.h"

namespace kiln::validate_internal {

struct PreparedGraph {
  std::vector<int> order;            // node indices, topological
  std::vector<NodePlan> plans;       // parallel to order
  double macs = 0;
};
StatusOr<PreparedGraph> prepare_graph(const Graph& g);

// Packed row-major values of every graph input that a node reads or the graph outputs, rounded to the
// tensor's dtype. By-value tensors absent from `inputs` take TensorDesc::value. Errors name the tensor.
StatusOr<std::map<int, std::vector<double>>> load_inputs(const Graph& g, const std::map<int, HostTensor>& inputs);

// One HostTensor per graph output (dims, strides and dtype from the graph), from packed values.
StatusOr<std::vector<HostTensor>> make_outputs(const Graph& g, const std::map<int, std::vector<double>>& values);

// One fp32 HostTensor per graph output (dims and strides from the graph) holding its magnitudes.
StatusOr<std::vector<HostTensor>> make_magnitude_outputs(const Graph& g,
                                                         const std::map<int, std::vector<double>>& magnitudes);

// The pointwise math in double (reference_math.h's pointwise_value), shared with the tests.
double pointwise_apply(PointwiseMode mode, double a, double b);

}  // namespace kiln::validate_internal
