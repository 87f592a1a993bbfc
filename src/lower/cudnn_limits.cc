// cuDNN's fixed limits (kiln/graph/limits.h; the checks: kiln/lower/cudnn_limits.h): the operations cuDNN
// Frontend creates for each Kiln node, the checks lowering makes before it calls the frontend, and the
// segment cut for a graph past the operation limit. No frontend call here: this is Kiln's model of what the
// frontend will do, so it can run first.
#include <algorithm>
#include <set>

#include "kiln/graph/decompose.h"
#include "kiln/graph/limits.h"
#include "kiln/lower/cudnn_limits.h"
#include "lower/frontend.h"

namespace kiln {
namespace {

// Composite SDPA (cuDNN Frontend 1.23, node/scaled_dot_product_flash_attention.h; the frontend logs
// "Auto-selected SDPA implementation COMPOSITE" for examples/sdpa_fwd.json): bmm1, the attn_scale
// multiply, softmax's max, sub, exp, sum and div (no stats: Kiln asks for none), bmm2; a causal mask adds
// the diagonal band mask's row and column indices, compare and select. The unified node would be one
// operation. Counted with room: a count too high only cuts a graph earlier, one too low crashes the
// frontend.
constexpr int64_t kSdpaOps = 10;        // 8 counted
constexpr int64_t kSdpaCausalOps = 14;  // 12 counted: the mask's row index, column index, compare, select
// Each bound of a band is its own mask (frontend 1.32, sliding_window_mask): row and column indices, up to three
// shifts (the bound, and Skv and Sq bottom-right), compare, select: 7 counted.
constexpr int64_t kSdpaBoundOps = 8;
constexpr int64_t kSdpaBiasOps = 2;     // the add (1 counted)
constexpr int64_t kSdpaPaddingOps = 8;  // row and column indices, two compares, their and, select (6 counted)
constexpr int64_t kSdpaPagedOps = 4;    // a paged cache load for K and one for V (2 counted)
// The backward pass (frontend 1.32, sdpa_backward): two reductions' pre-pass (dO.O), the scores again with their
// scale, mask and softmax from the statistics, five matmuls and dS's pointwise ops: about 22; counted with room.
constexpr int64_t kSdpaBackwardOps = 36;
// FP8 attention (frontend 1.32, sdpa_fp8): sdpa's operations and its scaling: the two descales of the scores, the
// softmax's scale and descale, v's descale, o's scale, and the two amax reductions (Amax_S, Amax_O): about 18;
// counted with room.
constexpr int64_t kSdpaFp8Ops = 28;
// FP8 attention's backward pass (frontend 1.32, sdpa_fp8_backward): the backward's operations (about 22) and its
// scaling: seven descales, five scales and four amax reductions: about 38; counted with room.
constexpr int64_t kSdpaFp8BackwardOps = 56;

std::string limit_text() {
  return std::to_string(cudnn_max_operations()) +
         " operations per cuDNN operation graph (cuDNN Frontend's MAX_OPGRAPH_OPS)";
}

}  // namespace

int64_t cudnn_max_operations() { return static_cast<int64_t>(MAX_OPGRAPH_OPS); }

int64_t cudnn_operation_count(const Graph& graph, const GraphRoles& roles, int node) {
  const Node& n = graph.nodes[static_cast<size_t>(node)];
  switch (n.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad:
    case OpKind::kMatmul: {
      // lower_graph adds an IDENTITY copy when the output is read back and also consumed.
      const int out = n.outputs.empty() ? -1 : n.outputs[0];
      return 1 + (roles.is_graph_output(out) && roles.consumer_count(out) > 0 ? 1 : 0);
    }
    case OpKind::kPointwise:
    case OpKind::kReduction:
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return 1;
    case OpKind::kSdpaFp8:
      return kSdpaFp8Ops + (n.sdpa.effective_right_bound() ? kSdpaBoundOps : 0) +
             (n.sdpa.left_bound ? kSdpaBoundOps : 0);
    case OpKind::kSdpaFp8Backward:
      return kSdpaFp8BackwardOps + (n.sdpa.effective_right_bound() ? kSdpaBoundOps : 0) +
             (n.sdpa.left_bound ? kSdpaBoundOps : 0);
    case OpKind::kSdpaBackward:
      return kSdpaBackwardOps + (sdpa_inputs(n).bias >= 0 ? kSdpaBiasOps : 0) +
             (n.sdpa.effective_right_bound() ? kSdpaBoundOps : 0) + (n.sdpa.left_bound ? kSdpaBoundOps : 0);
    case OpKind::kSdpa: {
      const std::optional<int64_t> right = n.sdpa.effective_right_bound();
      const bool plain_causal = right == 0 && !n.sdpa.left_bound && n.sdpa.alignment == DiagonalAlignment::kTopLeft;
      const SdpaInputs x = sdpa_inputs(n);
      const int64_t bias = (x.bias >= 0 ? kSdpaBiasOps : 0) + (x.seq_len_q >= 0 ? kSdpaPaddingOps : 0) +
                           (x.page_table_k >= 0 ? kSdpaPagedOps : 0);
      if (plain_causal) return kSdpaCausalOps + bias;
      return kSdpaOps + bias + (right ? kSdpaBoundOps : 0) + (n.sdpa.left_bound ? kSdpaBoundOps : 0);
    }
  }
  return 1;
}

int64_t cudnn_operation_count(const Graph& graph) {
  const GraphRoles roles(graph);
  int64_t total = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) total += cudnn_operation_count(graph, roles, static_cast<int>(i));
  return total;
}

bool exceeds_cudnn_graph_limits(const Graph& graph) {
  return cudnn_operation_count(graph) > cudnn_max_operations() ||
         entrance_node_count(graph) > limits::kCudnnMaxEntranceNodes ||
         exit_node_count(graph) > limits::kCudnnMaxExitNodes ||
         max_tensor_readers(graph) > limits::kCudnnMaxTensorReaders;
}

// What cuDNN Frontend (1.32) asks of attention's tensors that a valid spec may not give: each [B, H, S, D] tensor
// of an attention node (q, k, v, o, do, the statistics, dq, dk, dv and the bias; not the int32 lengths and tables,
// not sdpa_fp8's scales) with its last dim contiguous (stride 1), none passed by value. Its kernels also move q, k,
// v, o (and a backward's do, dq, dk, dv) with 16-byte loads: a stride of a dim over 1 whose bytes are not a multiple
// of 16 (a row of 65 fp8 elements) the frontend refuses, and cuDNN itself would read wrong. (Off SM 9.x the frontend
// also takes a backward's head dims only up to 128, where Kiln validates 256 for any target: cuDNN's own message
// says so.)
static Status check_attention_tensors(const Graph& graph, const std::string& where) {
  constexpr int64_t kAlignment = 16;
  const auto ints = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (const Node& n : graph.nodes) {
    if (!is_attention(n.op)) continue;
    // Read as validated (a raw graph's missing or out-of-range tensors are skipped here: validation names them).
    // sdpa_fp8's scales are [1, 1, 1, 1]: contiguous whatever their strides; by value validation refuses them.
    const bool backward = is_attention_backward(n.op);
    const size_t data = std::min(n.inputs.size(), size_t{backward ? 6u : 3u});
    std::vector<int> tensors(n.inputs.begin(), n.inputs.begin() + static_cast<std::ptrdiff_t>(data));
    tensors.insert(tensors.end(), n.outputs.begin(), n.outputs.end());
    const int bias = sdpa_inputs(n).bias;
    if (bias >= 0 && static_cast<size_t>(bias) < n.inputs.size())
      tensors.push_back(n.inputs[static_cast<size_t>(bias)]);
    // Of `tensors`, the ones read 16 bytes at a time: q, k, v (, o, do) first, then o (or dq, dk, dv).
    const size_t aligned_in = std::min(data, size_t{backward ? 5u : 3u});
    const size_t aligned_out = std::min(n.outputs.size(), size_t{backward ? 3u : 1u});
    for (size_t at = 0; at < tensors.size(); ++at) {
      const int t = tensors[at];
      if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size()) continue;
      const TensorDesc& d = graph.tensors[static_cast<size_t>(t)];
      const std::string what = where + ": node '" + n.name + "' (" + op_kind_name(n.op) + "): tensor '" + d.name + "'";
      if (d.by_value) return not_supported(what + " is passed by value; cuDNN reads attention's tensors from memory");
      if (d.dims.size() == 4 && d.strides.size() == 4 && d.dims[3].value > 1 && d.strides[3] != 1)
        return not_supported(what + ": strides " + ints(d.strides) +
                             " do not keep the last dim contiguous; cuDNN reads attention's tensors with stride 1 "
                             "there (a row-major or an explicit [.., 1] layout)");
      if (at >= aligned_in && (at < data || at >= data + aligned_out)) continue;
      const int64_t bytes = static_cast<int64_t>(dtype_size(graph.dtype_of(t)));
      for (size_t i = 0; i < d.dims.size() && i < d.strides.size(); ++i)
        if (d.dims[i].value > 1 && d.strides[i] != 1 && (d.strides[i] * bytes) % kAlignment != 0)
          return not_supported(what + ": stride " + std::to_string(d.strides[i]) + " of dim " + std::to_string(i) +
                               " is " + std::to_string(d.strides[i] * bytes) +
                               " bytes, not a multiple of 16; cuDNN's attention reads its tensors 16 bytes at a time");
    }
  }
  return Status::ok();
}

Status check_cudnn_limits(const Graph& graph) {
  const std::string where = "graph '" + graph.name + "'";
  for (const TensorDesc& t : graph.tensors) {
    if (t.dims.size() > limits::kCudnnDimMax || t.strides.size() > limits::kCudnnDimMax)
      return not_supported(where + ": tensor '" + t.name + "' has " + std::to_string(t.dims.size()) +
                           " dims; cuDNN takes at most " + std::to_string(limits::kCudnnDimMax) + " (CUDNN_DIM_MAX)");
    if (t.strides.size() != t.dims.size())
      return failed_precondition(where + ": tensor '" + t.name +
                                 "' has no strides for its dims (validate the graph first)");
    for (size_t i = 0; i < t.dims.size(); ++i)
      if (t.dims[i].value < 1 || t.dims[i].value > limits::kMaxExtent || t.strides[i] < 1)
        return not_supported(where + ": tensor '" + t.name + "': dim " + std::to_string(i) + " is " +
                             std::to_string(t.dims[i].value) + " with stride " + std::to_string(t.strides[i]) +
                             "; Kiln hands cuDNN extents from 1 to " + std::to_string(limits::kMaxExtent) +
                             " and positive strides");
  }
  KILN_RETURN_IF_ERROR(check_attention_tensors(graph, where));
  // One cuDNN tensor per Kiln tensor, uid = canonical id + 1 (lower_detail::tensor_uids): at most
  // kMaxTensors of them, never 0, so they cannot collide with each other or wrap.
  if (static_cast<int64_t>(graph.tensors.size()) > limits::kMaxTensors)
    return not_supported(where + ": " + std::to_string(graph.tensors.size()) + " tensors; Kiln's uids reach " +
                         std::to_string(limits::kMaxTensors));
  const int64_t ops = cudnn_operation_count(graph);
  if (ops > cudnn_max_operations())
    return not_supported(where + ": needs " + std::to_string(ops) + " cuDNN operations (" +
                         std::to_string(graph.nodes.size()) + " nodes), over the limit of " + limit_text() +
                         "; kiln run, tune and compile cut such a graph into fused segments that fit");
  // The pattern matcher's limits (kiln/graph/limits.h), each with what was measured past it.
  struct Width {
    int64_t count, limit;
    const char* what;
    const char* measured;
  };
  for (const Width& w :
       {Width{entrance_node_count(graph), limits::kCudnnMaxEntranceNodes,
              "nodes read graph inputs only (entrance nodes)", "14 take 8 s, 51 run out of host memory"},
        Width{exit_node_count(graph), limits::kCudnnMaxExitNodes, "nodes have an output no node reads (exit nodes)",
              "24 take 24 s, 30 run out of host memory"},
        Width{max_tensor_readers(graph), limits::kCudnnMaxTensorReaders, "nodes read one tensor",
              "24 take 24 s and 2.5 GB, 30 run out of host memory"}})
    if (w.count > w.limit)
      return not_supported(where + ": " + std::to_string(w.count) + " " + w.what + ", over the limit of " +
                           std::to_string(w.limit) +
                           " per cuDNN operation graph (cuDNN 9.19 matches its fusion patterns in time exponential in "
                           "them: " +
                           w.measured +
                           "); kiln run, tune and compile cut such a graph into fused segments "
                           "that fit");
  return Status::ok();
}

StatusOr<std::vector<int>> cudnn_segment_groups(const Graph& graph) {
  std::vector<int> base = split_after_reductions(graph);
  if (!exceeds_cudnn_graph_limits(graph)) return base;
  // Costs for the cut: a matmul or convolution counts its IDENTITY copy whether or not the whole graph
  // needs it, since a segment boundary may turn its output into one the segment reads back and consumes.
  const GraphRoles roles(graph);
  std::vector<int64_t> cost(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const OpKind op = graph.nodes[i].op;
    const bool gemm =
        op == OpKind::kMatmul || op == OpKind::kConvFprop || op == OpKind::kConvDgrad || op == OpKind::kConvWgrad;
    cost[i] = gemm ? 2 : cudnn_operation_count(graph, roles, static_cast<int>(i));
  }
  StatusOr<std::vector<int>> groups = split_by_budget(
      graph, base, cost, cudnn_max_operations(),
      GroupShape{limits::kCudnnMaxEntranceNodes, limits::kCudnnMaxExitNodes, limits::kCudnnMaxTensorReaders});
  if (!groups.is_ok()) return not_supported(groups.status().message() + " (" + limit_text() + ")");
  return groups;
}

}  // namespace kiln
