// kiln/validate/reference.h: numerical references for a Kiln graph, on the host (double precision, small
// shapes) and on the device (naive CUDA kernels in double precision, full-size shapes).
//
// Both take a graph whose tensors have dims, strides and (where not defaulted) dtypes filled in, and
// the values of its graph inputs keyed by tensor index. Both return one HostTensor per entry of
// graph.outputs, in that order, with the output's dims, strides and dtype. Every tensor a node writes
// is rounded to its dtype (the graph's intermediate dtype for virtual tensors, io dtype for outputs,
// unless set) to mirror what the GPU stores.
//
// Op conventions (dims are logical; strides place them in memory, so NHWC is NCHW dims with NHWC
// strides):
//   conv_*     x [N, C, spatial...], w [K, C/groups, filter...], y [N, K, out...]; 1 to 3 spatial dims;
//              out = floor((in + pre + post - dilation*(f-1) - 1) / stride) + 1
//   matmul     [..., M, K] x [..., K, N]; batch dims broadcast (right-aligned, extent 1 broadcasts)
//   pointwise  binary modes broadcast numpy-style; scale multiplies by a by-value scalar or 1-element
//              tensor; bias_add broadcasts numpy-style (a 1-D bias runs along the last axis), else a
//              1-D bias whose extent matches axis 1 runs along the channel axis
//   reduction  axes from attrs (output keeps them with extent 1); when attrs.axes is empty, the axes
//              where the output has extent 1 and the input does not
//   layer_norm y = (x - mean) / sqrt(var + eps) * scale + bias over all axes but the first, biased
//              variance; scale/bias broadcast numpy-style against x
//   rms_norm   y = x / sqrt(mean(x^2) + eps) * scale, same axes
//   sdpa       q [B, H, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv] -> o [B, H, Sq, Dv];
//              H a multiple of Hk (grouped-query); scale defaults to 1/sqrt(D); causal masks key j > i
//              (top-left aligned)
#pragma once

#include "kiln/core/enum_names.h"

#include <cstdint>
#include <map>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/host_tensor.h"

namespace kiln {

struct HostReferenceOptions {
  // Graphs needing more multiply-accumulates than this are refused with kInvalidArgument (use the
  // device reference instead). The magnitude pass (below) doubles the work but not the count.
  double max_macs = 2e9;
};

// Which reference judged outputs: the host's, the device's, or none (not verified, or none could be made).
enum class ReferenceKind { kHost, kDevice, kNone };
inline constexpr EnumName<ReferenceKind> kReferenceKindNames[] = {
    {ReferenceKind::kHost, "host"}, {ReferenceKind::kDevice, "device"}, {ReferenceKind::kNone, "none"}};
const char* reference_kind_name(ReferenceKind k);  // "host", "device", "none"
// Inverse of reference_kind_name; InvalidArgument naming the text and the choices otherwise.
StatusOr<ReferenceKind> parse_reference_kind(const std::string& name);

// What a reference computes for each graph output, in the order of graph.outputs:
//   values      the output, as run_host_reference/run_device_reference return it;
//   magnitudes  per element, the magnitude term of the accumulation bound (docs/numerics.md "The
//               accumulation bound"): for an output written by a conv or matmul of graph inputs exactly
//               sum_k |a_k| |b_k| (the same contraction evaluated on |inputs|), and in general a bound
//               carried through every node so that |value| <= M and the accumulation error <= c * M.
//               Same dims and strides as the output, dtype fp32 (never rounded to the output dtype).
//   scales      per element, the scale S of the expected-error model (docs/numerics.md "The gate"): for a
//               contraction of graph inputs sqrt(sum_k (a_k b_k)^2 + y^2) (the same contraction of the
//               squared inputs), which bounds the root mean square of the partial sums over a random
//               order of the terms times sqrt(3); carried through every other node by the magnitude rules
//               (S in place of M; a sum takes sqrt(sum S_x^2 + y^2)). Same dims, strides and dtype as the
//               magnitudes; computed with them.
struct ReferenceOutputs {
  ReferenceKind kind = ReferenceKind::kHost;
  std::vector<HostTensor> values;
  std::vector<HostTensor> magnitudes;
  std::vector<HostTensor> scales;
};

// Evaluates every node in topological order in double precision.
// Errors: kInvalidArgument for a malformed graph (message names node/tensor), a missing or misshapen
// input, or a graph over the MAC cap; kNotSupported for an op/mode it cannot evaluate.
StatusOr<std::vector<HostTensor>> run_host_reference(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                                     const HostReferenceOptions& options = {});

// The same on the device: naive CUDA kernels, double arithmetic and double accumulation throughout
// (conv, matmul, reduction, norm statistics, softmax), one kernel launch per node on the default stream.
// Inputs are copied in, outputs copied back. Errors as above, plus kUnavailable without a usable device.
StatusOr<std::vector<HostTensor>> run_device_reference(const Graph& graph, const std::map<int, HostTensor>& inputs);

// Either reference with its magnitude pass (magnitudes and scales, about three times the work): what
// check_outputs needs for the accumulation bound and the expected-error model. The host variant honours options.max_macs as run_host_reference does.
StatusOr<ReferenceOutputs> run_host_reference_with_magnitudes(const Graph& graph,
                                                              const std::map<int, HostTensor>& inputs,
                                                              const HostReferenceOptions& options = {});
StatusOr<ReferenceOutputs> run_device_reference_with_magnitudes(const Graph& graph,
                                                                const std::map<int, HostTensor>& inputs);

// Multiply-accumulates (or element operations, for non-contracting ops) the graph costs, once every
// node's geometry is checked: graph_cost(graph).macs (kiln/graph/op_cost.h, the count the tuner's TFLOP/s
// uses too); what the host cap compares against.
StatusOr<double> estimate_macs(const Graph& graph);

// Random values for every graph input, deterministic in `seed`, with ranges suited to the consumer:
// uniform [-1, 1] by default, norm scales [0.5, 1.5], norm biases and bias_add biases [-0.5, 0.5],
// divisors [0.5, 1.5]; by-value tensors take TensorDesc::value. Element e of tensor t is a pure function
// of (seed, t, e) (Philox4x32-10, docs/numerics.md "Random inputs"), so adding a tensor does not change
// the others, and generate_inputs_on_device (kiln/validate/device_check.h) writes the same bits on the device.
// Ragged attention's offsets are the exception: they follow from the drawn lengths (ragged_offsets).
// Large tensors are filled on every core.
StatusOr<std::map<int, HostTensor>> make_random_inputs(const Graph& graph, uint64_t seed);

}  // namespace kiln
