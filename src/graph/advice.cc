#include "kiln/advice.h"

namespace kiln {
namespace {

bool is_16bit_float(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

// A norm whose scale or bias is stored wider than its 16-bit input. cuDNN 9.19 then offers one generic
// engine ("eng1"); with the parameters in the input's dtype it offers ~50 configurations of its fast norm
// engines. Measured on the H200 (bench/probes/norm_phase_probe.cc, bench/results/h200/logs/norm-probe-*):
// layer norm 16384x8192 bf16 0.618 ms with fp32 parameters against 0.133 ms with bf16 ones (4.6x), RMS norm
// 0.479 against 0.137 ms, layer norm 65536x1024 0.292 against 0.068 ms. The forward phase and a 3-D layout
// made no difference.
void norm_parameter_dtypes(const Graph& g, const GraphRoles& roles, const Node& n, std::vector<Advice>& out) {
  if (n.inputs.empty()) return;
  const DataType x = roles.dtype_of(n.inputs[0]);
  if (!is_16bit_float(x)) return;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const int t = n.inputs[i];
    const DataType p = roles.dtype_of(t);
    if (p == x || dtype_size(p) <= dtype_size(x)) continue;
    const char* role = i == 1 ? "scale" : "bias";
    const std::string& tn = g.tensors[t].name;
    out.push_back({n.name, tn,
                   "node '" + n.name + "' (" + op_kind_name(n.op) + "): " + role + " '" + tn + "' is " +
                       dtype_name(p) + " while input '" + g.tensors[n.inputs[0]].name + "' is " + dtype_name(x) +
                       ": cuDNN offers only its generic norm engine for parameters wider than the input (on the "
                       "H200 a bf16 layer norm of 16384x8192 took 0.618 ms with fp32 parameters, 0.133 ms with "
                       "bf16 ones); give '" + tn + "' dtype " + dtype_name(x) + " if its values allow"});
  }
}

}  // namespace

std::vector<Advice> graph_advice(const Graph& g) {
  std::vector<Advice> out;
  GraphRoles roles(g);
  for (const Node& n : g.nodes) {
    if (n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) norm_parameter_dtypes(g, roles, n, out);
  }
  return out;
}

}  // namespace kiln
