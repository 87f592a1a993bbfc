// validate_graph: structure checks, dynamic dims, shape/dtype inference in topological order, layouts.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "graph/ops/op_family.h"
#include "kiln/graph/ops/families.h"
#include "graph/validate_internal.h"
#include "kiln/graph/limits.h"

namespace kiln {
namespace {

using graph_internal::dims_text;
using graph_internal::node_where;

std::string tensor_where(const Graph& g, int t) { return "tensor '" + g.tensors[t].name + "'"; }

std::string count_text(size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// What node `ni` refers to: its outputs (as many as its family takes), tensors in range, no tensor written twice
// (`writer`: tensor -> node).
Status check_node_tensors(const Graph& g, size_t ni, std::vector<int>& writer) {
  const int nt = static_cast<int>(g.tensors.size());
  const Node& n = g.nodes[ni];
  size_t lo = 1, hi = 1;
  node_output_arity(n, &lo, &hi);
  if (n.outputs.size() < lo || n.outputs.size() > hi)
    return invalid_argument(node_where(n) + ": " + count_text(n.outputs.size(), "output") + ", expected " +
                            (lo == hi ? std::to_string(lo) : std::to_string(lo) + " or " + std::to_string(hi)) +
                            (n.op == OpKind::kSdpa && hi > 1    ? " (o, and its softmax statistics)"
                             : n.op == OpKind::kSdpaBackward    ? " (dq, dk, dv)"
                             : n.op == OpKind::kSdpaFp8         ? " (o, amax_o, and optionally the softmax statistics)"
                             : n.op == OpKind::kSdpaFp8Backward ? " (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp)"
                                                                : ""));
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    int t = n.inputs[i];
    if (t < 0 || t >= nt)
      return invalid_argument(node_where(n) + ": input " + std::to_string(i) + " refers to a missing tensor (#" +
                              std::to_string(t) + ")");
  }
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    const int t = n.outputs[o];
    if (t < 0 || t >= nt)
      return invalid_argument(node_where(n) + ": output " + std::to_string(o) + " refers to a missing tensor (#" +
                              std::to_string(t) + ")");
    if (writer[t] >= 0)
      return invalid_argument(tensor_where(g, t) + ": written by node '" + g.nodes[writer[t]].name + "' and by node '" +
                              n.name + "'" + (writer[t] == static_cast<int>(ni) ? " (twice)" : ""));
    writer[t] = static_cast<int>(ni);
  }
  return Status::ok();
}

Status check_output_refs(const Graph& g, int t) {
  if (t < 0 || t >= static_cast<int>(g.tensors.size()))
    return invalid_argument("graph output refers to a missing tensor (#" + std::to_string(t) + ")");
  return Status::ok();
}

Status check_structure(const Graph& g) {
  const int nt = static_cast<int>(g.tensors.size());
  std::set<std::string> names;
  for (int t = 0; t < nt; ++t) {
    if (g.tensors[t].name.empty()) return invalid_argument("tensor #" + std::to_string(t) + " has no name");
    if (!names.insert(g.tensors[t].name).second)
      return invalid_argument("tensor '" + g.tensors[t].name + "' is declared twice");
  }
  std::set<std::string> node_names;
  std::vector<int> writer(nt, -1);
  std::vector<bool> read(nt, false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    if (n.name.empty())
      return invalid_argument("node #" + std::to_string(ni) + " (" + op_kind_name(n.op) + ") has no name");
    if (!node_names.insert(n.name).second) return invalid_argument("node '" + n.name + "' is declared twice");
    size_t lo = 0, hi = 0;
    graph_internal::op_family(n.op).arity(n, &lo, &hi);
    if (is_ragged_attention(n) && !n.sdpa.padding)  // the likely slip, before the count it changes
      return invalid_argument(node_where(n) +
                              ": attribute 'ragged': ragged tensors need \"padding_mask\": true (each entry's lengths "
                              "say how many of its rows there are)");
    if (n.inputs.size() < lo || n.inputs.size() > hi) {
      // Dropout's seed and offset come last, only with a probability over 0.
      const bool fp8 = n.op == OpKind::kSdpaFp8 || n.op == OpKind::kSdpaFp8Backward;  // no dropout (NotSupported)
      const std::string dropout =
          fp8                  ? ""
          : n.sdpa.dropout > 0 ? ", then dropout's seed and offset (int64 [1, 1, 1, 1]) last"
                               : ", and with \"dropout\" over 0 its seed and offset last (none with dropout 0 or none)";
      return invalid_argument(
          node_where(n) + ": " + count_text(n.inputs.size(), "input") + ", expected " +
          (lo == hi ? std::to_string(lo) : std::to_string(lo) + " or " + std::to_string(hi)) +
          (n.op == OpKind::kSdpa ? " (q, k, v, an optional bias, and with \"padding_mask\": true seq_len_q and "
                                   "seq_len_kv, then with \"paged_kv\" page_table_k and page_table_v, then with "
                                   "\"ragged\" the offsets of q, k, v and o (over paged caches of q and o)" +
                                       dropout + ")"
           : n.op == OpKind::kSdpaBackward ? " (q, k, v, o, do, stats, an optional bias, and with \"padding_mask\": "
                                             "true seq_len_q and seq_len_kv, then with \"ragged\" the offsets of q, k, "
                                             "v and o" +
                                                 dropout + ")"
           : n.op == OpKind::kSdpaFp8 ? " (q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, "
                                        "and with \"padding_mask\": true seq_len_q and seq_len_kv" +
                                            dropout + ")"
           : n.op == OpKind::kSdpaFp8Backward
               ? " (q, k, v, o, do, stats, descale_q, descale_k, descale_v, descale_o, descale_do, descale_s, "
                 "descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp, and with \"padding_mask\": true "
                 "seq_len_q and seq_len_kv" +
                     dropout + ")"
               : ""));
    }
    KILN_RETURN_IF_ERROR(check_node_tensors(g, ni, writer));
    for (int t : n.inputs) read[t] = true;
    for (int t : n.outputs)
      if (g.tensors[t].by_value)
        return invalid_argument(node_where(n) + ": output '" + g.tensors[t].name +
                                "' is a by-value scalar; it can only be a graph input");
  }
  if (g.outputs.empty()) return invalid_argument("graph has no outputs");
  std::set<int> seen_out;
  for (int t : g.outputs) {
    KILN_RETURN_IF_ERROR(check_output_refs(g, t));
    if (!seen_out.insert(t).second) return invalid_argument("output '" + g.tensors[t].name + "' is listed twice");
    if (writer[t] < 0)
      return invalid_argument("output '" + g.tensors[t].name + "' is not written by any node (it is a graph input)");
  }
  for (int t = 0; t < nt; ++t) {
    bool out = seen_out.count(t) > 0;
    if (writer[t] < 0 && !read[t])
      return invalid_argument(tensor_where(g, t) + " is dangling: no node reads or writes it");
    if (writer[t] >= 0 && !read[t] && !out)
      return invalid_argument(node_where(g.nodes[writer[t]]) + ": output '" + g.tensors[t].name +
                              "' is dangling: no node reads it and it is not a graph output");
  }
  return Status::ok();
}

}  // namespace

namespace graph_internal {
// Kahn's algorithm, lowest node index first, so the order is deterministic.
Status topological_order(const Graph& g, std::vector<int>* order) {
  const size_t nn = g.nodes.size();
  std::vector<int> writer(g.tensors.size(), -1);
  for (size_t ni = 0; ni < nn; ++ni)
    for (int t : g.nodes[ni].outputs) writer[t] = static_cast<int>(ni);
  std::vector<int> pending(nn, 0);
  std::vector<std::vector<int>> users(nn);
  for (size_t ni = 0; ni < nn; ++ni)
    for (int t : g.nodes[ni].inputs)
      if (writer[t] >= 0) {
        ++pending[ni];
        users[writer[t]].push_back(static_cast<int>(ni));
      }
  std::set<int> ready;
  for (size_t ni = 0; ni < nn; ++ni)
    if (pending[ni] == 0) ready.insert(static_cast<int>(ni));
  while (!ready.empty()) {
    int ni = *ready.begin();
    ready.erase(ready.begin());
    order->push_back(ni);
    for (int u : users[ni])
      if (--pending[u] == 0) ready.insert(u);
  }
  if (order->size() == nn) return Status::ok();
  std::string names;
  for (size_t ni = 0; ni < nn; ++ni)
    if (pending[ni] > 0) names += (names.empty() ? "'" : ", '") + g.nodes[ni].name + "'";
  return invalid_argument("graph has a cycle through node(s) " + names);
}
}  // namespace graph_internal

StatusOr<std::vector<int>> topological_order(const Graph& g) {
  std::vector<int> writer(g.tensors.size(), -1);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) KILN_RETURN_IF_ERROR(check_node_tensors(g, ni, writer));
  for (int t : g.outputs) KILN_RETURN_IF_ERROR(check_output_refs(g, t));
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(graph_internal::topological_order(g, &order));
  return order;
}

namespace {
using graph_internal::topological_order;

// Bounds keep every later product (strides, conv arithmetic) inside int64 (kiln/graph/limits.h).
constexpr int64_t kMaxExtent = limits::kMaxExtent;
constexpr int64_t kMaxElements = limits::kMaxElements;

// A dynamic dim's name is written into the shape key ("batch=8,seq=128") and read back from it: a name with '=' or
// ',' would make two keys one (found by a hostile trial: "a=1,b" at 2 read as two dims). Names are identifiers.
bool is_symbol_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

Status check_dynamic_dims(Graph& g) {
  for (const auto& [sym, value] : g.dynamic_dims)
    if (!is_symbol_name(sym))
      return invalid_argument("dynamic dim '" + sym +
                              "': a name is letters, digits and '_' (not starting with a digit), at most 64");
  for (const auto& [sym, value] : g.dynamic_dims)
    if (value <= 0 || value > kMaxExtent)
      return invalid_argument("dynamic dim '" + sym + "': value " + std::to_string(value) +
                              " must be positive and at most " + std::to_string(kMaxExtent));
  std::set<std::string> used;
  for (TensorDesc& t : g.tensors)
    for (size_t i = 0; i < t.dims.size(); ++i) {
      Dim& d = t.dims[i];
      if (!d.is_dynamic()) continue;
      auto it = g.dynamic_dims.find(d.symbol);
      if (it == g.dynamic_dims.end())
        return invalid_argument("tensor '" + t.name + "': dim " + std::to_string(i) + " uses dynamic dim '" + d.symbol +
                                "', which is not declared");
      d.value = it->second;
      used.insert(d.symbol);
    }
  for (const auto& [sym, value] : g.dynamic_dims)
    if (!used.count(sym)) return invalid_argument("dynamic dim '" + sym + "' is not used by any tensor");
  return Status::ok();
}

Status check_dims_positive(const TensorDesc& t) {
  int64_t count = 1;
  for (size_t i = 0; i < t.dims.size(); ++i) {
    int64_t v = t.dims[i].value;
    if (v <= 0)
      return invalid_argument("tensor '" + t.name + "': dim " + std::to_string(i) + " is " + std::to_string(v) +
                              "; dims must be positive");
    if (v > kMaxExtent)
      return invalid_argument("tensor '" + t.name + "': dim " + std::to_string(i) + " is " + std::to_string(v) +
                              ", above the limit of " + std::to_string(kMaxExtent));
    if (__builtin_mul_overflow(count, v, &count) || count > kMaxElements)
      return invalid_argument("tensor '" + t.name + "': " + dims_text(t.dims) + " has too many elements");
  }
  return Status::ok();
}

Status check_inputs(Graph& g, const GraphRoles& roles) {
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) {
    TensorDesc& d = g.tensors[t];
    if (!roles.is_graph_input(t)) {
      if (!d.dims.empty()) KILN_RETURN_IF_ERROR(check_dims_positive(d));  // declared output dims
      continue;
    }
    if (d.by_value) {
      if (d.dims.empty()) d.dims.push_back(Dim{1, ""});
      for (const Dim& x : d.dims)
        if (x.value != 1 || x.is_dynamic())
          return invalid_argument("tensor '" + d.name + "': a by-value scalar has all dims 1, got " +
                                  dims_text(d.dims));
      if (!graph_internal::is_float(roles.dtype_of(t)))
        return invalid_argument("tensor '" + d.name + "': a by-value scalar must be floating-point, got " +
                                dtype_name(roles.dtype_of(t)));
      // cuDNN takes it as a float (lowering hands it over as one): past that range it would become infinity.
      if (!std::isfinite(d.value) || std::fabs(d.value) > static_cast<double>(std::numeric_limits<float>::max()))
        return invalid_argument("tensor '" + d.name + "': by-value scalar " +
                                graph_internal::canonical_number(d.value) +
                                " is not a finite fp32 value (cuDNN takes it as a float; at most " +
                                graph_internal::canonical_number(std::numeric_limits<float>::max()) + " in magnitude)");
    }
    if (d.dims.empty()) return invalid_argument("tensor '" + d.name + "': graph input has no dims");
    KILN_RETURN_IF_ERROR(check_dims_positive(d));
  }
  return Status::ok();
}

Status resolve_layout(TensorDesc& t) {
  const size_t r = t.dims.size();
  if (t.layout == Layout::kExplicit) {
    if (t.strides.size() != r)
      return invalid_argument("tensor '" + t.name + "': " + std::to_string(t.strides.size()) + " strides for rank " +
                              std::to_string(r));
    for (size_t i = 0; i < r; ++i)
      if (t.strides[i] <= 0)
        return invalid_argument("tensor '" + t.name + "': stride " + std::to_string(i) + " is " +
                                std::to_string(t.strides[i]) + "; strides must be positive");
    return Status::ok();
  }
  if ((t.layout == Layout::kNCHW || t.layout == Layout::kNHWC) && r < 3)
    return invalid_argument("tensor '" + t.name + "': layout " + layout_name(t.layout) + " needs rank 3 or more, got " +
                            std::to_string(r));
  t.strides.assign(r, 1);
  if (t.layout == Layout::kNHWC) {
    // dims stay in N, C, spatial... order; channels are innermost in memory.
    int64_t s = t.dims[1].value;
    for (size_t i = r; i-- > 2;) {
      t.strides[i] = s;
      s *= t.dims[i].value;
    }
    t.strides[0] = s;
  } else {
    int64_t s = 1;
    for (size_t i = r; i-- > 0;) {
      t.strides[i] = s;
      s *= t.dims[i].value;
    }
  }
  return Status::ok();
}

// The memory a tensor spans, 1 + sum((extent - 1) * stride) elements, times its dtype's size: every product
// is checked, so a stride such as 2^63-1 is refused here instead of overflowing later (host buffers,
// device allocations, cuDNN's offsets).
Status check_footprint(const TensorDesc& t, DataType dtype) {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(t.element_count(), size, &bytes) || bytes > limits::kMaxTensorBytes)
    return invalid_argument("tensor '" + t.name + "': " + graph_internal::dims_text(t.dims) + " " + dtype_name(dtype) +
                            " is more than " + std::to_string(limits::kMaxTensorBytes) + " bytes");
  int64_t span = 1;
  for (size_t i = 0; i < t.dims.size() && i < t.strides.size(); ++i) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(t.dims[i].value - 1, t.strides[i], &reach) ||
        __builtin_add_overflow(span, reach, &span) || __builtin_mul_overflow(span, size, &bytes) ||
        bytes > limits::kMaxTensorBytes)
      return invalid_argument("tensor '" + t.name + "': strides " + graph_internal::ints_text(t.strides) + " on dims " +
                              graph_internal::dims_text(t.dims) + " reach past " +
                              std::to_string(limits::kMaxTensorBytes) + " bytes of " + dtype_name(dtype) + " (stride " +
                              std::to_string(i) + " is " + std::to_string(t.strides[i]) + ")");
  }
  return Status::ok();
}

// A tensor a node writes to memory must not have two elements at one address (the result would depend on
// the kernel's write order). Checked for explicit strides: taken in increasing order, each stride of an
// axis with extent > 1 must step past everything the smaller strides reach. This also refuses interleaved
// layouts that happen not to overlap; cuDNN writes none of those.
Status check_no_overlap(const Graph& g, const GraphRoles& roles, int tensor) {
  const TensorDesc& t = g.tensors[static_cast<size_t>(tensor)];
  if (t.layout != Layout::kExplicit) return Status::ok();  // layouts are dense
  std::vector<size_t> axes;
  for (size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i].value > 1) axes.push_back(i);
  std::stable_sort(axes.begin(), axes.end(), [&](size_t a, size_t b) { return t.strides[a] < t.strides[b]; });
  int64_t reach = 0;  // the largest offset the axes so far reach (footprint-checked: no overflow)
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t i = axes[k];
    if (t.strides[i] <= reach) {
      const Node& writer = g.nodes[static_cast<size_t>(roles.producer(tensor))];
      return invalid_argument(graph_internal::node_where(writer) + ": output '" + t.name + "': strides " +
                              graph_internal::ints_text(t.strides) + " on dims " + graph_internal::dims_text(t.dims) +
                              " make elements share memory (stride " + std::to_string(i) + " is " +
                              std::to_string(t.strides[i]) + ", but the smaller strides already reach offset " +
                              std::to_string(reach) + "); an output needs non-overlapping strides");
    }
    reach += (t.dims[i].value - 1) * t.strides[i];
  }
  return Status::ok();
}

// [B, H, S, W] packed token-major (THD): strides [S*H*W, W, H*W, 1].
std::vector<int64_t> token_major_strides(const std::vector<Dim>& d) {
  return {d[2].value * d[1].value * d[3].value, d[3].value, d[1].value * d[3].value, 1};
}

// The tensors a ragged node packs token-major, those with an offsets input (sdpa_inputs) they are read or written
// through: an sdpa's q, k, v (q alone over paged caches) and o; a backward pass's q, k, v, o and do, and its dq,
// dk, dv through q's, k's and v's offsets.
struct RaggedTensor {
  int tensor;
  bool output;
};
std::vector<RaggedTensor> ragged_tensors(const Node& n) {
  const SdpaInputs r = sdpa_inputs(n);
  std::vector<RaggedTensor> out;
  const auto add = [&](int tensor, bool output, int offsets) {
    if (offsets >= 0 && tensor >= 0) out.push_back(RaggedTensor{tensor, output});
  };
  const int offsets[3] = {r.ragged_q, r.ragged_k, r.ragged_v};
  for (size_t i = 0; i < 3; ++i) add(n.inputs[i], false, offsets[i]);
  if (n.op == OpKind::kSdpaBackward) {
    add(n.inputs[3], false, r.ragged_o);
    add(n.inputs[4], false, r.ragged_o);
    for (size_t i = 0; i < 3 && i < n.outputs.size(); ++i) add(n.outputs[i], true, offsets[i]);
  } else {
    add(n.outputs[0], true, r.ragged_o);
  }
  return out;
}

// A ragged sdpa's (or sdpa_backward's) tensors are packed token-major (ragged_tensors): an entry's rows are whole
// tokens from its offset on, which is what cuDNN reads and what Kiln's references assume. Then what Kiln does not
// run over ragged tensors (NotSupported, after every check the author must act on: these run once every node's own
// checks have).
Status check_ragged_node(const Graph& g, const Node& n) {
  if (!is_ragged_attention(n)) return Status::ok();
  const std::vector<RaggedTensor> tensors = ragged_tensors(n);
  for (const RaggedTensor& r : tensors) {
    const TensorDesc& d = g.tensors[static_cast<size_t>(r.tensor)];
    const std::vector<int64_t> want = token_major_strides(d.dims);
    bool packed = d.strides.size() == want.size();  // a stride of an extent-1 dim is never read: any value
    for (size_t i = 0; packed && i < want.size(); ++i) packed = d.dims[i].value == 1 || d.strides[i] == want[i];
    if (!packed)
      return invalid_argument(node_where(n) + ": " + (r.output ? "output '" : "input '") + d.name + "': strides " +
                              graph_internal::ints_text(d.strides) + " on dims " + dims_text(d.dims) +
                              ": a ragged tensor is packed token-major, strides " + graph_internal::ints_text(want) +
                              " ([S*H*W, W, H*W, 1]: each token's heads side by side)");
  }
  const std::string where = node_where(n) + ": attribute 'ragged': ";
  // Kiln's offsets are int32 (cuDNN also takes int64): an element offset reaches at most a tensor's element count.
  for (const RaggedTensor& r : tensors) {
    const TensorDesc& d = g.tensors[static_cast<size_t>(r.tensor)];
    const int64_t elements = d.element_count();
    if (elements > std::numeric_limits<int32_t>::max())
      return not_supported(where + (r.output ? "output '" : "input '") + d.name + "' holds " +
                           std::to_string(elements) +
                           " elements, past the int32 offsets Kiln takes (2^31 - 1; int64 offsets are not supported "
                           "yet)");
  }
  return Status::ok();
}

// A ragged tensor's strides of extent-1 dims, never read (any positive value passes check_ragged_node), are written
// token-major, and its layout explicit: what cuDNN is given, and two specs that differ only there (or in writing
// the same strides as a layout) are one graph with one signature.
void canonical_ragged_strides(Graph& g, const Node& n) {
  if (!is_ragged_attention(n)) return;
  for (const RaggedTensor& r : ragged_tensors(n)) {
    TensorDesc& d = g.tensors[static_cast<size_t>(r.tensor)];
    d.layout = Layout::kExplicit;  // signed by its strides, however it was written (a row-major decode q, say)
    d.strides = token_major_strides(d.dims);
  }
}

// What cuDNN (9.19, Frontend 1.32) reads packed in attention, refused by name otherwise (NotSupported, after every
// check the author must act on): a backward pass's statistics [B, H, Sq, 1] (the frontend: "a non-ragged Stats
// input of sdpa_backward must be a packed BHSD tensor" below cuDNN 9.26), and the index tensors (a padding mask's
// lengths, page tables, ragged offsets), which Kiln hands over as the arrays they are.
Status check_attention_packing(const Graph& g, const Node& n) {
  if (!is_attention(n.op)) return Status::ok();
  const SdpaInputs r = sdpa_inputs(n);
  std::vector<std::pair<int, const char*>> packed;
  if (is_attention_backward(n.op) && n.inputs.size() > 5) packed.push_back({5, "the statistics"});
  for (int i : {r.seq_len_q, r.seq_len_kv}) packed.push_back({i, "a padding mask's length"});
  for (int i : {r.page_table_k, r.page_table_v}) packed.push_back({i, "a page table"});
  for (int i : {r.ragged_q, r.ragged_k, r.ragged_v, r.ragged_o}) packed.push_back({i, "a ragged offset"});
  for (const auto& [at, what] : packed) {
    if (at < 0 || static_cast<size_t>(at) >= n.inputs.size()) continue;
    const TensorDesc& t = g.tensors[static_cast<size_t>(n.inputs[static_cast<size_t>(at)])];
    if (!t.packed_row_major())
      return not_supported(node_where(n) + ": input '" + t.name + "': strides " + graph_internal::ints_text(t.strides) +
                           " on dims " + dims_text(t.dims) + ": cuDNN reads " + what + " packed (row-major, no gaps)");
  }
  return Status::ok();
}

Status validate_impl(Graph& g, const ValidateOptions& options) {
  KILN_RETURN_IF_ERROR(check_graph_limits(g));
  KILN_RETURN_IF_ERROR(check_structure(g));
  std::vector<int> order;
  KILN_RETURN_IF_ERROR(topological_order(g, &order));
  KILN_RETURN_IF_ERROR(check_dynamic_dims(g));
  const GraphRoles roles(g);  // nodes and outputs do not change below; dims and strides do
  KILN_RETURN_IF_ERROR(check_inputs(g, roles));
  for (int ni : order) {
    Node& n = g.nodes[ni];
    std::vector<std::vector<Dim>> out_dims;
    KILN_RETURN_IF_ERROR(graph_internal::infer_node(g, roles, n, options, &out_dims));
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      TensorDesc& t = g.tensors[n.outputs[o]];
      const std::vector<Dim>& inferred = out_dims[o];
      if (!t.dims.empty()) {
        bool same = t.dims.size() == inferred.size();
        for (size_t i = 0; same && i < inferred.size(); ++i) same = t.dims[i].value == inferred[i].value;
        if (!same)
          return invalid_argument(node_where(n) + ": output '" + t.name + "': declared dims " + dims_text(t.dims) +
                                  " but the node produces " + dims_text(inferred));
      } else if (t.layout == Layout::kRowMajor && t.strides.empty()) {
        // An undeclared output takes its first input's image layout (NHWC in, NHWC out).
        const TensorDesc& first = g.tensors[n.inputs[0]];
        if ((first.layout == Layout::kNHWC || first.layout == Layout::kNCHW) && inferred.size() >= 3)
          t.layout = first.layout;
      }
      t.dims = inferred;
      KILN_RETURN_IF_ERROR(check_dims_positive(t));
      // An undeclared ragged o (dq, dk, dv) is packed token-major, as ragged tensors are (kiln/graph/graph.h
      // SdpaAttrs).
      const bool ragged_out = is_ragged_attention(n) && (n.op == OpKind::kSdpaBackward || o == 0);
      if (ragged_out && t.layout == Layout::kRowMajor && t.strides.empty()) {
        t.layout = Layout::kExplicit;
        t.strides = token_major_strides(t.dims);
      }
    }
  }
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) {
    TensorDesc& d = g.tensors[static_cast<size_t>(t)];
    KILN_RETURN_IF_ERROR(resolve_layout(d));
    KILN_RETURN_IF_ERROR(check_footprint(d, roles.dtype_of(t)));
    if (roles.producer(t) >= 0 && roles.is_graph_output(t)) KILN_RETURN_IF_ERROR(check_no_overlap(g, roles, t));
  }
  for (const Node& n : g.nodes) KILN_RETURN_IF_ERROR(check_ragged_node(g, n));
  for (const Node& n : g.nodes) canonical_ragged_strides(g, n);
  for (const Node& n : g.nodes) KILN_RETURN_IF_ERROR(check_attention_packing(g, n));
  return Status::ok();
}

}  // namespace

Status validate_graph(Graph& graph, const ValidateOptions& options) { return validate_impl(graph, options); }

}  // namespace kiln
