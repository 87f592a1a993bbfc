// The known-defect table and its rewrites (known_defects.h).
#include "lower/known_defects.h"

#include <algorithm>

namespace kiln::lower_detail {
namespace {

int extents_over_one(const TensorDesc& t) {
  return static_cast<int>(std::count_if(t.dims.begin(), t.dims.end(), [](const Dim& d) { return d.value > 1; }));
}

std::string node_label(const Node& n) {
  return "node '" + n.name + "' (" + pointwise_mode_name(n.pointwise.mode) + ")";
}

// ---- pointwise_vector_broadcast ---------------------------------------------------------------------
// cuDNN 9.19's pointwise engine (eng1, every knob choice) on the H200: in a graph of pointwise ops only,
// an operand with exactly one extent above 1 broadcast into an output with two or more, whose first
// extent is above 1, is read wrong past the first slice of axis 0 ([4,16,64] + [1,1,64]: 3,072 of 4,096
// outputs wrong). The same shapes with a leading extent of 1 are right ([1,64,64] + [1,1,64]), so the
// rewrite folds two adjacent axes into one (where every tensor either broadcasts over both or holds both
// densely) and puts a unit axis in front: [4,16,64] + [1,1,64] is lowered as [1,64,64] + [1,1,64].
// Logical order is memory order (strides non-increasing, each axis at least as wide as the ones after it):
// the layouts the defect was measured on. A channel-last output (NHWC strides on NCHW dims: a conv's bias
// add run on its own) was computed right on the H200 (tune.gpu.Unfused, the chain checked against the
// reference), so it is left to cuDNN and the tuner's gate.
bool row_major(const TensorDesc& t) {
  if (t.strides.size() != t.dims.size()) return true;  // packed row-major by default
  for (size_t i = 0; i + 1 < t.dims.size(); ++i)
    if (t.dims[i + 1].value > 1 && t.strides[i] < t.strides[i + 1] * t.dims[i + 1].value) return false;
  return true;
}

std::string find_vector_broadcast(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.op != OpKind::kPointwise) return "";  // fused after a matmul or conv, other engines run it
  for (const Node& n : g.nodes) {
    if (n.inputs.size() != 2 || n.outputs.empty()) continue;
    const TensorDesc& y = g.tensors[static_cast<size_t>(n.outputs[0])];
    if (y.dims.empty() || y.dims[0].value <= 1 || extents_over_one(y) < 2 || !row_major(y)) continue;
    for (int in : n.inputs) {
      const TensorDesc& t = g.tensors[static_cast<size_t>(in)];
      if (!t.by_value && extents_over_one(t) == 1)
        return node_label(n) + ": input '" + t.name + "' " + dims_text(t) + " broadcast into output '" + y.name + "' " +
               dims_text(y);
    }
  }
  return "";
}

struct Shape {
  std::vector<int64_t> dims, strides;
};

StatusOr<Graph> fold_into_unit_leading_axis(const Graph& g, const std::string& where) {
  auto refuse = [&](const std::string& why) {
    return not_supported(where +
                         ": cuDNN 9.19 computes this broadcast wrong in every engine configuration (known "
                         "defect pointwise_vector_broadcast), and Kiln cannot lower it another way: " +
                         why);
  };
  // Every tensor cuDNN sees, right-aligned to the largest rank (numpy broadcasting).
  size_t rank = 0;
  for (const TensorDesc& t : g.tensors)
    if (!t.by_value) rank = std::max(rank, t.dims.size());
  std::vector<Shape> shape(g.tensors.size());
  std::vector<int64_t> full(rank, 1);  // the one extent above 1 each axis has, or 1
  for (size_t ti = 0; ti < g.tensors.size(); ++ti) {
    const TensorDesc& t = g.tensors[ti];
    if (t.by_value) continue;
    if (t.strides.size() != t.dims.size()) return internal_error(where + ": tensor '" + t.name + "' has no strides");
    Shape& s = shape[ti];
    s.dims.assign(rank - t.dims.size(), 1);
    s.strides.assign(rank - t.dims.size(), 1);
    for (size_t i = 0; i < t.dims.size(); ++i) {
      s.dims.push_back(t.dims[i].value);
      s.strides.push_back(t.strides[i]);
    }
    for (size_t i = 0; i < rank; ++i) {
      if (s.dims[i] == 1) continue;
      if (full[i] != 1 && full[i] != s.dims[i])
        return refuse("axis " + std::to_string(i) + " has extents " + std::to_string(full[i]) + " and " +
                      std::to_string(s.dims[i]) + " in one graph");
      full[i] = s.dims[i];
    }
  }
  // Axes i and i+1 fold into one when every tensor broadcasts over both, or holds both with the outer
  // stride equal to the inner stride times the inner extent (one run of memory).
  auto foldable = [&](size_t i) {
    for (size_t ti = 0; ti < shape.size(); ++ti) {
      if (g.tensors[ti].by_value) continue;
      const Shape& s = shape[ti];
      const int64_t a = s.dims[i], b = s.dims[i + 1];
      if (a == 1 && b == 1) continue;
      if (a != full[i] || b != full[i + 1]) return false;  // broadcasts over one of the two only
      if (a > 1 && b > 1 && s.strides[i] != s.strides[i + 1] * b) return false;
    }
    return true;
  };
  while (rank > 2) {
    size_t i = 0;
    while (i + 1 < rank && !foldable(i)) ++i;
    if (i + 1 >= rank) break;
    for (size_t ti = 0; ti < shape.size(); ++ti) {
      if (g.tensors[ti].by_value) continue;
      Shape& s = shape[ti];
      const int64_t a = s.dims[i], b = s.dims[i + 1];
      s.strides[i] = b > 1 || a == 1 ? s.strides[i + 1] : s.strides[i];
      s.dims[i] = a * b;
      s.dims.erase(s.dims.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      s.strides.erase(s.strides.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
    full[i] *= full[i + 1];
    full.erase(full.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    --rank;
  }
  if (rank > 2)
    return refuse("no two adjacent axes that every tensor either broadcasts over or holds densely, so no axis can be "
                  "folded to make room for a leading axis of extent 1");
  Graph out = g;
  out.dynamic_dims.clear();  // the folded graph is only lowered: its dims are values
  for (size_t ti = 0; ti < shape.size(); ++ti) {
    TensorDesc& t = out.tensors[ti];
    if (t.by_value) continue;
    Shape& s = shape[ti];
    s.dims.insert(s.dims.begin(), 1);
    s.strides.insert(s.strides.begin(), 1);
    // An axis of extent 1 is never stepped along; give it the row-major stride, as cuDNN was shown it.
    for (size_t i = s.dims.size(); i-- > 0;) {
      if (s.dims[i] != 1) continue;
      int64_t stride = 1;
      if (i + 1 < s.dims.size() && __builtin_mul_overflow(s.strides[i + 1], s.dims[i + 1], &stride))
        stride = s.strides[i + 1];
      s.strides[i] = stride;
    }
    t.dims.clear();
    for (int64_t d : s.dims) t.dims.push_back(Dim{d, ""});
    t.strides = s.strides;
    t.layout = Layout::kExplicit;
  }
  Status st = validate_graph(out);
  if (!st.is_ok()) return internal_error(where + ": the folded graph does not validate (a bug): " + st.message());
  return out;
}

const char* kVectorBroadcastSpec = R"({
  "name": "defect_pointwise_vector_broadcast", "io_dtype": "fp32",
  "tensors": {"a": {"dims": [4, 16, 64]}, "b": {"dims": [1, 1, 64]}},
  "nodes": [{"name": "add", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}],
  "outputs": ["y"]
})";

}  // namespace

std::string ints_text(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s + "]";
}

std::string dims_text(const TensorDesc& t) { return ints_text(t.shape()); }

const std::vector<KnownDefect>& known_defects() {
  static const std::vector<KnownDefect> kTable = {
      {"pointwise_vector_broadcast",
       "in a graph of pointwise ops only, an operand with one extent above 1 broadcast into an output with two or "
       "more and a first extent above 1 is read wrong past the first slice of axis 0 (e.g. [4,16,64] + [1,1,64])",
       {91900},
       "H200, cuDNN 9.19.0 with cuDNN Frontend 1.23: all 9 engine configurations (eng1) wrong for [4,16,64]+[1,1,64], "
       "[2,16,64]+[1,1,64], [64,16,64]+[1,1,64], [8,32,128]+[1,1,128], [4,16,64]+[1,16,1], [4,16,64]+[4,1,1], "
       "[4,1,1024]+[4,1,1], [64,64]+[1,64], operand order swapped, and after a relu; right for [1,64,64]+[1,1,64], "
       "[1,4,1024]+[1,4,1], [1,4096,4096]+[1,1,4096], [4,16,64]+[1,16,64], [4,16,64]+[4,1,64], [4,16,64]+[4,16,1], "
       "[4,16,64]+[1,1,1]; a matmul followed by a [1,1,N] bias at batch 4 is right (other engines)",
       kVectorBroadcastSpec,
       "lower.gpu.Table/KnownDefects.WorkedAroundOnThisGpu/pointwise_vector_broadcast",
       find_vector_broadcast,
       fold_into_unit_leading_axis},
  };
  return kTable;
}

StatusOr<DefectWorkaround> apply_rewrites(const std::vector<KnownDefect>& table, DefectWorkaround start,
                                          const std::string& kind) {
  const std::string name = start.graph.name;
  for (const KnownDefect& d : table) {
    std::string where = d.find(start.graph);
    if (where.empty()) continue;
    StatusOr<Graph> rewritten = d.rewrite(start.graph, "graph '" + name + "': " + where);
    if (!rewritten.is_ok()) return rewritten.status();
    if (!d.find(*rewritten).empty())
      return internal_error("graph '" + name + "': the rewrite for " + kind + " " + d.id +
                            " left its case in place (a bug)");
    start.graph = std::move(rewritten).value();
    start.applied.push_back(std::string(d.id) + ": " + where);
  }
  return start;
}

StatusOr<DefectWorkaround> work_around_known_defects(const Graph& graph) {
  return apply_rewrites(known_defects(), DefectWorkaround{graph, {}}, "known cuDNN defect");
}

}  // namespace kiln::lower_detail
