// The matmul family in the graph layer: arity, inference, signature attributes, cost.
#include "graph/ops/op_family.h"

namespace kiln::graph_internal {
namespace {

void matmul_arity(const Node&, size_t* lo, size_t* hi) { *lo = *hi = 2; }

Status infer_matmul(NodeCtx& c, const ValidateOptions&, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_rank(c, 0, 2, 8));
  KILN_RETURN_IF_ERROR(check_rank(c, 1, 2, 8));
  KILN_RETURN_IF_ERROR(check_gemm_dtypes(c));
  const Dims& a = c.in(0).dims;
  const Dims& b = c.in(1).dims;
  const Dim& k_a = a[a.size() - 1];
  const Dim& k_b = b[b.size() - 2];
  if (k_a.value != k_b.value)
    return c.error(c.in_label(1) + ": inner dims differ: " + c.in_label(0) + " has K=" + std::to_string(k_a.value) +
                   " (last axis) but " + c.in_label(1) + " has K=" + std::to_string(k_b.value) +
                   " (second-to-last axis)");
  Dims batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2), batch;
  Status s = broadcast(c, batch_a, c.in_label(0) + " batch dims", batch_b, c.in_label(1) + " batch dims", &batch);
  if (!s.is_ok()) return s;
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b[b.size() - 1]);
  out->push_back(batch);
  return Status::ok();
}

std::string matmul_signature_attrs(const Graph&, const Node&) { return ""; }

// [..., M, K] x [..., K, N] -> [..., M, N]: K multiply-accumulates per output element.
OpCost matmul_cost(const Graph& g, const Node& n) {
  const TensorDesc& a = g.tensors[static_cast<size_t>(n.inputs[0])];
  const TensorDesc& out = g.tensors[static_cast<size_t>(n.outputs[0])];
  OpCost c;
  if (a.dims.empty()) return c;
  c.macs = static_cast<double>(out.element_count()) * static_cast<double>(a.dims.back().value);
  c.flops = 2.0 * c.macs;
  return c;
}

}  // namespace

const OpFamily kMatmulFamily = {"matmul", matmul_arity, infer_matmul, matmul_signature_attrs, matmul_cost};

}  // namespace kiln::graph_internal
