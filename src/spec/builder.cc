#include "kiln/spec/builder.h"

namespace kiln {

GraphBuilder::GraphBuilder(std::string name) { graph_.name = std::move(name); }

GraphBuilder& GraphBuilder::io_dtype(DataType t) {
  graph_.io_dtype = t;
  return *this;
}
GraphBuilder& GraphBuilder::intermediate_dtype(DataType t) {
  graph_.intermediate_dtype = t;
  return *this;
}
GraphBuilder& GraphBuilder::compute_dtype(DataType t) {
  graph_.compute_dtype = t;
  return *this;
}
GraphBuilder& GraphBuilder::dynamic(const std::string& symbol, int64_t value) {
  graph_.dynamic_dims[symbol] = value;
  return *this;
}

void GraphBuilder::fail(const std::string& message) {
  if (error_.is_ok()) error_ = invalid_argument("builder: " + message);
}

bool GraphBuilder::check_ref(TensorRef t, const std::string& where) {
  if (t.index >= 0 && t.index < static_cast<int>(graph_.tensors.size())) return true;
  fail(where + ": refers to a missing tensor (#" + std::to_string(t.index) + ")");
  return false;
}

TensorRef GraphBuilder::tensor(const std::string& name, const std::vector<DimArg>& dims, Layout layout,
                               std::optional<DataType> dtype) {
  if (graph_.find_tensor(name) >= 0) {
    fail("tensor '" + name + "' is declared twice");
    return TensorRef{};
  }
  TensorDesc t;
  t.name = name;
  for (const DimArg& d : dims) t.dims.push_back(Dim{d.value, d.symbol});
  t.layout = layout;
  t.dtype = dtype;
  graph_.tensors.push_back(t);
  return TensorRef{static_cast<int>(graph_.tensors.size()) - 1};
}

TensorRef GraphBuilder::tensor_strided(const std::string& name, const std::vector<DimArg>& dims,
                                       std::vector<int64_t> strides, std::optional<DataType> dtype) {
  TensorRef r = tensor(name, dims, Layout::kExplicit, dtype);
  if (r.index >= 0) graph_.tensors[r.index].strides = std::move(strides);
  return r;
}

TensorRef GraphBuilder::scalar(const std::string& name, double value, std::optional<DataType> dtype, size_t rank) {
  TensorRef r = tensor(name, std::vector<DimArg>(rank, DimArg(1)), Layout::kRowMajor, dtype);
  if (r.index >= 0) {
    graph_.tensors[r.index].by_value = true;
    graph_.tensors[r.index].value = value;
  }
  return r;
}

int GraphBuilder::find_or_add_tensor(const std::string& name) {
  const int t = graph_.find_tensor(name);
  if (t >= 0) return t;
  TensorDesc d;
  d.name = name;
  graph_.tensors.push_back(d);
  return static_cast<int>(graph_.tensors.size()) - 1;
}

TensorRef GraphBuilder::add_node(Node node, const std::vector<TensorRef>& inputs, std::string out) {
  for (const Node& n : graph_.nodes)
    if (n.name == node.name) {
      fail("node '" + node.name + "' is declared twice");
      return TensorRef{};
    }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!check_ref(inputs[i], "node '" + node.name + "': input " + std::to_string(i))) return TensorRef{};
    node.inputs.push_back(inputs[i].index);
  }
  if (out.empty()) out = node.name;
  const int t = find_or_add_tensor(out);
  node.outputs.push_back(t);
  graph_.nodes.push_back(std::move(node));
  return TensorRef{t};
}

namespace {
Node make_node(const std::string& name, OpKind op) {
  Node n;
  n.name = name;
  n.op = op;
  return n;
}
}  // namespace

TensorRef GraphBuilder::conv_fprop(const std::string& name, TensorRef x, TensorRef w, const ConvOptions& o,
                                   std::string out) {
  Node n = make_node(name, OpKind::kConvFprop);
  n.conv = o.attrs;
  return add_node(std::move(n), {x, w}, std::move(out));
}
TensorRef GraphBuilder::conv_dgrad(const std::string& name, TensorRef dy, TensorRef w, const ConvOptions& o,
                                   std::string out) {
  Node n = make_node(name, OpKind::kConvDgrad);
  n.conv = o.attrs;
  return add_node(std::move(n), {dy, w}, std::move(out));
}
TensorRef GraphBuilder::conv_wgrad(const std::string& name, TensorRef x, TensorRef dy, const ConvOptions& o,
                                   std::string out) {
  Node n = make_node(name, OpKind::kConvWgrad);
  n.conv = o.attrs;
  return add_node(std::move(n), {x, dy}, std::move(out));
}
TensorRef GraphBuilder::matmul(const std::string& name, TensorRef a, TensorRef b, std::string out) {
  return add_node(make_node(name, OpKind::kMatmul), {a, b}, std::move(out));
}
TensorRef GraphBuilder::pointwise(const std::string& name, PointwiseMode mode, TensorRef a, TensorRef b,
                                  std::string out) {
  Node n = make_node(name, OpKind::kPointwise);
  n.pointwise.mode = mode;
  if (pointwise_is_unary(mode)) return add_node(std::move(n), {a}, std::move(out));
  return add_node(std::move(n), {a, b}, std::move(out));
}
TensorRef GraphBuilder::bias_add(const std::string& name, TensorRef x, TensorRef bias, std::string out) {
  return pointwise(name, PointwiseMode::kBiasAdd, x, bias, std::move(out));
}
TensorRef GraphBuilder::scale(const std::string& name, TensorRef x, TensorRef s, std::string out) {
  return pointwise(name, PointwiseMode::kScale, x, s, std::move(out));
}
TensorRef GraphBuilder::relu(const std::string& name, TensorRef x, std::string out) {
  return pointwise(name, PointwiseMode::kRelu, x, {}, std::move(out));
}
TensorRef GraphBuilder::gelu(const std::string& name, TensorRef x, std::string out) {
  return pointwise(name, PointwiseMode::kGeluErf, x, {}, std::move(out));
}
TensorRef GraphBuilder::reduce(const std::string& name, ReductionMode mode, TensorRef x, std::vector<int> axes,
                               std::string out) {
  Node n = make_node(name, OpKind::kReduction);
  n.reduction.mode = mode;
  n.reduction.axes = std::move(axes);
  return add_node(std::move(n), {x}, std::move(out));
}
TensorRef GraphBuilder::layer_norm(const std::string& name, TensorRef x, TensorRef scale, TensorRef bias,
                                   double epsilon, std::string out) {
  Node n = make_node(name, OpKind::kLayerNorm);
  n.norm.epsilon = epsilon;
  return add_node(std::move(n), {x, scale, bias}, std::move(out));
}
TensorRef GraphBuilder::rms_norm(const std::string& name, TensorRef x, TensorRef scale, double epsilon,
                                 std::string out) {
  Node n = make_node(name, OpKind::kRmsNorm);
  n.norm.epsilon = epsilon;
  return add_node(std::move(n), {x, scale}, std::move(out));
}
TensorRef GraphBuilder::sdpa(const std::string& name, TensorRef q, TensorRef k, TensorRef v, bool causal,
                             std::optional<double> attn_scale, std::string out) {
  SdpaAttrs a;
  a.causal = causal;
  a.attn_scale = attn_scale;
  return sdpa(name, q, k, v, a, std::move(out));
}
TensorRef GraphBuilder::sdpa(const std::string& name, TensorRef q, TensorRef k, TensorRef v, const SdpaAttrs& attrs,
                             std::string out, std::optional<TensorRef> bias, std::optional<TensorRef> seq_len_q,
                             std::optional<TensorRef> seq_len_kv, std::optional<TensorRef> page_table_k,
                             std::optional<TensorRef> page_table_v, std::optional<SdpaRaggedOffsets> ragged,
                             std::optional<SdpaDropout> dropout) {
  Node n = make_node(name, OpKind::kSdpa);
  n.sdpa = attrs;
  std::vector<TensorRef> inputs = {q, k, v};
  if (bias) inputs.push_back(*bias);
  // One of a pair alone is kept (validation then names the missing one by the count of inputs), never dropped.
  for (const auto* x : {&seq_len_q, &seq_len_kv})
    if (*x) inputs.push_back(**x), n.sdpa.padding = true;
  for (const auto* x : {&page_table_k, &page_table_v})
    if (*x) inputs.push_back(**x), n.sdpa.paged = true;
  if (ragged) {
    inputs.push_back(ragged->q);
    for (const auto* x : {&ragged->k, &ragged->v})
      if (*x) inputs.push_back(**x);
    inputs.push_back(ragged->o);
    n.sdpa.ragged = true;
  }
  if (dropout) {  // last (kiln/graph/graph.h sdpa_inputs)
    n.sdpa.dropout = dropout->probability;
    inputs.push_back(dropout->seed);
    inputs.push_back(dropout->offset);
  }
  return add_node(std::move(n), inputs, std::move(out));
}

GraphBuilder::SdpaGrads GraphBuilder::sdpa_backward(
    const std::string& name, TensorRef q, TensorRef k, TensorRef v, TensorRef o, TensorRef dout, TensorRef stats,
    const SdpaAttrs& attrs, std::optional<TensorRef> bias, std::optional<TensorRef> seq_len_q,
    std::optional<TensorRef> seq_len_kv, std::optional<SdpaRaggedOffsets> ragged, std::optional<SdpaDropout> dropout) {
  Node n = make_node(name, OpKind::kSdpaBackward);
  n.sdpa = attrs;
  std::vector<TensorRef> inputs = {q, k, v, o, dout, stats};
  if (bias) inputs.push_back(*bias);
  for (const auto* x : {&seq_len_q, &seq_len_kv})  // as sdpa's: one alone is kept, and validation names it
    if (*x) inputs.push_back(**x), n.sdpa.padding = true;
  if (ragged) {  // one of k's and v's missing is kept out: validation then names the count
    inputs.push_back(ragged->q);
    for (const auto* x : {&ragged->k, &ragged->v})
      if (*x) inputs.push_back(**x);
    inputs.push_back(ragged->o);
    n.sdpa.ragged = true;
  }
  if (dropout) {  // the forward's: the same probability, seed and offset draw the same mask
    n.sdpa.dropout = dropout->probability;
    inputs.push_back(dropout->seed);
    inputs.push_back(dropout->offset);
  }
  const TensorRef dq = add_node(std::move(n), inputs, name + "_dq");
  if (dq.index < 0) return SdpaGrads{};
  Node& added = graph_.nodes.back();
  SdpaGrads g{dq, TensorRef{}, TensorRef{}};
  // A tensor declared by those names is the output, as for dq (add_node).
  g.dk = TensorRef{find_or_add_tensor(name + "_dk")};
  g.dv = TensorRef{find_or_add_tensor(name + "_dv")};
  added.outputs.push_back(g.dk.index);
  added.outputs.push_back(g.dv.index);
  return g;
}

GraphBuilder::SdpaFp8Out GraphBuilder::sdpa_fp8(const std::string& name, TensorRef q, TensorRef k, TensorRef v,
                                                const SdpaFp8Scales& sc, const SdpaAttrs& attrs,
                                                std::optional<TensorRef> seq_len_q,
                                                std::optional<TensorRef> seq_len_kv) {
  Node n = make_node(name, OpKind::kSdpaFp8);
  n.sdpa = attrs;
  std::vector<TensorRef> inputs = {q,          k,         v, sc.descale_q, sc.descale_k, sc.descale_v, sc.descale_s,
                                   sc.scale_s, sc.scale_o};
  for (const auto* x : {&seq_len_q, &seq_len_kv})  // as sdpa's: one alone is kept, and validation names it
    if (*x) inputs.push_back(**x), n.sdpa.padding = true;
  const TensorRef o = add_node(std::move(n), inputs, name + "_o");
  if (o.index < 0) return SdpaFp8Out{};
  Node& added = graph_.nodes.back();
  // Typed here unless the author declared them: o e4m3 (cuDNN's SM 9.x engines write fp8 only), amax_o fp32.
  if (!graph_.tensors[static_cast<size_t>(o.index)].dtype)
    graph_.tensors[static_cast<size_t>(o.index)].dtype = DataType::kFp8E4M3;
  const TensorRef amax{find_or_add_tensor(name + "_amax_o")};
  if (!graph_.tensors[static_cast<size_t>(amax.index)].dtype)
    graph_.tensors[static_cast<size_t>(amax.index)].dtype = DataType::kFloat32;
  added.outputs.push_back(amax.index);
  return SdpaFp8Out{o, amax};
}

GraphBuilder::SdpaFp8Grads GraphBuilder::sdpa_fp8_backward(const std::string& name, TensorRef q, TensorRef k,
                                                           TensorRef v, TensorRef o, TensorRef dout, TensorRef stats,
                                                           const SdpaFp8BackwardScales& sc, const SdpaAttrs& attrs,
                                                           std::optional<TensorRef> seq_len_q,
                                                           std::optional<TensorRef> seq_len_kv) {
  Node n = make_node(name, OpKind::kSdpaFp8Backward);
  n.sdpa = attrs;
  std::vector<TensorRef> inputs = {q,
                                   k,
                                   v,
                                   o,
                                   dout,
                                   stats,
                                   sc.descale_q,
                                   sc.descale_k,
                                   sc.descale_v,
                                   sc.descale_o,
                                   sc.descale_do,
                                   sc.descale_s,
                                   sc.descale_dp,
                                   sc.scale_s,
                                   sc.scale_dq,
                                   sc.scale_dk,
                                   sc.scale_dv,
                                   sc.scale_dp};
  for (const auto* x : {&seq_len_q, &seq_len_kv})  // as sdpa's: one alone is kept, and validation names it
    if (*x) inputs.push_back(**x), n.sdpa.padding = true;
  const TensorRef dq = add_node(std::move(n), inputs, name + "_dq");
  if (dq.index < 0) return SdpaFp8Grads{};
  const size_t node = graph_.nodes.size() - 1;
  // Typed here unless the author declared them: the gradients e4m3 (what cuDNN's SM 9.x engines write), the amax
  // fp32. A tensor declared by those names is the output, as for dq (add_node).
  const auto output = [&](const std::string& suffix, DataType dtype) {
    const TensorRef t = suffix == "_dq" ? dq : TensorRef{find_or_add_tensor(name + suffix)};
    if (!graph_.tensors[static_cast<size_t>(t.index)].dtype) graph_.tensors[static_cast<size_t>(t.index)].dtype = dtype;
    if (suffix != "_dq") graph_.nodes[node].outputs.push_back(t.index);
    return t;
  };
  SdpaFp8Grads g;
  g.dq = output("_dq", DataType::kFp8E4M3);
  g.dk = output("_dk", DataType::kFp8E4M3);
  g.dv = output("_dv", DataType::kFp8E4M3);
  g.amax_dq = output("_amax_dq", DataType::kFloat32);
  g.amax_dk = output("_amax_dk", DataType::kFloat32);
  g.amax_dv = output("_amax_dv", DataType::kFloat32);
  g.amax_dp = output("_amax_dp", DataType::kFloat32);
  return g;
}

TensorRef GraphBuilder::sdpa_stats(TensorRef o, std::string out) {
  if (!check_ref(o, "sdpa_stats")) return TensorRef{};
  const int writer = graph_.producer(o.index);
  const OpKind kind = writer < 0 ? OpKind::kPointwise : graph_.nodes[static_cast<size_t>(writer)].op;
  if (kind != OpKind::kSdpa && kind != OpKind::kSdpaFp8) {
    fail("sdpa_stats: tensor '" + graph_.tensors[static_cast<size_t>(o.index)].name + "' is not an sdpa's output");
    return TensorRef{};
  }
  Node& n = graph_.nodes[static_cast<size_t>(writer)];
  if (n.outputs.size() != (kind == OpKind::kSdpaFp8 ? 2u : 1u) || n.outputs[0] != o.index) {
    fail("sdpa_stats: node '" + n.name + "' has its statistics already");
    return TensorRef{};
  }
  if (out.empty()) out = n.name + "_stats";
  if (graph_.find_tensor(out) >= 0) {
    fail("sdpa_stats: tensor '" + out + "' is declared already");
    return TensorRef{};
  }
  const int t = find_or_add_tensor(out);
  graph_.tensors[static_cast<size_t>(t)].dtype = DataType::kFloat32;
  n.outputs.push_back(t);
  return TensorRef{t};
}

GraphBuilder& GraphBuilder::set_dtype(TensorRef t, DataType dtype) {
  if (check_ref(t, "set_dtype")) graph_.tensors[t.index].dtype = dtype;
  return *this;
}
GraphBuilder& GraphBuilder::set_layout(TensorRef t, Layout layout) {
  if (check_ref(t, "set_layout")) graph_.tensors[t.index].layout = layout;
  return *this;
}
GraphBuilder& GraphBuilder::set_compute_dtype(TensorRef t, DataType dtype) {
  if (!check_ref(t, "set_compute_dtype")) return *this;
  int p = graph_.producer(t.index);
  if (p < 0) {
    fail("set_compute_dtype: tensor '" + graph_.tensors[t.index].name + "' is not written by a node");
    return *this;
  }
  graph_.nodes[p].compute_dtype = dtype;
  return *this;
}
GraphBuilder& GraphBuilder::output(TensorRef t) {
  if (check_ref(t, "output")) graph_.outputs.push_back(t.index);
  return *this;
}

StatusOr<Graph> GraphBuilder::build(const ValidateOptions& options) const {
  if (!error_.is_ok()) return error_;
  Graph g = graph_;
  Status s = validate_graph(g, options);
  if (!s.is_ok()) return s.with_context("builder" + (g.name.empty() ? std::string() : " '" + g.name + "'"));
  return g;
}

}  // namespace kiln
