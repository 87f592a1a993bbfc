// kiln/graph/limits.h: every fixed limit Kiln enforces, in one place (docs/spec.md "Limits").
//
// Two kinds:
//  - what a graph may hold (Kiln's own bounds, chosen so that no size computation can overflow and no
//    input can make Kiln spend unbounded time or memory): checked by the spec parser and validate_graph
//    before any other work; a graph past one is InvalidArgument (exit 2) naming the limit;
//  - what cuDNN can take (cuDNN 9.19 with cuDNN Frontend 1.23, as their headers state): checked by
//    lowering before the frontend is called (check_cudnn_limits, kiln/lower/cudnn_limits.h: the lower
//    layer's, as the operation limit is read from the frontend's header); a graph past the operation limit
//    or the entrance-node limit is cut into fused segments that fit (cudnn_segment_groups), anything else
//    is NotSupported (exit 5) naming the limit. Handing cuDNN a graph past the operation limit crashes the
//    process (a std::array overflows in the frontend); past the entrance-node limit it runs out of time or
//    host memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln::limits {

// ---- What a spec or builder graph may hold (InvalidArgument, exit 2) ---------------------------------
inline constexpr int64_t kMaxSpecBytes = int64_t{64} << 20;  // a spec file or string, before parsing
inline constexpr int64_t kMaxNodes = 200000;
inline constexpr int64_t kMaxTensors = 400000;  // declared and node outputs together
inline constexpr int64_t kMaxDynamicDims = 64;
inline constexpr size_t kMaxNameBytes = 256;                   // a tensor, node, graph or dynamic-dim name, and a pin
inline constexpr size_t kMaxRank = 8;                          // = kCudnnDimMax: every tensor must reach cuDNN
inline constexpr int64_t kMaxExtent = (int64_t{1} << 31) - 1;  // one dim (and a dynamic dim's value)
inline constexpr int64_t kMaxElements = int64_t{1} << 62;      // product of a tensor's dims
// The memory a tensor spans: (1 + sum((extent - 1) * stride)) elements times the dtype's size, and also
// elements * dtype size. Each product is computed with an overflow check against this bound.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

// ---- What cuDNN takes (NotSupported, exit 5, or cut into segments) -----------------------------------
// CUDNN_DIM_MAX (cudnn_graph.h): the most dims of a backend tensor; the frontend copies dims and
// strides into arrays of CUDNN_DIM_MAX + 1 (cudnn_frontend_Tensor.h), so more overflows them.
inline constexpr size_t kCudnnDimMax = 8;
// Tensor uids (CUDNN_ATTR_TENSOR_UNIQUE_ID) are int64 and must be unique and non-zero in a graph; the
// frontend numbers its own virtual tensors from 1 upward, skipping the uids already used. Kiln gives
// every tensor canonical id + 1, so its uids are 1..tensors (at most kMaxTensors).
inline constexpr int64_t kCudnnMinUid = 1;
// Entrance nodes (that read graph inputs only) and exit nodes (whose output no node reads) per operation
// graph (entrance_node_count, exit_node_count in kiln/graph/decompose.h). cuDNN 9.19's operation-graph
// finalize matches its fusion patterns (NormFwdPwReducePatternMatcher, JoinCompositeNode) in time
// exponential in both; finalized deviceless for the H200 profile (`kiln compile`, whole process):
//  - k relus of one input (k entrance and k exit nodes): 0.11 s at 8, 0.20 s at 10, 0.99 s at 12, 2.8 s
//    at 13, 8.3 s at 14, over 40 s at 17; at 51 "out of host memory" (exit 3 on the H200);
//  - k relus of one relu's output (1 entrance, k exits): 0.18 s at 16, 0.25 s at 17, 1.8 s at 20, 24 s at
//    24, 47 s at 25, and "out of host memory" from 30;
//  - 8 entrance nodes each read by 2 exit nodes: 0.14 s. A chain stays at 0.1 s whatever its length;
//  - k relus of one relu's output added back together by a chain of adds (1 entrance, 1 exit node): 0.47 s
//    at 18, 1.6 s at 20, 6 s at 22, 24 s (2.5 GB) at 24, 103 s (9.5 GB) at 26, all of 24 GB and more at
//    28, "out of host memory" from 30: the nodes reading one tensor count too.
// Kiln hands cuDNN at most these many and cuts a wider graph into segments (cudnn_segment_groups).
inline constexpr int64_t kCudnnMaxEntranceNodes = 8;
inline constexpr int64_t kCudnnMaxExitNodes = 16;
inline constexpr int64_t kCudnnMaxTensorReaders = 16;  // nodes reading any one tensor

}  // namespace kiln::limits

namespace kiln {

// The graph-size limits above (nodes, tensors, dynamic dims, name lengths, pin length, ranks),
// InvalidArgument naming the limit and the node or tensor. Cheap (O(nodes + tensors)); validate_graph
// calls it first.
Status check_graph_limits(const Graph& graph);

}  // namespace kiln
