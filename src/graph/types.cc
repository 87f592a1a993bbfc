// Names, parsing and small helpers of Kiln's IR (kiln/graph/graph.h).
#include <algorithm>

#include "kiln/graph/graph.h"

namespace kiln {

const char* dtype_name(DataType t) { return enum_name(kDataTypeNames, t); }

StatusOr<DataType> parse_dtype(const std::string& name) {
  static constexpr EnumName<DataType> kAliases[] = {{DataType::kFloat32, "float"},
                                                    {DataType::kFloat32, "float32"},
                                                    {DataType::kFloat16, "half"},
                                                    {DataType::kFloat16, "float16"},
                                                    {DataType::kBFloat16, "bfloat16"}};
  for (const auto& alias : kAliases)
    if (name == alias.name) return alias.value;
  return parse_enum(kDataTypeNames, name, "dtype");
}

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kFp8E4M3: return 1;
    case DataType::kFp8E5M2: return 1;
    case DataType::kInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

const char* layout_name(Layout l) { return enum_name(kLayoutNames, l); }
StatusOr<Layout> parse_layout(const std::string& name) { return parse_enum(kLayoutNames, name, "layout"); }

const char* op_kind_name(OpKind k) { return enum_name(kOpKindNames, k); }

int64_t sdpa_keys_extent(const Graph& g, const Node& n) {
  if (!is_attention(n.op) || n.inputs.size() < 2) return 0;
  const auto dims = [&](int input) -> const std::vector<Dim>* {
    if (input < 0 || static_cast<size_t>(input) >= n.inputs.size()) return nullptr;
    const int t = n.inputs[static_cast<size_t>(input)];
    return t >= 0 && static_cast<size_t>(t) < g.tensors.size() ? &g.tensors[static_cast<size_t>(t)].dims : nullptr;
  };
  const std::vector<Dim>* k = dims(1);
  if (k == nullptr || k->size() != 4) return 0;
  if (!n.sdpa.paged || n.op != OpKind::kSdpa) return (*k)[2].value;
  const std::vector<Dim>* table = dims(sdpa_inputs(n).page_table_k);
  return table != nullptr && table->size() == 4 ? (*table)[2].value * (*k)[2].value : 0;
}

std::string node_op_name(const Node& node) {
  if (node.op == OpKind::kPointwise) return pointwise_mode_name(node.pointwise.mode);
  if (node.op == OpKind::kReduction) return std::string("reduce_") + reduction_mode_name(node.reduction.mode);
  return op_kind_name(node.op);
}

// pointwise_mode_name, pointwise_is_unary and pointwise_modes are in src/graph/ops/pointwise.cc; the
// reduction modes in src/graph/ops/reduction.cc.

std::vector<int64_t> TensorDesc::shape() const {
  std::vector<int64_t> s;
  s.reserve(dims.size());
  for (const Dim& d : dims) s.push_back(d.value);
  return s;
}

int64_t TensorDesc::element_count() const {
  int64_t n = 1;
  for (const Dim& d : dims) n *= d.value;
  return n;
}

bool TensorDesc::packed_row_major() const {
  if (strides.size() != dims.size()) return false;
  int64_t expect = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i].value != 1 && strides[i] != expect) return false;
    expect *= dims[i].value;
  }
  return true;
}

int Graph::find_tensor(const std::string& tensor_name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == tensor_name) return static_cast<int>(i);
  return -1;
}

int Graph::producer(int tensor) const {
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int o : nodes[n].outputs)
      if (o == tensor) return static_cast<int>(n);
  return -1;
}

bool Graph::is_graph_input(int tensor) const { return producer(tensor) < 0; }

bool Graph::is_graph_output(int tensor) const {
  return std::find(outputs.begin(), outputs.end(), tensor) != outputs.end();
}

GraphRoles::GraphRoles(const Graph& graph)
    : graph_(&graph),
      producer_(graph.tensors.size(), -1),
      consumers_(graph.tensors.size(), 0),
      output_(graph.tensors.size(), 0) {
  const int nt = static_cast<int>(graph.tensors.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int o : graph.nodes[n].outputs)
      if (o >= 0 && o < nt && producer_[static_cast<size_t>(o)] < 0)
        producer_[static_cast<size_t>(o)] = static_cast<int>(n);
    for (int i : graph.nodes[n].inputs)
      if (i >= 0 && i < nt) ++consumers_[static_cast<size_t>(i)];
  }
  for (int o : graph.outputs)
    if (o >= 0 && o < nt) output_[static_cast<size_t>(o)] = 1;
}

int GraphRoles::producer(int tensor) const {
  if (tensor < 0 || tensor >= static_cast<int>(producer_.size())) return -1;
  return producer_[static_cast<size_t>(tensor)];
}

bool GraphRoles::is_graph_output(int tensor) const {
  return tensor >= 0 && tensor < static_cast<int>(output_.size()) && output_[static_cast<size_t>(tensor)];
}

int GraphRoles::consumer_count(int tensor) const {
  if (tensor < 0 || tensor >= static_cast<int>(consumers_.size())) return 0;
  return consumers_[static_cast<size_t>(tensor)];
}

DataType GraphRoles::dtype_of(int tensor) const {
  const Graph& g = *graph_;
  if (tensor < 0 || tensor >= static_cast<int>(g.tensors.size())) return g.io_dtype;
  const TensorDesc& t = g.tensors[static_cast<size_t>(tensor)];
  if (t.dtype) return *t.dtype;
  if (t.by_value) return g.compute_dtype;
  if (is_graph_input(tensor) || is_graph_output(tensor)) return g.io_dtype;
  return g.intermediate_dtype;
}

DataType Graph::dtype_of(int tensor) const {
  if (tensor < 0 || tensor >= static_cast<int>(tensors.size())) return io_dtype;
  const TensorDesc& t = tensors[tensor];
  if (t.dtype) return *t.dtype;
  // A by-value scalar is passed in the compute type, as cuDNN Frontend does for pass-by-value tensors.
  if (t.by_value) return compute_dtype;
  if (is_graph_input(tensor) || is_graph_output(tensor)) return io_dtype;
  return intermediate_dtype;
}

}  // namespace kiln
