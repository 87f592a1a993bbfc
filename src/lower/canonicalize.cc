// The canonical rules and the rewrite that applies them before lowering (canonicalize.h).
#include "lower/canonicalize.h"

#include <algorithm>
#include <cstdint>

namespace kiln::lower_detail {
namespace {

std::string shape_text(const TensorDesc& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? "," : "") + std::to_string(t.dims[i].value);
  return s + "]";
}

bool only_ops(const Graph& g, bool allow_matmul) {
  for (const Node& n : g.nodes)
    if (n.op != OpKind::kPointwise && !(allow_matmul && n.op == OpKind::kMatmul)) return false;
  return true;
}

// The rank every tensor is lifted to: max(min_rank, the largest rank in the graph).
size_t lifted_rank(const Graph& g, size_t min_rank) {
  size_t rank = min_rank;
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value) rank = std::max(rank, t.dims.size());
  return rank;
}

// The first tensor (not a by-value scalar) below the lifted rank: "tensor 'x' [256,4096] (rank 2)", or "".
std::string first_below(const Graph& g, size_t min_rank) {
  const size_t rank = lifted_rank(g, min_rank);
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value && t.dims.size() < rank)
      return "tensor '" + t.name + "' " + shape_text(t) + " (rank " + std::to_string(t.dims.size()) + ")";
  return "";
}

// ---- pointwise_rank_below_3 -------------------------------------------------------------------------
// cuDNN 9.19's pointwise engines on the H200, in a graph of pointwise ops only: a rank-2 tensor is read
// right in its first row only, the rest is NaN or garbage, in every engine configuration (relu on
// [256,4096] and [4,4], fp16 and fp32; add of two [256,4096]; chains of 2 to 120 such ops); the same graph
// at rank 3 ([1,256,4096]) is right. Rank-1 tensors get no engine configuration at all. Lifting every
// tensor to rank 3 (or to the graph's largest rank, for an operand of lower rank that broadcasts) with
// leading axes of extent 1 describes the same memory in the ranks that were measured right.
std::string find_pointwise_low_rank(const Graph& g) {
  if (g.nodes.empty() || !only_ops(g, /*allow_matmul=*/false)) return "";
  return first_below(g, 3);
}

// ---- matmul_rank_2 ----------------------------------------------------------------------------------
// cuDNN 9.19 offers no engine configuration for a rank-2 matmul ([16,64] x [64,64]: exit 5 on the H200,
// "no engine configuration") while the same product with a unit batch ([1,16,64] x [1,64,64]) is the
// shape every matmul engine Kiln tunes runs. Kiln's matmul broadcasts batch dims right-aligned, so an
// operand of lower rank is lifted the same way; pointwise epilogues are lifted with it.
std::string find_matmul_low_rank(const Graph& g) {
  bool has_matmul = false;
  for (const Node& n : g.nodes) has_matmul = has_matmul || n.op == OpKind::kMatmul;
  if (!has_matmul || !only_ops(g, /*allow_matmul=*/true)) return "";
  return first_below(g, 3);
}

StatusOr<Graph> lift_to_rank_3(const Graph& g, const std::string& where) { return lift_to_rank(g, 3, where); }

const char* kPointwiseRank2Spec = R"({
  "name": "canonical_pointwise_rank_2", "io_dtype": "fp16", "compute_dtype": "fp32",
  "tensors": {"x": {"dims": [256, 4096]}, "b": {"dims": [256, 4096]}},
  "nodes": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["r"]},
            {"name": "add", "op": "add", "inputs": ["r", "b"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

const char* kMatmulRank2Spec = R"({
  "name": "canonical_matmul_rank_2", "io_dtype": "bf16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
  "tensors": {"a": {"dims": [16, 64]}, "w": {"dims": [64, 64]}, "bias": {"dims": [1, 64]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["mm_out"]},
            {"name": "add_bias", "op": "bias_add", "inputs": ["mm_out", "bias"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

}  // namespace

StatusOr<Graph> lift_to_rank(const Graph& g, size_t min_rank, const std::string& where) {
  const size_t rank = lifted_rank(g, min_rank);
  Graph out = g;
  for (TensorDesc& t : out.tensors) {
    if (t.by_value || t.dims.size() >= rank) continue;
    if (t.strides.size() != t.dims.size())
      return internal_error(where + ": tensor '" + t.name + "' has no strides (validate the graph first)");
    const size_t add = rank - t.dims.size();
    // A leading axis of extent 1 is never stepped along; it gets the tensor's span (the largest extent times
    // stride: a row-major view's outer stride, as cuDNN was shown it in the rank-3 graphs, and the same for a
    // transposed operand), saturating where that overflows (any stride serves an axis of extent 1).
    int64_t outer = 1;
    for (size_t i = 0; i < t.dims.size(); ++i) {
      int64_t span = 0;
      if (__builtin_mul_overflow(t.dims[i].value, t.strides[i], &span)) span = INT64_MAX;
      outer = std::max(outer, span);
    }
    t.dims.insert(t.dims.begin(), add, Dim{1, ""});
    t.strides.insert(t.strides.begin(), add, outer);
    t.layout = Layout::kExplicit;
  }
  Status st = validate_graph(out);
  if (!st.is_ok()) return internal_error(where + ": the lifted graph does not validate (a bug): " + st.message());
  return out;
}

const std::vector<KnownDefect>& canonical_rules() {
  static const std::vector<KnownDefect> kTable = {
      {"pointwise_rank_below_3",
       "in a graph of pointwise ops only, a rank-2 tensor is read right in its first row only (NaN or garbage "
       "elsewhere) and a rank-1 tensor gets no engine configuration; every tensor is lifted to rank 3 with leading "
       "unit axes",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (e3f320d): relu on [256,4096] and [4,4] (fp16, fp32), add of two "
       "[256,4096], chains of 2 to 120 such ops wrong in every engine configuration; right at rank 3 ([1,256,4096]); "
       "rank-1 pointwise graphs refused with no engine configuration",
       kPointwiseRank2Spec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/pointwise_rank_below_3",
       find_pointwise_low_rank,
       lift_to_rank_3},
      {"matmul_rank_2",
       "a matmul whose operands have rank 2 gets no engine configuration; the graph (matmul and pointwise "
       "epilogues) is lifted to rank 3, a unit batch in front",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (e3f320d): [16,64] x [64,64] refused with no engine configuration "
       "(13 of 17 random matmul specs refused, rank 2 among them); rank-3 matmuls with a unit batch run in every "
       "tuned example",
       kMatmulRank2Spec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/matmul_rank_2",
       find_matmul_low_rank,
       lift_to_rank_3},
  };
  return kTable;
}

StatusOr<DefectWorkaround> rewrite_for_cudnn(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(DefectWorkaround c,
                        apply_rewrites(canonical_rules(), DefectWorkaround{graph, {}}, "canonical rule"));
  // Every canonical rule lifts ranks (at most one matches: pointwise-only graphs, or graphs with a matmul).
  for (std::string& a : c.applied) a += ", lowered at rank " + std::to_string(lifted_rank(c.graph, 0));
  return apply_rewrites(known_defects(), std::move(c), "known cuDNN defect");
}

}  // namespace kiln::lower_detail
