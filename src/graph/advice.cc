#include "kiln/graph/advice.h"

#include <cstdio>
#include <map>

#include "kiln/core/printable.h"

namespace kiln {
namespace {

bool is_16bit_float(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

// The measurement behind the norm rule, per op (bench/results/h200/logs/norm-probe-dtype-layout-*.txt and
// the main job's logs, mainjob-2026-12-01.txt against mainjob-2026-12-01-norms.txt).
const char* norm_evidence(OpKind op) {
  return op == OpKind::kLayerNorm
             ? "bf16 layer norm 16384x8192: 0.618 ms with fp32 parameters, 0.133 ms with bf16 ones; fp16 layer norm "
               "8192x1024: 0.0458 ms against 0.0125 ms"
             : "bf16 RMS norm 16384x8192: 0.479 ms with an fp32 scale, 0.137 ms with a bf16 one; fp16 RMS norm "
               "8192x4096: 0.126 ms against 0.0373 ms";
}

struct WideParameter {
  const Node* first = nullptr;  // the first norm node reading it as a parameter
  size_t role = 1;              // its input position there: 1 scale, 2 bias
  DataType input = DataType::kFloat16;
  int nodes = 0;  // how many norm nodes read it as a parameter
};

// An sdpa's (or its backward's) band aligned top-left with fewer queries than keys: query i's diagonal is key i, so the queries see the
// first keys only. Valid (a prefix of a longer sequence), but in decode and chunked prefill the queries are the
// last positions, which is "bottom_right": the likelier intent, named rather than assumed.
void sdpa_alignment_advice(const Graph& g, std::vector<Advice>* out) {
  for (const Node& n : g.nodes) {
    if (!is_attention(n.op) || n.inputs.size() < 2 || !n.sdpa.masked() ||
        n.sdpa.alignment != DiagonalAlignment::kTopLeft)
      continue;
    const TensorDesc& q = g.tensors[static_cast<size_t>(n.inputs[0])];
    const TensorDesc& k = g.tensors[static_cast<size_t>(n.inputs[1])];
    const int64_t keys = sdpa_keys_extent(g, n);
    if (q.dims.size() != 4 || k.dims.size() != 4 || q.dims[2].value >= keys) continue;
    const std::string sq = std::to_string(q.dims[2].value), skv = std::to_string(keys);
    out->push_back({n.name, q.name,
                    "node '" + printable(n.name) + "' (" + node_op_name(n) + "): " + sq + " queries over " + skv +
                        " keys with the diagonal aligned top-left: query i sees keys up to i + right_bound (the "
                        "first " +
                        sq +
                        " positions); where the queries are the last positions (decode, chunked prefill), "
                        "write \"diagonal_alignment\": \"bottom_right\"" +
                        (n.op == OpKind::kSdpaFp8 || n.op == OpKind::kSdpaFp8Backward
                             ? std::string(" (cuDNN aligns FP8 attention bottom-right on SM 10.0 and newer only)")
                             : std::string())});
  }
}

}  // namespace

// A norm whose scale or bias is stored wider than its 16-bit input. In every such case measured on the
// H200, cuDNN 9.19 offered only its generic engine ("eng1"); with the parameters in the input's dtype it
// offered ~50 configurations of its fast norm engines (3.4-4.6x faster). The forward phase and a 3-D
// layout made no difference (docs/h200-results.md, "Norms"). By-value parameters are left alone: their
// dtype is not the author's choice. One piece of advice per tensor, however many nodes read it.
std::vector<Advice> graph_advice(const Graph& g) {
  GraphRoles roles(g);
  std::map<int, WideParameter> wide;  // by tensor index: node order, since the first node sets it
  std::vector<int> order;
  for (const Node& n : g.nodes) {
    if ((n.op != OpKind::kLayerNorm && n.op != OpKind::kRmsNorm) || n.inputs.empty()) continue;
    const DataType x = roles.dtype_of(n.inputs[0]);
    if (!is_16bit_float(x)) continue;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      const int t = n.inputs[i];
      if (t < 0 || static_cast<size_t>(t) >= g.tensors.size() || g.tensors[t].by_value) continue;
      const DataType p = roles.dtype_of(t);
      if (p == x || dtype_size(p) <= dtype_size(x)) continue;
      WideParameter& w = wide[t];
      if (w.nodes++ == 0) {
        w.first = &n, w.role = i, w.input = x;
        order.push_back(t);
      }
    }
  }
  std::vector<Advice> out;
  sdpa_alignment_advice(g, &out);
  for (int t : order) {
    const WideParameter& w = wide[t];
    const Node& n = *w.first;
    const std::string tn = printable(g.tensors[t].name);
    std::string where = "node '" + printable(n.name) + "' (" + op_kind_name(n.op) + ")";
    if (w.nodes > 1) where += " and " + std::to_string(w.nodes - 1) + " other norm node(s)";
    out.push_back(
        {n.name, g.tensors[t].name,
         where + ": " + (w.role == 1 ? "scale" : "bias") + " '" + tn + "' is " + dtype_name(roles.dtype_of(t)) +
             " while input '" + printable(g.tensors[n.inputs[0]].name) + "' is " + dtype_name(w.input) +
             ": with norm parameters wider than the input, cuDNN 9.19 offered only its generic engine in "
             "every case measured on the H200 (" +
             norm_evidence(n.op) + "); give '" + tn + "' dtype " + dtype_name(w.input) + " if its values allow"});
  }
  return out;
}

}  // namespace kiln
