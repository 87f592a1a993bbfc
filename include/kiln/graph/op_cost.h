// kiln/graph/op_cost.h: what one execution of a node or a graph costs, counted once for every user (the
// tuner's TFLOP/s and GB/s, the host reference's work cap). Each op family counts its own
// (src/graph/ops/<family>.cc).
#pragma once

#include "kiln/graph/graph.h"

namespace kiln {

struct OpCost {
  // Multiply-accumulates of a contraction (conv, matmul, sdpa's two products, causal sdpa over the
  // unmasked pairs only); for an op without one, element operations (pointwise: one per output element,
  // reduction: one per input element, norms: three per element of x, for the statistics and the
  // normalization).
  double macs = 0;
  double flops = 0;  // 2 per multiply-accumulate of a contraction, 1 per element operation
  // Bytes that must move through memory at least once: for a node, its inputs read and its output
  // written; for a graph, its inputs and outputs (virtual tensors may stay on chip). By-value scalars
  // do not count.
  double bytes = 0;
};

// Precondition: the graph is validated (validate_graph), or at least its node's tensors carry their
// dims; a node whose tensors lack the dims its family needs counts zero.
OpCost node_cost(const Graph& graph, int node);
// macs and flops: the sum over the nodes; bytes: the graph's own inputs and outputs.
OpCost graph_cost(const Graph& graph);

}  // namespace kiln
