// Internal to the validate layer: what the host and device references share around the op math:
// loading graph inputs into packed row-major arrays and writing outputs back through the graph's strides.
#pragma once

#include <map>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/host_tensor.h"
#include "validate/node_plan.h"

namespace kiln::validate_internal {

struct PreparedGraph {
  std::vector<int> order;       // node indices, topological
  std::vector<NodePlan> plans;  // parallel to order
  double macs = 0;              // graph_cost(g).macs
};
// `values`: the plans will compute values (a reference), not only the cost: a dropout node then needs its mask
// (kiln/validate/dropout_probe.h; NotSupported without it).
StatusOr<PreparedGraph> prepare_graph(const Graph& g, bool values = true);

// The graph inputs a reference loads, in tensor order: those a node reads or the graph outputs.
std::vector<int> loaded_inputs(const Graph& g, const GraphRoles& roles);

// Packed row-major values of every graph input that a node reads or the graph outputs, rounded to the
// tensor's dtype. By-value tensors absent from `inputs` take TensorDesc::value. Errors name the tensor.
StatusOr<std::map<int, std::vector<double>>> load_inputs(const Graph& g, const std::map<int, HostTensor>& inputs);

// One HostTensor per graph output (dims, strides and dtype from the graph), from packed values.
StatusOr<std::vector<HostTensor>> make_outputs(const Graph& g, const std::map<int, std::vector<double>>& values);

// One fp32 HostTensor per graph output (dims and strides from the graph) holding its magnitudes.
StatusOr<std::vector<HostTensor>> make_magnitude_outputs(const Graph& g,
                                                         const std::map<int, std::vector<double>>& magnitudes);

// A graph input make_random_inputs fills: its tensor index, dtype and range, or its by-value constant.
struct InputDraw {
  int tensor = -1;
  DataType dtype = DataType::kFloat32;
  double lo = -1.0, hi = 1.0;
  bool by_value = false;
  double value = 0.0;
};
// Every graph input a node reads or the graph outputs, in tensor order, with the range its first
// consumer wants (kiln/validate/reference.h make_random_inputs). InvalidArgument for a range the generator cannot
// draw exactly (input_range_is_exact).
StatusOr<std::vector<InputDraw>> input_draws(const Graph& g);
// Whether input_value (input_gen.h) is exact for [lo, hi): width a power of two, lo a multiple of
// width * 2^-23 and |lo| <= width.
bool input_range_is_exact(double lo, double hi);
// The value element 0 takes when its draw rounds to zero (a tensor is never all zeros): 1 when the range
// holds it, else hi; not yet rounded to the dtype.
double input_nonzero_fallback(double lo, double hi);

// Ragged attention's offsets (kiln/graph/graph.h SdpaAttrs::ragged), which follow from the lengths drawn with
// `seed`: per offset tensor its B + 1 values. Entry b's rows start where entry b - 1's end, after a gap of half of
// entry b - 1's padding ((S - length) / 2 tokens), so the entries are packed with holes and stay within the dense
// buffer (the lengths and gaps make at most B * S tokens); the last value is where the last entry's gap ends.
// make_random_inputs and generate_inputs_on_device write them over the offsets' own draws.
StatusOr<std::map<int, std::vector<double>>> ragged_offsets(const Graph& g, uint64_t seed);

// Fills `h` (every logical element, through its strides) with the draws of tensor `tensor` in [lo, hi)
// for `seed`, rounded to h.dtype (input_gen.h; element 0 takes input_nonzero_fallback when it rounds to 0).
void fill_input(HostTensor& h, uint64_t seed, uint32_t tensor, double lo, double hi);

// The pointwise math in double (reference_math.h's pointwise_value), shared with the tests.
double pointwise_apply(PointwiseMode mode, double a, double b);

}  // namespace kiln::validate_internal
