// Shape and dtype inference: the checks several op families share, and infer_node, which hands each node
// to its family (src/graph/ops/<family>.cc). Messages name the node, the tensor (by its role and name) and
// the attribute at fault.
#include <algorithm>
#include <cstdio>

#include "graph/ops/op_family.h"

namespace kiln::graph_internal {

Status check_rank(const NodeCtx& c, size_t i, size_t lo, size_t hi) {
  size_t r = c.in(i).dims.size();
  if (r >= lo && r <= hi) return Status::ok();
  std::string expected = lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
  return c.error(c.in_label(i) + ": rank " + std::to_string(r) + ", expected " + expected);
}

Status check_float_in(const NodeCtx& c, size_t i) {
  if (is_float(c.in_dtype(i))) return Status::ok();
  return c.error(c.in_label(i) + ": dtype " + dtype_name(c.in_dtype(i)) + " is not supported by " +
                 node_op_name(c.node) + " (expected a floating-point type)");
}

Status check_float_out(const NodeCtx& c) {
  if (is_float(c.out_dtype())) return Status::ok();
  return c.error(c.out_label() + ": dtype " + dtype_name(c.out_dtype()) + " is not supported by " +
                 node_op_name(c.node) + " (expected a floating-point type)");
}

Status check_gemm_dtypes(const NodeCtx& c) {
  KILN_RETURN_IF_ERROR(check_float_in(c, 0));
  KILN_RETURN_IF_ERROR(check_float_in(c, 1));
  DataType a = c.in_dtype(0), b = c.in_dtype(1);
  bool fp8 = is_fp8(a) || is_fp8(b);
  if (a != b && !(is_fp8(a) && is_fp8(b)))
    return c.error(c.in_label(0) + " is " + dtype_name(a) + " but " + c.in_label(1) + " is " + dtype_name(b) +
                   "; mixed input dtypes are not supported");
  DataType comp = c.compute();
  if (comp != DataType::kFloat32 && !(comp == DataType::kFloat16 && a == DataType::kFloat16))
    return c.error("attribute 'compute_dtype': " + std::string(dtype_name(comp)) + " is not supported with " +
                   dtype_name(a) + " inputs (use fp32" + (a == DataType::kFloat16 ? " or fp16)" : ")"));
  KILN_RETURN_IF_ERROR(check_float_out(c));
  if (fp8 && is_fp8(c.out_dtype()))
    return c.error(c.out_label() + ": an fp8 " + node_op_name(c.node) + " writes fp16, bf16 or fp32, not " +
                   dtype_name(c.out_dtype()) + " (add a scale node to produce fp8)");
  return Status::ok();
}

Status check_compute_fp32(const NodeCtx& c) {
  if (c.compute() == DataType::kFloat32) return Status::ok();
  return c.error("attribute 'compute_dtype': " + std::string(dtype_name(c.compute())) + " is not supported by " +
                 node_op_name(c.node) + " (expected fp32)");
}

Status broadcast(const NodeCtx& c, const Dims& a, const std::string& a_label, const Dims& b, const std::string& b_label,
                 Dims* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, Dim{1, ""});
  for (size_t i = 0; i < r; ++i) {
    const Dim* da = i + a.size() >= r ? &a[i + a.size() - r] : nullptr;
    const Dim* db = i + b.size() >= r ? &b[i + b.size() - r] : nullptr;
    if (da && db) {
      if (da->value == db->value) {
        const auto rank = [](const Dim* d) { return d->is_dynamic() ? 2 : d->derived ? 1 : 0; };
        (*out)[i] = rank(da) >= rank(db) ? *da : *db;
      } else if (da->value == 1) {
        (*out)[i] = *db;
      } else if (db->value == 1) {
        (*out)[i] = *da;
      } else {
        return c.error(a_label + " " + dims_text(a) + " and " + b_label + " " + dims_text(b) +
                       " do not broadcast (axis " + std::to_string(i) + ": " + std::to_string(da->value) + " vs " +
                       std::to_string(db->value) + ")");
      }
    } else {
      (*out)[i] = da ? *da : *db;
    }
  }
  return Status::ok();
}

bool is_fp8(DataType t) { return t == DataType::kFp8E4M3 || t == DataType::kFp8E5M2; }
bool is_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 || is_fp8(t);
}

std::string node_where(const Node& node) { return "node '" + node.name + "' (" + node_op_name(node) + ")"; }

std::string ints_text(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s + "]";
}

std::string canonical_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string dims_text(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    if (dims[i].is_dynamic()) s += dims[i].symbol + "=";
    s += std::to_string(dims[i].value);
  }
  return s + "]";
}

Status infer_node(Graph& graph, const GraphRoles& roles, Node& node, const ValidateOptions& options,
                  std::vector<Dims>* out_dims) {
  NodeCtx c{graph, roles, node, node_where(node)};
  KILN_RETURN_IF_ERROR(op_family(node.op).infer(c, options, out_dims));
  if (out_dims->size() != node.outputs.size())
    return c.error(
        std::to_string(node.outputs.size()) + " outputs, expected " + std::to_string(out_dims->size()) +
        (node.op == OpKind::kSdpa ? " (o, and its softmax statistics where asked for)" : ""));  // never: arity
  return Status::ok();
}

}  // namespace kiln::graph_internal
