// Kiln graph -> frontend graph: the tensors every family shares, and the one table from op family to its
// lowering (src/lower/ops/<family>.cc, one function per family). Output tensors get Kiln's inferred dims,
// strides and dtype, so the frontend and Kiln's references agree on every layout.
#include "lower/graph_lowering.h"

#include "kiln/graph/ops/families.h"
#include "lower/fe_status.h"
#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {
namespace {

bool has_consumer(const Graph& g, int tensor) {
  for (const Node& n : g.nodes)
    for (int t : n.inputs)
      if (t == tensor) return true;
  return false;
}

}  // namespace

std::string node_label(const Node& n) { return "node '" + n.name + "' (" + op_kind_name(n.op) + ")"; }

fe::DataType_t node_compute_dtype(const LowerCtx& c, const Node& n) {
  return to_fe_dtype(n.compute_dtype.value_or(c.g.compute_dtype));
}

TensorPtr input_tensor(LowerCtx& c, int idx) {
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

void finish_output(LowerCtx& c, int idx, const TensorPtr& p) {
  const TensorDesc& d = c.g.tensors[idx];
  p->set_name(d.name).set_dim(d.shape()).set_stride(d.strides).set_data_type(to_fe_dtype(c.g.dtype_of(idx)));
  if (c.g.is_graph_output(idx)) p->set_output(true).set_uid(c.uid[idx]);
  c.t[idx] = p;
}

void finish_main_output(LowerCtx& c, const Node& n, const TensorPtr& y) {
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

namespace {

// The one table from op family to its lowering (src/lower/ops/<family>.cc).
Status lower_node(LowerCtx& c, const Node& n) {
  using LowerFn = Status (*)(LowerCtx&, const Node&);
  static const LowerFn kTable[kOpFamilyCount] = {lower_conv,      lower_matmul, lower_pointwise,
                                                 lower_reduction, lower_norm,   lower_sdpa};  // by OpFamilyId
  return family_entry(kTable, n.op)(c, n);
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
  LowerCtx c{graph, *fg, std::vector<TensorPtr>(graph.tensors.size()), uids};
  // Nodes in dependency order: a node runs once all its inputs exist. Producers from one index (Graph::producer()
  // scans the nodes per call).
  const GraphRoles roles(graph);
  std::vector<bool> done(graph.nodes.size(), false);
  size_t remaining = graph.nodes.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (done[i]) continue;
      const Node& n = graph.nodes[i];
      bool ready = true;
      for (int t : n.inputs) {
        int p = roles.producer(t);
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
