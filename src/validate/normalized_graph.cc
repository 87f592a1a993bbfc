// normalized_graph_json: a validated graph as docs/normalized-graph.md's document. nlohmann::json throws
// on text that is not UTF-8 when dumping: catch_exceptions turns that into a Status.
#include "kiln/validate/normalized_graph.h"

#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "kiln/validate/numerics.h"
#include "validate/gate.h"
#include "validate/node_plan.h"
#include "validate/reference_common.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;
using namespace validate_internal;

// The operands of each op by role, in Node::inputs order (graph.h's table above Node).
std::vector<const char*> input_roles(const Node& n) {
  const OpKind op = n.op;
  switch (op) {
    case OpKind::kConvFprop: return {"x", "w"};
    case OpKind::kConvDgrad: return {"dy", "w"};
    case OpKind::kConvWgrad: return {"x", "dy"};
    case OpKind::kMatmul: return {"a", "b"};
    case OpKind::kPointwise: return {"a", "b"};
    case OpKind::kReduction: return {"x"};
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return {"x", "scale", "bias"};
    case OpKind::kSdpa: {  // the optional inputs where kiln/graph/graph.h sdpa_inputs puts them
      std::vector<const char*> r = {"q", "k", "v"};
      const SdpaInputs x = sdpa_inputs(n);
      if (x.bias >= 0) r.push_back("bias");
      if (x.seq_len_q >= 0) r.insert(r.end(), {"seq_len_q", "seq_len_kv"});
      if (x.page_table_k >= 0) r.insert(r.end(), {"page_table_k", "page_table_v"});
      if (x.ragged_q >= 0) r.push_back("ragged_q");
      if (x.ragged_k >= 0) r.insert(r.end(), {"ragged_k", "ragged_v"});  // none over paged caches
      if (x.ragged_o >= 0) r.push_back("ragged_o");
      if (x.seed >= 0) r.insert(r.end(), {"seed", "offset"});
      return r;
    }
    case OpKind::kSdpaBackward: {
      std::vector<const char*> r = {"q", "k", "v", "o", "do", "stats"};
      const SdpaInputs x = sdpa_inputs(n);
      if (x.bias >= 0) r.push_back("bias");
      if (x.seq_len_q >= 0) r.insert(r.end(), {"seq_len_q", "seq_len_kv"});
      if (x.ragged_q >= 0) r.insert(r.end(), {"ragged_q", "ragged_k", "ragged_v", "ragged_o"});
      if (x.seed >= 0) r.insert(r.end(), {"seed", "offset"});
      return r;
    }
    case OpKind::kSdpaFp8: {
      std::vector<const char*> r = {"q",         "k",         "v",       "descale_q", "descale_k",
                                    "descale_v", "descale_s", "scale_s", "scale_o"};
      if (sdpa_inputs(n).seq_len_q >= 0) r.insert(r.end(), {"seq_len_q", "seq_len_kv"});
      return r;
    }
    case OpKind::kSdpaFp8Backward: {
      std::vector<const char*> r = {"q",          "k",         "v",         "o",         "do",         "stats",
                                    "descale_q",  "descale_k", "descale_v", "descale_o", "descale_do", "descale_s",
                                    "descale_dp", "scale_s",   "scale_dq",  "scale_dk",  "scale_dv",   "scale_dp"};
      if (sdpa_inputs(n).seq_len_q >= 0) r.insert(r.end(), {"seq_len_q", "seq_len_kv"});
      return r;
    }
  }
  return {};
}

const char* output_role(OpKind op) {
  switch (op) {
    case OpKind::kConvDgrad: return "dx";
    case OpKind::kConvWgrad: return "dw";
    case OpKind::kMatmul: return "c";
    case OpKind::kSdpa:
    case OpKind::kSdpaFp8: return "o";
    case OpKind::kSdpaBackward:
    case OpKind::kSdpaFp8Backward: return "dq";
    case OpKind::kConvFprop:
    case OpKind::kPointwise:
    case OpKind::kReduction:
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return "y";
  }
  return "y";
}

Json tensor_json(const Graph& g, const GraphRoles& roles, int t, const std::map<int, InputDraw>& draws) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  Json j;
  j["name"] = d.name;
  j["dims"] = tensor_dims(g, t);
  j["strides"] = tensor_strides(g, t);
  j["layout"] = layout_name(d.layout);
  j["dtype"] = dtype_name(roles.dtype_of(t));
  j["input"] = roles.is_graph_input(t);
  j["output"] = roles.is_graph_output(t);
  j["virtual"] = roles.is_virtual(t);
  bool dynamic = false;
  Json symbols = Json::array();
  for (const Dim& dim : d.dims) {
    dynamic = dynamic || dim.follows_symbols();
    if (dim.is_dynamic()) symbols.push_back(dim.symbol);
    else if (dim.derived) symbols.push_back("~");
    else symbols.push_back(nullptr);
  }
  if (dynamic) j["symbols"] = symbols;
  j["by_value"] = d.by_value;
  if (d.by_value) j["value"] = d.value;
  if (roles.is_graph_input(t) && !d.by_value) {
    auto it = draws.find(t);  // an input no node reads keeps make_random_inputs' default range
    j["draw"] = {{"lo", it == draws.end() ? -1.0 : it->second.lo}, {"hi", it == draws.end() ? 1.0 : it->second.hi}};
  }
  return j;
}

Json attributes_json(const Node& n, const NodePlan& plan) {
  Json a = Json::object();
  switch (n.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad:
      a["pre_padding"] = n.conv.pre_padding;
      a["post_padding"] = n.conv.post_padding;
      a["stride"] = n.conv.stride;
      a["dilation"] = n.conv.dilation;
      a["groups"] = n.conv.groups;
      break;
    case OpKind::kReduction: a["axes"] = n.reduction.axes; break;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: a["epsilon"] = n.norm.epsilon; break;
    case OpKind::kSdpa:
    case OpKind::kSdpaBackward:
    case OpKind::kSdpaFp8:
    case OpKind::kSdpaFp8Backward:
      a["causal"] = plan.sdpa.band.right == 0;  // a right bound of 0 however written (it signs alike)
      a["attn_scale"] = plan.sdpa.scale;        // 1/sqrt(head dim) unless given
      // The band as it applies: key j is seen by query i when i + shift - left_bound < j <= i + shift + right_bound
      // (each bound null where none; right_bound 0 when causal).
      a["left_bound"] = plan.sdpa.band.left > 0 ? Json(plan.sdpa.band.left) : Json(nullptr);
      a["right_bound"] = plan.sdpa.band.right >= 0 ? Json(plan.sdpa.band.right) : Json(nullptr);
      // With a padding mask a bottom-right shift is each entry's own (seq_len_kv - seq_len_q): null.
      a["diagonal_shift"] = !plan.sdpa.band.bottom_right ? Json(0)
                            : plan.sdpa.band.padding     ? Json(nullptr)
                                                         : Json(plan.sdpa.skv - plan.sdpa.sq);
      a["diagonal_alignment"] = plan.sdpa.band.bottom_right ? "bottom_right" : "top_left";
      a["padding_mask"] = plan.sdpa.band.padding != 0;
      a["paged_kv"] = plan.sdpa.paging.paged != 0;            // k and v are caches read through the page tables
      a["ragged"] = plan.sdpa.ragged != 0;                    // q, k, v, o packed token-major from their offsets
      if (n.sdpa.dropout > 0) a["dropout"] = n.sdpa.dropout;  // the mask: cuDNN's, from the seed and offset
      a["keys"] = plan.sdpa.skv;                              // Skv: with paged caches, pages * block size
      a["attn_scale_given"] = n.sdpa.attn_scale.has_value();
      break;
    case OpKind::kMatmul:
    case OpKind::kPointwise: break;
  }
  return a;
}

StatusOr<Json> node_json(const Graph& g, int index) {
  const Node& n = g.nodes[static_cast<size_t>(index)];
  KILN_ASSIGN_OR_RETURN(NodePlan plan, plan_node(g, index));
  Json j;
  j["name"] = n.name;
  j["op"] = node_op_name(n);
  j["kind"] = op_kind_name(n.op);
  if (n.op == OpKind::kPointwise) j["mode"] = pointwise_mode_name(n.pointwise.mode);
  else if (n.op == OpKind::kReduction) j["mode"] = reduction_mode_name(n.reduction.mode);
  else j["mode"] = nullptr;
  j["compute_dtype"] = dtype_name(n.compute_dtype.value_or(g.compute_dtype));
  const std::vector<const char*> roles = input_roles(n);
  Json ins = Json::array();
  for (size_t i = 0; i < n.inputs.size(); ++i)
    ins.push_back(
        {{"role", i < roles.size() ? roles[i] : "?"}, {"tensor", g.tensors[static_cast<size_t>(n.inputs[i])].name}});
  j["inputs"] = ins;
  Json outs = Json::array();
  static const char* const kFp8BackwardOut[] = {"dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"};
  for (size_t o = 0; o < n.outputs.size(); ++o)  // an sdpa's second output is its softmax statistics
    outs.push_back({{"role", o == 0                                      ? output_role(n.op)
                             : n.op == OpKind::kSdpaBackward             ? (o == 1 ? "dk" : "dv")
                             : n.op == OpKind::kSdpaFp8                  ? (o == 1 ? "amax_o" : "stats")
                             : n.op == OpKind::kSdpaFp8Backward && o < 7 ? kFp8BackwardOut[o]
                                                                         : "stats"},
                    {"tensor", g.tensors[static_cast<size_t>(n.outputs[o])].name}});
  j["outputs"] = outs;
  j["attributes"] = attributes_json(n, plan);
  j["reduction_length"] = plan.reduction_length;
  return j;
}

Json tolerance_json(const Tolerance& t) {
  return {{"atol", t.atol},           {"rtol", t.rtol},           {"nmse_max", t.nmse_max},
          {"rel_floor", t.rel_floor}, {"acc_coeff", t.acc_coeff}, {"acc_nmse_coeff", t.acc_nmse_coeff}};
}

// Per output: its accumulation path and the tolerance check_outputs gives it with magnitudes ("bound") and
// from values alone ("legacy"), each without and with TF32, before CheckOptions::tolerance_scale.
StatusOr<Json> outputs_json(const Graph& g) {
  std::map<std::string, std::vector<OutputGate>> gates;
  for (bool bound : {true, false})
    for (bool tf32 : {false, true}) {
      CheckOptions o;
      o.allow_tf32 = tf32;
      KILN_ASSIGN_OR_RETURN(gates[std::string(bound ? "bound" : "legacy") + (tf32 ? "_tf32" : "")],
                            plan_output_gates(g, bound, false, o));
    }
  Json outs = Json::array();
  const GraphRoles roles(g);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int t = g.outputs[i];
    const AccumulationPath path = accumulation_into(g, roles, t);
    Json j;
    j["tensor"] = g.tensors[static_cast<size_t>(t)].name;
    j["reduction_length"] = path.reduction_length;
    j["accumulation"] = {{"unit_roundoff", path.unit_roundoff}, {"nodes", path.nodes}};
    Json tol;
    for (const char* k : {"bound", "bound_tf32", "legacy", "legacy_tf32"})
      tol[k] = tolerance_json(gates[k][i].check.tolerance);
    j["tolerance"] = tol;
    outs.push_back(std::move(j));
  }
  return outs;
}

StatusOr<Json> document(const Graph& g) {
  KILN_ASSIGN_OR_RETURN(std::vector<int> order, topological_order(g));
  KILN_ASSIGN_OR_RETURN(std::vector<InputDraw> draw_list, input_draws(g));
  std::map<int, InputDraw> draws;
  for (const InputDraw& d : draw_list) draws.emplace(d.tensor, d);
  const GraphRoles roles(g);
  Json doc;
  doc["format"] = kNormalizedGraphFormat;
  doc["version"] = kNormalizedGraphVersion;
  doc["name"] = g.name;
  doc["io_dtype"] = dtype_name(g.io_dtype);
  doc["intermediate_dtype"] = dtype_name(g.intermediate_dtype);
  doc["compute_dtype"] = dtype_name(g.compute_dtype);
  doc["dynamic"] = Json::object();
  for (const auto& [symbol, value] : g.dynamic_dims) doc["dynamic"][symbol] = value;
  Json tensors = Json::array();
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) tensors.push_back(tensor_json(g, roles, t, draws));
  doc["tensors"] = std::move(tensors);
  Json nodes = Json::array();
  for (int n : order) {
    KILN_ASSIGN_OR_RETURN(Json nj, node_json(g, n));
    nodes.push_back(std::move(nj));
  }
  doc["nodes"] = std::move(nodes);
  KILN_ASSIGN_OR_RETURN(doc["outputs"], outputs_json(g));
  return doc;
}

}  // namespace

StatusOr<std::string> normalized_graph_json(const Graph& graph, int indent) {
  const std::string where = "graph '" + graph.name + "': normalized graph";
  return catch_exceptions(where, [&]() -> StatusOr<std::string> {
    try {
      StatusOr<Json> doc = document(graph);
      if (!doc.is_ok()) return doc.status().with_context(where);
      return doc->dump(indent < 0 ? -1 : indent);
    } catch (const Json::exception& e) {  // type_error.316: a name that is not UTF-8
      return invalid_argument(where + ": " + e.what());
    }
  });
}

}  // namespace kiln
