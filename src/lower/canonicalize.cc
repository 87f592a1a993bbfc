// The canonical rules and the rewrite that applies them before lowering (canonicalize.h).
#include "lower/canonicalize.h"

#include <algorithm>
#include <cstdint>

namespace kiln::lower_detail {
namespace {

// The family a canonical rule sees: graphs of pointwise ops only; of matmuls with pointwise epilogues and
// reductions to one element (the FP8 recipe's AMAX); of reductions with pointwise ops; anything else (convs,
// norms, sdpa, reductions beside a matmul that keep axes) is lowered as written.
enum class Family { kPointwise, kMatmul, kReduction, kOther };

Family family_of(const Graph& g) {
  bool matmul = false, reduction = false;
  for (const Node& n : g.nodes) {
    if (n.op == OpKind::kMatmul) matmul = true;
    else if (n.op == OpKind::kReduction) reduction = true;
    else if (n.op != OpKind::kPointwise) return Family::kOther;
  }
  if (matmul) {
    for (const Node& n : g.nodes)
      if (n.op == OpKind::kReduction && g.tensors[static_cast<size_t>(n.outputs[0])].element_count() != 1)
        return Family::kOther;
    return Family::kMatmul;
  }
  return reduction ? Family::kReduction : Family::kPointwise;
}

// A reduction's axes, read from its tensors after their axes moved: every axis its output holds at extent 1.
void renumber_reduction_axes(Graph& g) {
  for (Node& n : g.nodes) {
    if (n.op != OpKind::kReduction) continue;
    const TensorDesc& y = g.tensors[static_cast<size_t>(n.outputs[0])];
    n.reduction.axes.clear();
    for (size_t i = 0; i < y.dims.size(); ++i)
      if (y.dims[i].value == 1) n.reduction.axes.push_back(static_cast<int>(i));
  }
}

// Strides strictly decreasing over the axes of extent above 1 (a row-major order, padded or not).
bool strides_decrease(const TensorDesc& t) {
  int64_t prev = INT64_MAX;
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (t.dims[i].value == 1) continue;
    if (t.strides[i] >= prev) return false;
    prev = t.strides[i];
  }
  return true;
}

// The largest graph output (else the largest tensor): the one whose memory order the canonical form keeps.
const TensorDesc& reference_tensor(const Graph& g) {
  const TensorDesc* best = nullptr;
  for (int pass = 0; pass < 2 && !best; ++pass)
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      const TensorDesc& t = g.tensors[i];
      if (t.by_value) continue;
      if (pass == 0 && std::find(g.outputs.begin(), g.outputs.end(), static_cast<int>(i)) == g.outputs.end()) continue;
      if (!best || t.element_count() > best->element_count()) best = &t;
    }
  return best ? *best : g.tensors.front();
}

// Every tensor (not a by-value scalar; all of one rank) with its axes in `order` (new axis j = old order[j]).
void permute_axes(Graph& g, const std::vector<size_t>& order) {
  for (TensorDesc& t : g.tensors) {
    if (t.by_value) continue;
    std::vector<Dim> d;
    std::vector<int64_t> st;
    for (size_t o : order) {
      d.push_back(t.dims[o]);
      st.push_back(t.strides[o]);
    }
    t.dims = std::move(d);
    t.strides = std::move(st);
    t.layout = Layout::kExplicit;
  }
}

// The axis order that puts `t`'s strides in decreasing order (stable: ties keep their order).
std::vector<size_t> row_major_order(const TensorDesc& t) {
  std::vector<size_t> order(t.dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t.strides[a] > t.strides[b]; });
  return order;
}

// Coalesces axes [lo, hi) of every tensor (not a by-value scalar; all of rank R): an axis of extent 1 in every
// tensor is dropped, and two neighbours are merged into one when every tensor either holds both (extent as
// the graph's, the outer one's stride the inner one's times its extent: the same memory as one axis) or
// broadcasts over both (extent 1 in both). An axis that follows a dynamic dim is never dropped or merged: the
// form must hold for every value of the symbol.
void coalesce_axes(Graph& g, size_t lo, size_t hi) {
  std::vector<const TensorDesc*> ts;
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value) ts.push_back(&t);
  if (ts.empty()) return;
  const size_t rank = ts.front()->dims.size();
  std::vector<int64_t> ext(rank, 1);
  std::vector<bool> sym(rank, false);
  for (const TensorDesc* t : ts)
    for (size_t i = 0; i < rank; ++i) {
      ext[i] = std::max(ext[i], t->dims[i].value);
      sym[i] = sym[i] || t->dims[i].follows_symbols();
    }
  // groups of old axes, in order, each becoming one new axis
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < rank; ++i) {
    const bool inside = i >= lo && i < hi;
    if (inside && ext[i] == 1 && !sym[i]) continue;  // dropped
    if (inside && !groups.empty() && !sym[i]) {
      const size_t prev = groups.back().back();
      bool merge = prev >= lo && !sym[prev];
      for (const TensorDesc* t : ts) {
        if (!merge) break;
        const bool both_held = t->dims[prev].value == ext[prev] && t->dims[i].value == ext[i] &&
                               t->strides[prev] == t->strides[i] * ext[i];
        const bool both_broadcast = t->dims[prev].value == 1 && t->dims[i].value == 1;
        merge = both_held || both_broadcast;
      }
      if (merge) {
        groups.back().push_back(i);
        continue;
      }
    }
    groups.push_back({i});
  }
  for (TensorDesc& t : g.tensors) {
    if (t.by_value) continue;
    std::vector<Dim> d;
    std::vector<int64_t> st;
    for (const auto& grp : groups) {
      if (grp.size() == 1) {
        d.push_back(t.dims[grp[0]]);
      } else {
        int64_t e = 1;
        for (size_t a : grp) e *= t.dims[a].value;
        d.push_back(Dim{e, ""});
      }
      st.push_back(t.strides[grp.back()]);
    }
    t.dims = std::move(d);
    t.strides = std::move(st);
    t.layout = Layout::kExplicit;
  }
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
      return "tensor '" + t.name + "' " + dims_text(t) + " (rank " + std::to_string(t.dims.size()) + ")";
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
  if (g.nodes.empty() || family_of(g) != Family::kPointwise) return "";
  return first_below(g, 3);
}

// ---- matmul_rank_2 ----------------------------------------------------------------------------------
// cuDNN 9.19 offers no engine configuration for a rank-2 matmul ([16,64] x [64,64]: exit 5 on the H200,
// "no engine configuration") while the same product with a unit batch ([1,16,64] x [1,64,64]) is the
// shape every matmul engine Kiln tunes runs. Kiln's matmul broadcasts batch dims right-aligned, so an
// operand of lower rank is lifted the same way; pointwise epilogues are lifted with it.
std::string find_matmul_low_rank(const Graph& g) {
  if (family_of(g) != Family::kMatmul) return "";
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

// "tensor 'x' [8,32,2,17] strides [1088,34,17,1] as [8,17,32,2] strides [1088,1,34,17]" for the first tensor
// whose description `to` changes, or "" when none does.
std::string first_change(const Graph& from, const Graph& to) {
  for (size_t i = 0; i < from.tensors.size() && i < to.tensors.size(); ++i) {
    const TensorDesc& a = from.tensors[i];
    const TensorDesc& b = to.tensors[i];
    if (a.by_value || (a.shape() == b.shape() && a.strides == b.strides)) continue;
    return "tensor '" + a.name + "' " + dims_text(a) + " strides " + ints_text(a.strides) + " as " + dims_text(b) +
           " strides " + ints_text(b.strides);
  }
  return "";
}

Status revalidate(Graph& g, const std::string& where) {
  renumber_reduction_axes(g);
  Status st = validate_graph(g);
  if (!st.is_ok()) return internal_error(where + ": the canonical graph does not validate (a bug): " + st.message());
  return Status::ok();
}

// ---- pointwise_layout --------------------------------------------------------------------------------
// cuDNN 9.19's pointwise engines (H200 profile, heuristics modes A, B and FALLBACK) are offered for rank-3
// tensors in row-major order and for rank-4 and rank-5 tensors with the innermost axis second (NHWC,
// NDHWC); none for row-major rank 4 or 5 ([8,32,2,17], [3,5,3,16,17]), any rank 6, or rank 3 with its
// innermost axis second ([8,17,64] strides [1088,1,17]). A graph of pointwise ops is elementwise, so its
// axes may be reordered and neighbours merged, as long as every tensor moves alike: the axes are put in
// the memory order of the largest output, coalesced (coalesce_axes), and the result described at rank 3
// (row-major) or, when more axes remain, at rank 4 or 5 with the innermost axis second.
StatusOr<Graph> canonical_pointwise(const Graph& g, const std::string& where) {
  const size_t rank = lifted_rank(g, 0);
  KILN_ASSIGN_OR_RETURN(Graph out, lift_to_rank(g, rank, where));
  bool runs = rank == 3;
  for (const TensorDesc& t : out.tensors) runs = runs && (t.by_value || strides_decrease(t));
  if (runs) return out;
  permute_axes(out, row_major_order(reference_tensor(out)));
  coalesce_axes(out, 0, rank);
  const size_t r = reference_tensor(out).dims.size();
  if (r <= 3) return lift_to_rank(out, 3, where);
  if (r > 5)
    return not_supported(where + ": its axes coalesce to no fewer than " + std::to_string(r) +
                         " (operands broadcast over different axes), and cuDNN 9.19's pointwise engines take rank 3, "
                         "or rank 4 and 5 with the innermost axis second");
  std::vector<size_t> order = {0, r - 1};
  for (size_t i = 1; i + 1 < r; ++i) order.push_back(i);
  permute_axes(out, order);
  KILN_RETURN_IF_ERROR(revalidate(out, where));
  return out;
}

std::string find_pointwise_layout(const Graph& g) {
  if (g.nodes.empty() || family_of(g) != Family::kPointwise) return "";
  auto c = canonical_pointwise(g, "");
  if (!c.is_ok()) return "node '" + g.nodes.front().name + "'";  // the rewrite refuses it, saying why
  return first_change(g, *c);
}

// ---- pointwise_long_rows -----------------------------------------------------------------------------
// cuDNN 9.19's pointwise kernels on the H200 fail to launch (CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
// `kiln run` exit 10) when the innermost axis in memory is long: relu over [1, N] bf16 ran for N up to
// 262144 (2^18) and failed from 1048576 (2^20) up to 2^31-1, as did [2, 2^28], [64, 2^22] and fp32
// [1, 2^29]; [1, 16384, 65536] and [65536, 32768] (2^31 elements) ran. So it is the row, not the size. A
// graph of pointwise ops is elementwise: in the canonical rank-3 form a row longer than kMaxPointwiseRow is
// cut into rows of its largest divisor up to that length, the axis that cut makes taking the place of an
// axis every tensor holds at extent 1. Refused, naming the limit, where no such axis or divisor exists.
constexpr int64_t kMaxPointwiseRow = int64_t{1} << 18;
constexpr int64_t kMinPointwiseRowAfterCut = 1024;  // a shorter row would run, but far below memory speed

// The innermost axis in memory of the canonical form: the last at rank 3, the second (channels) at 4 and 5.
size_t row_axis(size_t rank) { return rank == 3 ? 2 : 1; }

std::string find_pointwise_long_rows(const Graph& g) {
  if (g.nodes.empty() || family_of(g) != Family::kPointwise) return "";
  for (const TensorDesc& t : g.tensors) {
    if (t.by_value || t.dims.size() < 3) continue;
    const size_t ax = row_axis(t.dims.size());
    if (t.dims[ax].value > kMaxPointwiseRow)
      return "tensor '" + t.name + "' " + dims_text(t) + " (rows of " + std::to_string(t.dims[ax].value) + " elements)";
  }
  return "";
}

StatusOr<Graph> cut_pointwise_rows(const Graph& g, const std::string& where) {
  const std::string limit =
      where + ": cuDNN 9.19's pointwise kernels fail to launch on rows (the innermost axis) longer than " +
      std::to_string(kMaxPointwiseRow) + " elements (seen on the H200)";
  const size_t rank = lifted_rank(g, 0);
  if (rank != 3) return not_supported(limit + ", and at rank " + std::to_string(rank) + " the row cannot be cut");
  int64_t c = 1;
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value) {
      if (t.dims[2].follows_symbols())
        return not_supported(limit +
                             ", and the row's extent follows a dynamic dim, so it cannot be cut for every value");
      c = std::max(c, t.dims[2].value);
    }
  int64_t k = 1;
  for (int64_t d = kMaxPointwiseRow; d >= kMinPointwiseRowAfterCut; --d)
    if (c % d == 0) {
      k = d;
      break;
    }
  if (k == 1)
    return not_supported(limit + ", and " + std::to_string(c) + " has no divisor from " +
                         std::to_string(kMinPointwiseRowAfterCut) + " to " + std::to_string(kMaxPointwiseRow) +
                         " to cut it into rows of");
  // The axis the cut's outer part replaces: one every tensor holds at extent 1 (the middle one, else the first).
  auto unit_everywhere = [&](size_t ax) {
    for (const TensorDesc& t : g.tensors)
      if (!t.by_value && (t.dims[ax].value != 1 || t.dims[ax].follows_symbols())) return false;
    return true;
  };
  // Else the first two axes as one, where every tensor holds both densely or broadcasts over both.
  auto mergeable = [&] {
    for (const TensorDesc& t : g.tensors) {
      if (t.by_value) continue;
      if (t.dims[0].follows_symbols() || t.dims[1].follows_symbols()) return false;
      const bool both_broadcast = t.dims[0].value == 1 && t.dims[1].value == 1;
      const bool dense = t.strides[0] == t.strides[1] * t.dims[1].value;
      if (!both_broadcast && !dense) return false;
    }
    return true;
  };
  const int keep = unit_everywhere(1) ? 0 : unit_everywhere(0) ? 1 : mergeable() ? 2 : -1;
  if (keep < 0)
    return not_supported(limit + ", and cutting the row of " + std::to_string(c) +
                         " needs rank 4, where cuDNN's pointwise engines take only the innermost axis second");
  Graph out = g;
  for (TensorDesc& t : out.tensors) {
    if (t.by_value) continue;
    const bool holds = t.dims[2].value == c;  // else extent 1: broadcast along the row
    const Dim outer = keep == 2 ? Dim{t.dims[0].value * t.dims[1].value, ""} : t.dims[static_cast<size_t>(keep)];
    const int64_t outer_stride = t.strides[keep == 2 ? 1 : static_cast<size_t>(keep)];
    t.dims = {outer, Dim{holds ? c / k : 1, ""}, Dim{holds ? k : 1, ""}};
    t.strides = {outer_stride, holds ? k : 1, 1};
    t.layout = Layout::kExplicit;
  }
  KILN_RETURN_IF_ERROR(revalidate(out, where));
  // A row-wide operand beside the cut rows ([4,1,1] + [4,2,150000]) is the pattern cuDNN reads wrong
  // (pointwise_vector_broadcast), whose fold would join the rows again.
  for (const KnownDefect& d : known_defects())
    if (std::string hit = d.find(out); !hit.empty())
      return not_supported(limit + ", and the graph with its rows cut (" + first_change(g, out) +
                           ") meets known cuDNN defect " + d.id + " (" + hit + ")");
  return out;
}

const char* kPointwiseLongRowsSpec = R"({
  "name": "canonical_pointwise_long_rows", "io_dtype": "bf16",
  "tensors": {"x": {"dims": [1, 1, 1048576]}},
  "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

// ---- reduction_rows ----------------------------------------------------------------------------------
// cuDNN 9.19 offers a standalone reduction engine (H200 profile) only for a rank-2 row-major tensor reduced
// along its last axis or both ([64,128] -> [64,1] or [1,1], fp32, fp16, bf16; sum, max, amax), and none for
// rank 1, rank 3 to 6 whatever the axes ([4,64,128] over [2], [0], [1,2], all), a reduction along the
// first axis, or a transposed or padded rank-2 tensor. A reduction over the innermost axes of a row-major
// tensor is exactly that [rows, columns] view: the axes are put in the input's memory order, coalesced,
// and described at rank 2.
StatusOr<Graph> canonical_reduction(const Graph& g, const std::string& where) {
  const size_t rank = lifted_rank(g, 0);
  KILN_ASSIGN_OR_RETURN(Graph out, lift_to_rank(g, rank, where));
  const Node* red = nullptr;
  for (const Node& n : out.nodes)
    if (n.op == OpKind::kReduction) {
      if (red && n.reduction.axes != red->reduction.axes)
        return not_supported(where + ": its reductions reduce different axes, which no one [rows, columns] view holds");
      if (!red) red = &n;
    }
  const int xi = red->inputs[0], yi = red->outputs[0];
  permute_axes(out, row_major_order(out.tensors[static_cast<size_t>(xi)]));
  coalesce_axes(out, 0, rank);
  const TensorDesc& x = out.tensors[static_cast<size_t>(xi)];
  const TensorDesc& y = out.tensors[static_cast<size_t>(yi)];
  size_t first_reduced = x.dims.size();
  for (size_t i = 0; i < x.dims.size(); ++i)
    if (y.dims[i].value == 1 && x.dims[i].value > 1 && first_reduced == x.dims.size()) first_reduced = i;
  for (size_t i = first_reduced; i < x.dims.size(); ++i)
    if (!(y.dims[i].value == 1 && x.dims[i].value > 1))
      return not_supported(where + ": the reduced axes are not the innermost in memory (in memory order, " +
                           dims_text(x) + " -> " + dims_text(y) +
                           "), and cuDNN 9.19 reduces only a row-major [rows, columns] view along its columns");
  if (first_reduced > 1 || x.dims.size() - first_reduced > 1)
    return not_supported(where + ": its kept or reduced axes do not merge into one (in memory order, " + dims_text(x) +
                         " -> " + dims_text(y) +
                         ": padded strides or operands broadcast over some of them), and cuDNN 9.19 reduces only a "
                         "[rows, columns] view");
  if (first_reduced == x.dims.size()) {  // only unit axes reduced: reduce a trailing axis of extent 1
    for (TensorDesc& t : out.tensors) {
      if (t.by_value) continue;
      t.dims.push_back(Dim{1, ""});
      t.strides.push_back(1);
    }
  }
  if (out.tensors[static_cast<size_t>(xi)].dims.size() < 2) return lift_to_rank(out, 2, where);
  KILN_RETURN_IF_ERROR(revalidate(out, where));
  return out;
}

std::string find_reduction_rows(const Graph& g) {
  if (family_of(g) != Family::kReduction) return "";
  auto c = canonical_reduction(g, "");
  if (!c.is_ok()) {  // the rewrite refuses it, saying why
    for (const Node& n : g.nodes)
      if (n.op == OpKind::kReduction) return "node '" + n.name + "' (" + node_op_name(n) + ")";
  }
  return first_change(g, *c);
}

// ---- matmul_batch_axes -------------------------------------------------------------------------------
// cuDNN 9.19's matmul takes one batch axis: with two or more (a [2,3,16,64] x [64,32] product, or
// [2,3,16,64] x [1,3,64,32]) its operation graph is refused (CUDNN_STATUS_NOT_SUPPORTED at finalize, H200
// profile, when an AMAX reduction follows) or no engine is offered (exit 5 on the H200). Batch axes that
// every tensor holds densely or broadcasts alike are one batch axis: coalesced into it, or into a unit batch.
StatusOr<Graph> canonical_matmul_batch(const Graph& g, const std::string& where) {
  const size_t rank = lifted_rank(g, 3);
  KILN_ASSIGN_OR_RETURN(Graph out, lift_to_rank(g, rank, where));
  if (rank == 3) return out;
  coalesce_axes(out, 0, rank - 2);
  const size_t r = reference_tensor(out).dims.size();
  if (r > 3) return lift_to_rank(g, rank, where);  // left to cuDNN (engine_coverage.h names a refusal)
  if (r < 3) return lift_to_rank(out, 3, where);
  KILN_RETURN_IF_ERROR(revalidate(out, where));
  return out;
}

std::string find_matmul_batch_axes(const Graph& g) {
  if (family_of(g) != Family::kMatmul || lifted_rank(g, 3) == 3) return "";
  auto c = canonical_matmul_batch(g, "");
  if (!c.is_ok() || reference_tensor(*c).dims.size() > 3) return "";
  return first_change(g, *c);
}

// ---- norm_rank_4 --------------------------------------------------------------------------------------
// cuDNN 9.19's layer norm on a rank-2 [4,768] fp16 tensor (fp32 scale and bias) ran on the H200 and faulted
// with a misaligned address, which poisons the process's CUDA context (every later call fails); cuDNN's norms
// are described for [N, C, H, W] (docs/spec.md: write [tokens, hidden] as [tokens, hidden, 1, 1]). A norm
// normalizes over every axis but the first, so trailing axes of extent 1 change nothing: a graph of norms and
// pointwise ops whose tensors all have one rank below 4 gets them up to rank 4.
bool norm_graph_below_rank_4(const Graph& g, size_t* rank) {
  bool norm = false;
  for (const Node& n : g.nodes) {
    if (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) norm = true;
    else if (n.op != OpKind::kPointwise) return false;
  }
  if (!norm) return false;
  *rank = 0;
  for (const TensorDesc& t : g.tensors) {
    if (t.by_value) continue;
    if (*rank != 0 && t.dims.size() != *rank) return false;  // mixed ranks: lowered as written
    *rank = t.dims.size();
  }
  return *rank > 0 && *rank < 4;
}

std::string find_norm_low_rank(const Graph& g) {
  size_t rank = 0;
  if (!norm_graph_below_rank_4(g, &rank)) return "";
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value) return "tensor '" + t.name + "' " + dims_text(t) + " (rank " + std::to_string(rank) + ")";
  return "";
}

StatusOr<Graph> append_unit_axes_to_rank_4(const Graph& g, const std::string& where) {
  Graph out = g;
  for (TensorDesc& t : out.tensors) {
    if (t.by_value) continue;
    while (t.dims.size() < 4) {
      t.dims.push_back(Dim{1, ""});
      t.strides.push_back(1);
    }
    t.layout = Layout::kExplicit;
  }
  KILN_RETURN_IF_ERROR(revalidate(out, where));
  return out;
}

const char* kNormRank2Spec = R"({
  "name": "canonical_norm_rank_2", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [4, 768]}, "scale": {"dims": [1, 768], "dtype": "fp32"}, "bias": {"dims": [1, 768], "dtype": "fp32"}},
  "nodes": [{"name": "ln", "op": "layer_norm", "inputs": ["x", "scale", "bias"], "outputs": ["y"], "epsilon": 0.001}],
  "outputs": ["y"]
})";

// ---- pointwise_strided_innermost ---------------------------------------------------------------------
// cuDNN 9.19's pointwise kernels assume each tensor's innermost axis is contiguous: a graph whose input is
// read along its innermost axis with a stride above 1 ([4,100,1] strides [900,9,1], fp16: rows of one element
// nine apart) faulted on the H200 with a misaligned address, which ends the process's CUDA context. Refused
// before cuDNN sees it.
std::string find_strided_innermost(const Graph& g) {
  if (g.nodes.empty() || family_of(g) != Family::kPointwise) return "";
  for (const TensorDesc& t : g.tensors) {
    if (t.by_value) continue;
    int64_t smallest = INT64_MAX;
    for (size_t i = 0; i < t.dims.size(); ++i)
      if (t.dims[i].value > 1) smallest = std::min(smallest, t.strides[i]);
    if (smallest != INT64_MAX && smallest > 1)
      return "tensor '" + t.name + "' " + dims_text(t) + " strides " + ints_text(t.strides) +
             " (its innermost axis steps " + std::to_string(smallest) + " elements)";
  }
  return "";
}

StatusOr<Graph> refuse_strided_innermost(const Graph&, const std::string& where) {
  return not_supported(where +
                       ": cuDNN 9.19's pointwise kernels read the innermost axis as contiguous, and one "
                       "with a stride above 1 faulted on the H200 (misaligned address, which ends the process's "
                       "CUDA context); copy it to a packed tensor first");
}

const char* kStridedInnermostSpec = R"({
  "name": "canonical_pointwise_strided_innermost", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [4, 100, 1], "strides": [900, 9, 1]}},
  "nodes": [{"name": "t", "op": "tanh", "inputs": ["x"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

const char* kPointwiseRank4Spec = R"({
  "name": "canonical_pointwise_rank_4", "io_dtype": "fp32",
  "tensors": {"x": {"dims": [8, 32, 2, 17]}},
  "nodes": [{"name": "gelu", "op": "gelu_erf", "inputs": ["x"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

const char* kReductionSpec = R"({
  "name": "canonical_reduction_rows", "io_dtype": "fp32",
  "tensors": {"x": {"dims": [4, 64, 128]}},
  "nodes": [{"name": "sum", "op": "reduce_sum", "inputs": ["x"], "outputs": ["y"], "axes": [2]}],
  "outputs": ["y"]
})";

const char* kMatmulBatchSpec = R"({
  "name": "canonical_matmul_batch", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
  "tensors": {"a": {"dims": [2, 3, 16, 64]}, "b": {"dims": [64, 32]}},
  "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

}  // namespace

StatusOr<Graph> canonical_pointwise_form(const Graph& graph) {
  return canonical_pointwise(graph, "graph '" + graph.name + "'");
}

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
  renumber_reduction_axes(out);
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
      {"pointwise_strided_innermost",
       "a pointwise graph reading a tensor whose innermost axis has a stride above 1 faulted on the GPU (misaligned "
       "address, which ends the process's CUDA context); refused",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (issue 31's sweep, seed 1, spec 111): tanh, silu, bias_add and max "
       "over [4,100,1] fp16 with strides [900,9,1] faulted with cudaErrorMisalignedAddress",
       kStridedInnermostSpec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/pointwise_strided_innermost",
       find_strided_innermost,
       refuse_strided_innermost},
      {"norm_rank_4",
       "a layer or RMS norm on a tensor below rank 4 ([tokens, hidden]) faulted on the GPU (misaligned address, which "
       "ends the process's CUDA context); its tensors get trailing axes of extent 1 up to rank 4, as cuDNN describes "
       "norms",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (issue 31's sweep, seed 1, spec 76): layer_norm on [4,768] fp16 "
       "with fp32 scale and bias faulted with cudaErrorMisalignedAddress, and every later CUDA call in the process "
       "failed; the examples' [N, C, 1, 1] norms run right",
       kNormRank2Spec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/norm_rank_4",
       find_norm_low_rank,
       append_unit_axes_to_rank_4},
      {"pointwise_layout",
       "in a graph of pointwise ops only, cuDNN offers engines for rank 3 in row-major order and for rank 4 and 5 with "
       "the innermost axis second, none otherwise; the axes are put in the largest output's memory order, coalesced, "
       "and described in one of those forms",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: heuristics (A, B, FALLBACK) offer nothing for row-major "
       "[8,32,2,17] and [3,5,3,16,17], for 62 of 200 random pointwise graphs of rank 4 to 6, and for [8,17,64] "
       "strides [1088,1,17]; they offer engines for the same memory as [8,17,32,2] strides [1088,1,34,17] and "
       "[3,17,5,3,16] strides [4080,1,816,272,17]",
       kPointwiseRank4Spec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/pointwise_layout",
       find_pointwise_layout,
       canonical_pointwise},
      {"pointwise_long_rows",
       "in a graph of pointwise ops only, rows (the innermost axis in memory) longer than 262144 elements fail to "
       "launch; in the canonical rank-3 form a longer row is cut into rows of its largest divisor up to that length, "
       "or the graph is refused naming the limit",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32 (bench/probes/row_probe.sh, extent_probe.sh): relu over [1, N] bf16 "
       "ran for N = 65535 to 262144 and failed with CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER (exit 10) for N = 2^20 "
       "to 2^31-1, [2, 2^28], [64, 2^22] and fp32 [1, 2^29]; [1, 16384, 65536] bf16 and [65536, 32768] fp16 ran",
       kPointwiseLongRowsSpec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/pointwise_long_rows",
       find_pointwise_long_rows,
       cut_pointwise_rows},
      {"reduction_rows",
       "cuDNN offers a standalone reduction engine only for a row-major [rows, columns] tensor reduced along its "
       "columns (or both axes); a reduction over the innermost axes in memory is described that way, others are "
       "refused naming this",
       {91900},
       "H200 profile, cuDNN 9.19 with cuDNN Frontend 1.32: heuristics offer nothing for [4,64,128] reduced over [2], "
       "[0], [1,2] or all axes, rank 1, rank 4, or a transposed or padded [64,128]; they offer engines for "
       "[64,128] -> [64,1] and [1,1] (fp32, fp16, bf16; sum, max, amax); 8 of 8 standalone reductions were refused "
       "on the H200 (issue 31)",
       kReductionSpec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/reduction_rows",
       find_reduction_rows,
       canonical_reduction},
      {"matmul_batch_axes",
       "cuDNN's matmul takes one batch axis; batch axes every tensor holds densely or broadcasts alike are merged "
       "into one (others are lowered as written)",
       {91900},
       "H200, cuDNN 9.19 with cuDNN Frontend 1.32: rank-4 operands whose batch dims broadcast refused with exit 5 "
       "(issue 31's sweep); with an AMAX reduction after it the operation graph is refused at finalize "
       "(CUDNN_STATUS_NOT_SUPPORTED, 25 of 34 random specs, H200 profile)",
       kMatmulBatchSpec,
       "lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/matmul_batch_axes",
       find_matmul_batch_axes,
       canonical_matmul_batch},
  };
  return kTable;
}

StatusOr<DefectWorkaround> rewrite_for_cudnn(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(DefectWorkaround c,
                        apply_rewrites(canonical_rules(), DefectWorkaround{graph, {}}, "canonical rule"));
  // Each canonical rule settles the graph's rank (the rank-lifting ones first, then the layout ones).
  for (std::string& a : c.applied) a += ", lowered at rank " + std::to_string(lifted_rank(c.graph, 0));
  KILN_ASSIGN_OR_RETURN(DefectWorkaround out, apply_rewrites(known_defects(), std::move(c), "known cuDNN defect"));
  // A known defect's rewrite may join axes into a row past what the kernels launch on ([4,4,262144] + [4,1,1]
  // folded by pointwise_vector_broadcast into [1,4,1048576] + [1,4,1]): refused, naming both.
  if (std::string row = find_pointwise_long_rows(out.graph); !row.empty())
    return not_supported("graph '" + graph.name + "': " + row + " after the known-defect rewrites (" +
                         out.applied.back() + "): cuDNN 9.19's pointwise kernels fail to launch on rows longer than " +
                         std::to_string(kMaxPointwiseRow) + " elements (seen on the H200)");
  return out;
}

}  // namespace kiln::lower_detail
