// kiln/lower/cudnn_limits.h: the checks of what cuDNN can take (the limits themselves are in
// kiln/graph/limits.h, with the graph-size limits), made by lowering before any frontend call, and the cut of
// a graph past cuDNN's operation limit into segments. Defined in src/lower/cudnn_limits.cc: the operation
// limit is read from cuDNN Frontend's header (MAX_OPGRAPH_OPS), which only the lower layer includes.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// The backend operations cuDNN Frontend creates for `node` of a validated graph (a pointwise is one, an
// sdpa a dozen: its composite expansion), an upper bound where the frontend chooses at build time.
// Includes the IDENTITY copy lowering adds after a matmul or convolution whose output is both read back
// and consumed.
int64_t cudnn_operation_count(const Graph& graph, const GraphRoles& roles, int node);
int64_t cudnn_operation_count(const Graph& graph);  // every node

// cuDNN's limits for a validated graph, checked before any frontend call: operations, entrance nodes and
// exit nodes per operation graph (the message says it can run as segments), rank, extents and uids. NotSupported
// naming the limit.
Status check_cudnn_limits(const Graph& graph);

// Group numbers (one per node, as partition_graph takes them) that cut a validated graph into segments
// of at most cudnn_max_operations() operations, limits::kCudnnMaxEntranceNodes entrance nodes and
// limits::kCudnnMaxExitNodes exit nodes each, in
// topological order, also cutting after each reduction that another node reads (split_after_reductions).
// split_after_reductions' groups when the graph fits whole. NotSupported naming the node when a single
// node needs more operations than one operation graph holds.
StatusOr<std::vector<int>> cudnn_segment_groups(const Graph& graph);
// Whether the graph needs more operations, or has more entrance or exit nodes, than one cuDNN operation
// graph takes: it runs as segments (cudnn_segment_groups).
bool exceeds_cudnn_graph_limits(const Graph& graph);

// The most backend operations one cuDNN operation graph holds: MAX_OPGRAPH_OPS of the cuDNN Frontend this
// build uses (cudnn_frontend_OperationGraph.h), read from its header so the two cannot disagree.
// Frontend 1.23: 50, and not checked (a std::array overflows: SIGSEGV); 1.32: 250, checked.
int64_t cudnn_max_operations();

}  // namespace kiln
