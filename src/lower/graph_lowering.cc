// One function per op family: Kiln node -> frontend node. Output tensors get Kiln's inferred dims,
// strides and dtype, so the frontend and Kiln's references agree on every layout.
#include "lower/graph_lowering.h"

#include <cmath>

#include "lower/fe_status.h"

namespace kiln::lower_detail {
namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct Ctx {
  const Graph& g;
  fe::graph::Graph& fg;
  std::vector<TensorPtr> t;  // by tensor index; null until made
  std::vector<int64_t> uid;  // by tensor index (tensor_uids)
};

std::string node_label(const Node& n) { return "node '" + n.name + "' (" + op_kind_name(n.op) + ")"; }

fe::PointwiseMode_t to_fe_mode(PointwiseMode m) {
  switch (m) {
    case PointwiseMode::kAdd:
    case PointwiseMode::kBiasAdd: return fe::PointwiseMode_t::ADD;
    case PointwiseMode::kSub: return fe::PointwiseMode_t::SUB;
    case PointwiseMode::kMul:
    case PointwiseMode::kScale: return fe::PointwiseMode_t::MUL;
    case PointwiseMode::kDiv: return fe::PointwiseMode_t::DIV;
    case PointwiseMode::kMin: return fe::PointwiseMode_t::MIN;
    case PointwiseMode::kMax: return fe::PointwiseMode_t::MAX;
    case PointwiseMode::kRelu: return fe::PointwiseMode_t::RELU_FWD;
    case PointwiseMode::kGeluErf: return fe::PointwiseMode_t::GELU_FWD;
    case PointwiseMode::kGeluTanh: return fe::PointwiseMode_t::GELU_APPROX_TANH_FWD;
    case PointwiseMode::kSilu: return fe::PointwiseMode_t::SWISH_FWD;
    case PointwiseMode::kSigmoid: return fe::PointwiseMode_t::SIGMOID_FWD;
    case PointwiseMode::kTanh: return fe::PointwiseMode_t::TANH_FWD;
    case PointwiseMode::kExp: return fe::PointwiseMode_t::EXP;
    case PointwiseMode::kIdentity: return fe::PointwiseMode_t::IDENTITY;
  }
  return fe::PointwiseMode_t::IDENTITY;
}

fe::ReductionMode_t to_fe_reduction(ReductionMode m) {
  switch (m) {
    case ReductionMode::kSum: return fe::ReductionMode_t::ADD;
    case ReductionMode::kMax: return fe::ReductionMode_t::MAX;
    case ReductionMode::kMin: return fe::ReductionMode_t::MIN;
    case ReductionMode::kAmax: return fe::ReductionMode_t::AMAX;
  }
  return fe::ReductionMode_t::ADD;
}

// Makes (or returns) the frontend tensor for a Kiln graph input.
TensorPtr input_tensor(Ctx& c, int idx) {
  if (c.t[idx]) return c.t[idx];
  const TensorDesc& d = c.g.tensors[idx];
  TensorPtr p;
  if (d.by_value) {
    p = std::make_shared<fe::graph::Tensor_attributes>(static_cast<float>(d.value));
  } else {
    p = c.fg.tensor(fe::graph::Tensor_attributes()
                        .set_name(d.name)
                        .set_uid(c.uid[idx])
                        .set_dim(d.shape())
                        .set_stride(d.strides)
                        .set_data_type(to_fe_dtype(c.g.dtype_of(idx))));
  }
  c.t[idx] = p;
  return p;
}

// Gives a node's output Kiln's shape, layout, dtype and role.
void finish_output(Ctx& c, int idx, const TensorPtr& p) {
  const TensorDesc& d = c.g.tensors[idx];
  p->set_name(d.name).set_dim(d.shape()).set_stride(d.strides).set_data_type(to_fe_dtype(c.g.dtype_of(idx)));
  if (c.g.is_graph_output(idx)) p->set_output(true).set_uid(c.uid[idx]);
  c.t[idx] = p;
}

bool has_consumer(const Graph& g, int tensor) {
  for (const Node& n : g.nodes)
    for (int t : n.inputs)
      if (t == tensor) return true;
  return false;
}

// cuDNN's fusion patterns want the output of a matmul or convolution that feeds further ops (an epilogue
// such as AMAX) to be virtual. When the user also reads it, the op writes a virtual tensor, the epilogue
// reads that, and an IDENTITY copies it to the user's output in the same kernel.
void finish_main_output(Ctx& c, const Node& n, const TensorPtr& y) {
  int out = n.outputs[0];
  if (!(c.g.is_graph_output(out) && has_consumer(c.g, out))) {
    finish_output(c, out, y);
    return;
  }
  const TensorDesc& d = c.g.tensors[out];
  y->set_name(d.name + "_acc")
      .set_dim(d.shape())
      .set_stride(d.strides)
      .set_data_type(to_fe_dtype(c.g.intermediate_dtype));
  auto copy = c.fg.pointwise(y, fe::graph::Pointwise_attributes()
                                    .set_name(n.name + "_out")
                                    .set_mode(fe::PointwiseMode_t::IDENTITY)
                                    .set_compute_data_type(fe::DataType_t::FLOAT));
  finish_output(c, out, copy);
  c.t[out] = y;  // consumers read the virtual tensor
}

std::vector<int64_t> or_default(const std::vector<int64_t>& v, size_t n, int64_t def) {
  return v.empty() ? std::vector<int64_t>(n, def) : v;
}

Status lower_node(Ctx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  fe::DataType_t compute = to_fe_dtype(n.compute_dtype.value_or(c.g.compute_dtype));
  switch (n.op) {
    case OpKind::kConvFprop:
    case OpKind::kConvDgrad:
    case OpKind::kConvWgrad: {
      size_t spatial = c.g.tensors[n.inputs[0]].dims.size() - 2;
      auto pre = or_default(n.conv.pre_padding, spatial, 0), post = or_default(n.conv.post_padding, spatial, 0);
      auto stride = or_default(n.conv.stride, spatial, 1), dil = or_default(n.conv.dilation, spatial, 1);
      TensorPtr y;
      if (n.op == OpKind::kConvFprop) {
        y = c.fg.conv_fprop(in(0), in(1),
                            fe::graph::Conv_fprop_attributes()
                                .set_name(n.name)
                                .set_pre_padding(pre)
                                .set_post_padding(post)
                                .set_stride(stride)
                                .set_dilation(dil)
                                .set_compute_data_type(compute));
      } else if (n.op == OpKind::kConvDgrad) {
        y = c.fg.conv_dgrad(in(0), in(1),
                            fe::graph::Conv_dgrad_attributes()
                                .set_name(n.name)
                                .set_pre_padding(pre)
                                .set_post_padding(post)
                                .set_stride(stride)
                                .set_dilation(dil)
                                .set_compute_data_type(compute));
      } else {
        // Kiln's order is {x, dy}; the frontend takes (dy, x).
        y = c.fg.conv_wgrad(in(1), in(0),
                            fe::graph::Conv_wgrad_attributes()
                                .set_name(n.name)
                                .set_pre_padding(pre)
                                .set_post_padding(post)
                                .set_stride(stride)
                                .set_dilation(dil)
                                .set_compute_data_type(compute));
      }
      finish_main_output(c, n, y);
      return Status::ok();
    }
    case OpKind::kMatmul: {
      auto y =
          c.fg.matmul(in(0), in(1), fe::graph::Matmul_attributes().set_name(n.name).set_compute_data_type(compute));
      finish_main_output(c, n, y);
      return Status::ok();
    }
    case OpKind::kPointwise: {
      auto attrs = fe::graph::Pointwise_attributes()
                       .set_name(n.name)
                       .set_mode(to_fe_mode(n.pointwise.mode))
                       .set_compute_data_type(compute);
      TensorPtr y = n.inputs.size() == 1 ? c.fg.pointwise(in(0), attrs) : c.fg.pointwise(in(0), in(1), attrs);
      finish_output(c, n.outputs[0], y);
      return Status::ok();
    }
    case OpKind::kReduction: {
      auto y = c.fg.reduction(in(0), fe::graph::Reduction_attributes()
                                         .set_name(n.name)
                                         .set_mode(to_fe_reduction(n.reduction.mode))
                                         .set_compute_data_type(compute));
      finish_output(c, n.outputs[0], y);
      return Status::ok();
    }
    case OpKind::kLayerNorm: {
      auto attrs = fe::graph::Layernorm_attributes()
                       .set_name(n.name)
                       .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                       .set_epsilon(static_cast<float>(n.norm.epsilon))
                       .set_compute_data_type(compute);
      auto outs = c.fg.layernorm(in(0), in(1), in(2), attrs);
      finish_output(c, n.outputs[0], outs[0]);
      return Status::ok();
    }
    case OpKind::kRmsNorm: {
      auto eps = std::make_shared<fe::graph::Tensor_attributes>(static_cast<float>(n.norm.epsilon));
      auto attrs = fe::graph::Rmsnorm_attributes()
                       .set_name(n.name)
                       .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                       .set_epsilon(eps)
                       .set_compute_data_type(compute);
      auto outs = c.fg.rmsnorm(in(0), in(1), attrs);
      finish_output(c, n.outputs[0], outs[0]);
      return Status::ok();
    }
    case OpKind::kSdpa: {
      const auto& q = c.g.tensors[n.inputs[0]];
      double scale = n.sdpa.attn_scale.value_or(1.0 / std::sqrt(static_cast<double>(q.dims.back().value)));
      auto attrs = fe::graph::SDPA_attributes()
                       .set_name(n.name)
                       .set_generate_stats(false)
                       .set_causal_mask(n.sdpa.causal)
                       .set_attn_scale(static_cast<float>(scale));
      auto outs = c.fg.sdpa(in(0), in(1), in(2), attrs);
      finish_output(c, n.outputs[0], outs[0]);
      return Status::ok();
    }
  }
  return internal_error(node_label(n) + ": op not handled by lowering");
}

}  // namespace

fe::DataType_t to_fe_dtype(DataType t) {
  switch (t) {
    case DataType::kFloat32: return fe::DataType_t::FLOAT;
    case DataType::kFloat16: return fe::DataType_t::HALF;
    case DataType::kBFloat16: return fe::DataType_t::BFLOAT16;
    case DataType::kFp8E4M3: return fe::DataType_t::FP8_E4M3;
    case DataType::kFp8E5M2: return fe::DataType_t::FP8_E5M2;
    case DataType::kInt8: return fe::DataType_t::INT8;
    case DataType::kInt32: return fe::DataType_t::INT32;
    case DataType::kInt64: return fe::DataType_t::INT64;
  }
  return fe::DataType_t::NOT_SET;
}

StatusOr<std::vector<int64_t>> tensor_uids(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(graph));
  std::vector<int64_t> uids(graph.tensors.size());
  for (size_t i = 0; i < uids.size(); ++i) {
    if (i >= sig.tensor_ids.size() || sig.tensor_ids[i] < 0)
      return internal_error("graph '" + graph.name + "': tensor '" + graph.tensors[i].name +
                            "' has no canonical number");
    uids[i] = sig.tensor_ids[i] + 1;
  }
  return uids;
}

StatusOr<std::shared_ptr<fe::graph::Graph>> lower_graph(const Graph& graph, const std::vector<int64_t>& uids) {
  if (uids.size() != graph.tensors.size())
    return internal_error("graph '" + graph.name + "': " + std::to_string(uids.size()) + " uids for " +
                          std::to_string(graph.tensors.size()) + " tensors");
  auto fg = std::make_shared<fe::graph::Graph>();
  fg->set_name(graph.name.empty() ? "kiln_graph" : graph.name)
      .set_io_data_type(to_fe_dtype(graph.io_dtype))
      .set_intermediate_data_type(to_fe_dtype(graph.intermediate_dtype))
      .set_compute_data_type(to_fe_dtype(graph.compute_dtype));
  Ctx c{graph, *fg, std::vector<TensorPtr>(graph.tensors.size()), uids};
  // Nodes in dependency order: a node runs once all its inputs exist.
  std::vector<bool> done(graph.nodes.size(), false);
  size_t remaining = graph.nodes.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (done[i]) continue;
      const Node& n = graph.nodes[i];
      bool ready = true;
      for (int t : n.inputs) {
        int p = graph.producer(t);
        if (p >= 0 && !done[static_cast<size_t>(p)]) ready = false;
      }
      if (!ready) continue;
      // The frontend's node builders throw on some graphs (Graph::sdpa when no implementation fits).
      Status st = fe_guard(node_label(n), [&] { return lower_node(c, n); });
      if (!st.is_ok()) return st;
      done[i] = true;
      --remaining;
      progressed = true;
    }
    if (!progressed) return invalid_argument("graph '" + graph.name + "' has a cycle (validate it first)");
  }
  KILN_FE_RETURN_IF_ERROR(fg->validate(), "cuDNN Frontend rejected graph '" + graph.name + "'");
  return fg;
}

Status apply_profile(fe::graph::Graph& g, const DeviceProfile& profile) {
  auto props = std::make_shared<fe::DeviceProperties>();
  std::vector<uint8_t> bytes(profile.cudnn_device_properties.begin(), profile.cudnn_device_properties.end());
  KILN_FE_RETURN_IF_ERROR(props->deserialize(bytes), "loading device profile for " + profile.gpu_name);
  g.set_device_properties(props).set_sm_version(profile.sm_version).set_sm_count(profile.sm_count);
  return Status::ok();
}

}  // namespace kiln::lower_detail
