// The engine coverage registry (engine_coverage.h).
#include "lower/engine_coverage.h"

#include <algorithm>

#include "lower/canonicalize.h"
#include "lower/known_defects.h"

namespace kiln::lower_detail {
namespace {

bool pointwise_only(const Graph& g) {
  if (g.nodes.empty()) return false;
  for (const Node& n : g.nodes)
    if (n.op != OpKind::kPointwise) return false;
  return true;
}

// ---- reduction_output_not_fp32 ----
std::string find_reduction_output_not_fp32(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op != OpKind::kReduction) continue;
    const TensorDesc& y = g.tensors[static_cast<size_t>(n.outputs[0])];
    const DataType dt = g.dtype_of(n.outputs[0]);
    if (dt != DataType::kFloat32)
      return "node '" + n.name + "' (" + node_op_name(n) + ") writes '" + y.name + "' as " + dtype_name(dt) +
             " (declare it \"dtype\": \"fp32\", and cast after it if needed)";
  }
  return "";
}

// ---- reduction_strided_input ----
// The memory a tensor's strides span is more than its elements: padded or strided rows.
bool not_packed(const TensorDesc& t) {
  if (t.by_value || t.strides.size() != t.dims.size()) return false;
  int64_t span = 1;
  for (size_t i = 0; i < t.dims.size(); ++i) span += (t.dims[i].value - 1) * t.strides[i];
  return span > t.element_count();
}

std::string find_reduction_strided_input(const Graph& g) {
  bool reduction_graph = false;
  for (const Node& n : g.nodes) {
    if (n.op != OpKind::kReduction) continue;
    reduction_graph = true;
    const TensorDesc& x = g.tensors[static_cast<size_t>(n.inputs[0])];
    if (not_packed(x))
      return "node '" + n.name + "' (" + node_op_name(n) + "): input '" + x.name + "' " + dims_text(x) +
             " is not densely packed (padded or strided rows)";
  }
  if (!reduction_graph) return "";
  for (const TensorDesc& x : g.tensors)  // read through pointwise ops before the reduction
    if (not_packed(x))
      return "tensor '" + x.name + "' " + dims_text(x) + " is not densely packed (padded or strided rows)";
  return "";
}

// The canonical pointwise form's order for a tensor: rank 3 strides decreasing; rank 4-5 the innermost axis
// second (channels last).
bool in_canonical_order(const TensorDesc& t) {
  std::vector<size_t> order(t.dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (order.size() >= 4) {
    order.erase(order.begin() + 1);
    order.push_back(1);
  }
  int64_t prev = INT64_MAX;
  for (size_t a : order) {
    if (t.dims[a].value == 1) continue;
    if (t.strides[a] >= prev) return false;
    prev = t.strides[a];
  }
  return true;
}

// ---- pointwise_mixed_layouts ----
std::string find_pointwise_mixed_layouts(const Graph& g) {
  if (!pointwise_only(g)) return "";
  auto c = canonical_pointwise_form(g);
  if (!c.is_ok()) return "";
  for (size_t i = 0; i < c->tensors.size(); ++i) {
    const TensorDesc& t = c->tensors[i];
    if (!t.by_value && !in_canonical_order(t))
      return "tensor '" + t.name + "' " + dims_text(g.tensors[i]) + " is laid out in another memory order than the " +
             "graph's largest output (as cuDNN would read them: " + dims_text(t) + ")";
  }
  return "";
}

// ---- pointwise_broadcast_rank_4 ----
std::string find_pointwise_broadcast_rank_4(const Graph& g) {
  if (!pointwise_only(g)) return "";
  auto c = canonical_pointwise_form(g);
  if (!c.is_ok()) return "";
  size_t rank = 0;
  std::vector<int64_t> ext;
  for (const TensorDesc& t : c->tensors)
    if (!t.by_value) {
      rank = t.dims.size();
      ext.resize(rank, 1);
      for (size_t i = 0; i < rank; ++i) ext[i] = std::max(ext[i], t.dims[i].value);
    }
  if (rank < 4) return "";
  for (size_t i = 0; i < c->tensors.size(); ++i) {
    const TensorDesc& t = c->tensors[i];
    if (t.by_value) continue;
    for (size_t a = 0; a < rank; ++a)
      if (t.dims[a].value == 1 && ext[a] > 1)
        return "tensor '" + t.name + "' " + dims_text(g.tensors[i]) +
               " broadcasts over axes that stay apart (the graph " + "needs rank " + std::to_string(rank) +
               " after merging its axes)";
  }
  return "";
}

// A norm node followed by a pointwise node in the same graph: "node 'n' (layer_norm) is followed by node 'r'
// (relu)", or "" (the first such pair for which `also` holds of the norm).
std::string norm_with_epilogue(const Graph& g, OpKind norm, bool (*also)(const Graph&, const Node&)) {
  for (const Node& n : g.nodes) {
    if (n.op != norm || !also(g, n)) continue;
    for (const Node& m : g.nodes)
      for (int in : m.inputs)
        if (in == n.outputs[0] && m.op == OpKind::kPointwise)
          return "node '" + n.name + "' (" + node_op_name(n) + ") " +
                 dims_text(g.tensors[static_cast<size_t>(n.inputs[0])]) + " is followed by node '" + m.name + "' (" +
                 node_op_name(m) + ") in the same graph";
  }
  return "";
}

// ---- rms_norm_epilogue ----
std::string find_rms_norm_epilogue(const Graph& g) {
  return norm_with_epilogue(g, OpKind::kRmsNorm, [](const Graph& gr, const Node& n) {
    return gr.tensors[static_cast<size_t>(n.inputs[0])].dims.front().value == 1;
  });
}

// ---- layer_norm_epilogue_inner_axes ----
std::string find_layer_norm_epilogue_inner_axes(const Graph& g) {
  return norm_with_epilogue(g, OpKind::kLayerNorm, [](const Graph& gr, const Node& n) {
    const TensorDesc& x = gr.tensors[static_cast<size_t>(n.inputs[0])];
    const DataType dt = gr.dtype_of(n.inputs[0]);
    if (dt != DataType::kFloat16 && dt != DataType::kBFloat16) return false;
    for (size_t i = 2; i < x.dims.size(); ++i)
      if (x.dims[i].value > 1) return true;
    return false;
  });
}

// ---- matmul_batch_broadcast ----
std::string find_matmul_batch_broadcast(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op != OpKind::kMatmul) continue;
    const TensorDesc& a = g.tensors[static_cast<size_t>(n.inputs[0])];
    const TensorDesc& b = g.tensors[static_cast<size_t>(n.inputs[1])];
    if (a.dims.size() > 3 || b.dims.size() > 3)
      return "node '" + n.name + "' (matmul): " + dims_text(a) + " x " + dims_text(b) +
             " has batch axes that do not merge into one (they broadcast differently)";
  }
  return "";
}

const char* kReductionFp16Spec = R"({"name": "gap_reduction_fp16", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [64, 128]}}, "nodes": [{"name": "r", "op": "reduce_sum", "inputs": ["x"],
  "outputs": ["y"], "axes": [1]}], "outputs": ["y"]})";

const char* kReductionStridedSpec = R"({"name": "gap_reduction_strided_input", "io_dtype": "fp32",
  "tensors": {"x": {"dims": [64, 128], "strides": [136, 1]}}, "nodes": [{"name": "r", "op": "reduce_sum",
  "inputs": ["x"], "outputs": ["y"], "axes": [1]}], "outputs": ["y"]})";

const char* kMixedLayoutSpec = R"({"name": "gap_pointwise_mixed_layouts", "io_dtype": "fp32",
  "tensors": {"a": {"dims": [5, 8, 64]}, "b": {"dims": [5, 8, 64], "layout": "NHWC"}},
  "nodes": [{"name": "add", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})";

const char* kBroadcastRank4Spec = R"({"name": "gap_pointwise_broadcast_rank_4", "io_dtype": "fp32",
  "tensors": {"x": {"dims": [17, 5, 3, 32, 4]}, "b": {"dims": [17, 1, 3, 32, 1]}},
  "nodes": [{"name": "add", "op": "bias_add", "inputs": ["x", "b"], "outputs": ["y"]}], "outputs": ["y"]})";

const char* kRmsNormReluSpec = R"({"name": "gap_rms_norm_epilogue", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [1, 128, 1, 1]}, "scale": {"dims": [1, 128, 1, 1], "dtype": "fp32"}},
  "nodes": [{"name": "norm", "op": "rms_norm", "inputs": ["x", "scale"], "outputs": ["t"], "epsilon": 0.001},
            {"name": "relu", "op": "relu", "inputs": ["t"], "outputs": ["y"]}], "outputs": ["y"]})";

const char* kLayerNormReluSpec = R"({"name": "gap_layer_norm_epilogue_inner_axes", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [64, 64, 2, 1]}, "scale": {"dims": [1, 64, 2, 1], "dtype": "fp32"},
              "bias": {"dims": [1, 64, 2, 1], "dtype": "fp32"}},
  "nodes": [{"name": "norm", "op": "layer_norm", "inputs": ["x", "scale", "bias"], "outputs": ["t"], "epsilon": 0.001},
            {"name": "relu", "op": "relu", "inputs": ["t"], "outputs": ["y"]}], "outputs": ["y"]})";

const char* kMatmulBroadcastSpec = R"({"name": "gap_matmul_batch_broadcast", "io_dtype": "fp16",
  "tensors": {"a": {"dims": [2, 3, 16, 64]}, "b": {"dims": [1, 3, 64, 32]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})";

}  // namespace

const std::vector<CoverageGap>& engine_coverage_gaps() {
  static const std::vector<CoverageGap> kTable = {
      {"reduction_output_not_fp32",
       "cuDNN offers no standalone reduction engine that writes fp16 or bf16 (it does for an fp32 output)",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: [64,128] -> [64,1] sum and max with an fp16 or bf16 output "
       "get no engine configuration; the same with an fp32 output (fp16, bf16 or fp32 input) do",
       kReductionFp16Spec,
       find_reduction_output_not_fp32},
      {"reduction_strided_input",
       "cuDNN offers no standalone reduction engine for a tensor that is not densely packed (padded or strided "
       "rows); it does for the same values packed",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: [64,128] strides [136,1] and [128,64] strides [1,128] "
       "reduced over the last axis get no engine configuration; packed [64,128] does",
       kReductionStridedSpec,
       find_reduction_strided_input},
      {"pointwise_mixed_layouts",
       "cuDNN offers no pointwise engine for tensors of one graph laid out in different memory orders (a "
       "channels-last operand beside row-major ones)",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: [5,8,64] + [5,8,64] NHWC and 11 of 200 random pointwise "
       "graphs with an NHWC or transposed operand beside row-major ones get no engine configuration",
       kMixedLayoutSpec,
       find_pointwise_mixed_layouts},
      {"pointwise_broadcast_rank_4",
       "cuDNN offers no pointwise engine at rank 4 or 5 (channels last) for an operand that broadcasts over some "
       "axes; at rank 3 it does",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: [17,5,3,32,4] + [17,1,3,32,1] (lowered as [17,4,5,96] + "
       "[17,1,1,96]) and 6 of 200 random pointwise graphs like it get no engine configuration",
       kBroadcastRank4Spec,
       find_pointwise_broadcast_rank_4},
      {"rms_norm_epilogue",
       "cuDNN offers no engine for an RMS norm over a batch of 1 with a pointwise op after it in one graph (run the "
       "pointwise op as a graph of its own)",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (issue 31's sweep, seed 1, specs 33 and 492): rms_norm of "
       "[1,128,1,1] fp16 and [1,1024,1,1] bf16 followed by relu get no engine configuration; the same with a batch "
       "of 16 or 64 ([16,768,2], [64,256,1,4]) runs",
       kRmsNormReluSpec,
       find_rms_norm_epilogue},
      {"layer_norm_epilogue_inner_axes",
       "cuDNN offers no engine for an fp16 or bf16 layer norm with a pointwise op after it in one graph when the "
       "normalized tensor has an extent above 1 past its second axis (run the pointwise op as a graph of its own, or "
       "merge those axes into the second)",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (issue 31's sweep, seed 1, specs 116, 241, 400): layer_norm then "
       "relu on fp16 [64,64,2,1], fp16 [64,64,1,1,2] and bf16 [64,128,4,1,2] get no engine configuration; fp32 "
       "[1,128,4], [16,64,1,2] and [64,1024,4,1,1] with relu, and fp16 or bf16 layer norms without relu, run",
       kLayerNormReluSpec,
       find_layer_norm_epilogue_inner_axes},
      {"matmul_batch_broadcast",
       "cuDNN's matmul takes one batch axis; operands whose batch axes broadcast differently do not merge into one",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32: rank-4 matmuls whose batch dims broadcast refused with no engine "
       "configuration (issue 31's sweep, exit 5)",
       kMatmulBroadcastSpec,
       find_matmul_batch_broadcast},
  };
  return kTable;
}

std::string name_engine_coverage_gap(const Graph& graph) {
  for (const CoverageGap& gap : engine_coverage_gaps()) {
    const std::string where = gap.find(graph);
    if (where.empty()) continue;
    std::string seen;
    for (int64_t v : gap.seen_on) seen += (seen.empty() ? "" : ", ") + std::to_string(v);
    return std::string(gap.id) + ": " + where + ": " + gap.summary + " (seen on cuDNN " + seen + ")";
  }
  return "";
}

}  // namespace kiln::lower_detail
