// kiln/runtime/segments.h: graphs cuDNN cannot fuse whole run as fused segments.
//
// cuDNN 9.19 has no Hopper engine for a pointwise that reads a reduction's result (the FP8 recipe's
// 448 / amax after a GEMM + AMAX). Such a graph is cut after each reduction that another node reads
// (split_after_reductions in kiln/graph/decompose.h): every segment is a graph of its own, fused as far as
// cuDNN allows, tuned, stored and loaded under its own signature, and run back to back with the
// crossing tensors in memory in the graph's intermediate dtype (kiln/tune/plan_chain.h), so the numerics are
// those of the whole graph.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph/decompose.h"
#include "kiln/lower/lower.h"

namespace kiln {

struct SegmentDecision {
  std::vector<GraphPart> segments;  // empty: fuse the whole graph
  std::string why;                  // why the whole graph cannot be fused (cuDNN's message), when split
};

// A graph past cuDNN's operations per operation graph (kiln/lower/cudnn_limits.h) is cut into segments that
// fit (cudnn_segment_groups), without calling cuDNN (`handle` may be null then). Otherwise asks cuDNN (on
// `handle`'s device) for engine configurations for the whole graph. When there are some, or the graph has
// nothing to cut, returns no segments (the whole graph is tried as usual and any error surfaces there).
// Otherwise returns the segments and the reason.
StatusOr<SegmentDecision> segments_if_unfusable(const Graph& graph, cudnnHandle_t handle);

// The segments of a graph regardless of cuDNN's heuristics: cut after reductions another node reads and
// wherever cuDNN's operation limit needs it (cudnn_segment_groups; crossing tensors in the intermediate
// dtype); one segment when there is nothing to cut.
StatusOr<std::vector<GraphPart>> graph_segments(const Graph& graph);

}  // namespace kiln
