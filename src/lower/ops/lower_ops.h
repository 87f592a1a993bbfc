// Internal to the lower layer: what every op family's lowering shares (src/lower/graph_lowering.cc), and
// one lowering function per family (src/lower/ops/<family>.cc), which lower_graph reaches through one
// table. Adding an op or a pointwise mode: docs/contributing.md "Adding an op or a pointwise mode".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "lower/frontend.h"

namespace kiln::lower_detail {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// One lowering in progress.
struct LowerCtx {
  const Graph& g;
  fe::graph::Graph& fg;
  std::vector<TensorPtr> t;  // by tensor index; null until made
  std::vector<int64_t> uid;  // by tensor index (tensor_uids)
};

// "node 'mm' (matmul)"
std::string node_label(const Node& n);
// The node's compute dtype (its own, else the graph's) as the frontend's.
fe::DataType_t node_compute_dtype(const LowerCtx& c, const Node& n);
// Makes (or returns) the frontend tensor for a Kiln graph input (a by-value scalar becomes a
// pass-by-value tensor).
TensorPtr input_tensor(LowerCtx& c, int idx);
// Gives a node's output Kiln's shape, layout, dtype and role.
void finish_output(LowerCtx& c, int idx, const TensorPtr& p);
// finish_output for the output of a matmul or convolution: cuDNN's fusion patterns want such an output
// that feeds further ops (an epilogue such as AMAX) to be virtual. When the user also reads it, the op
// writes a virtual tensor, the epilogue reads that, and an IDENTITY copies it to the user's output in the
// same kernel.
void finish_main_output(LowerCtx& c, const Node& n, const TensorPtr& y);

// One per op family; each adds the node to c.fg and finishes its output.
Status lower_conv(LowerCtx& c, const Node& n);
Status lower_matmul(LowerCtx& c, const Node& n);
Status lower_pointwise(LowerCtx& c, const Node& n);
Status lower_reduction(LowerCtx& c, const Node& n);
Status lower_norm(LowerCtx& c, const Node& n);
Status lower_sdpa(LowerCtx& c, const Node& n);

}  // namespace kiln::lower_detail
