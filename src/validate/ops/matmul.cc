// The matmul family's node plan (geometry) and host reference.
#include "kiln/validate/host_tensor.h"
#include "validate/ops/reference_ops.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

Status matmul_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const auto a = tensor_dims(g, node.inputs[0]), b = tensor_dims(g, node.inputs[1]),
             c = tensor_dims(g, node.outputs[0]);
  if (a.size() < 2 || b.size() < 2 || c.size() < 2) return invalid_argument(where + ": matmul operands need rank >= 2");
  MatmulGeom& m = p.mm;
  m.m = a[a.size() - 2];
  m.k = a[a.size() - 1];
  m.n = b[b.size() - 1];
  if (b[b.size() - 2] != m.k)
    return invalid_argument(where + ": K mismatch: a " + tensor_label(g, node.inputs[0]) + " " + dims_str(a) + ", b " +
                            tensor_label(g, node.inputs[1]) + " " + dims_str(b));
  if (c[c.size() - 2] != m.m || c[c.size() - 1] != m.n)
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(c) +
                            " is not [..., " + std::to_string(m.m) + ", " + std::to_string(m.n) + "]");
  m.batch.assign(c.begin(), c.end() - 2);
  auto batch_strides = [&](const std::vector<int64_t>& d, int t, std::vector<int64_t>& out) -> Status {
    const size_t nb = d.size() - 2;
    if (nb > m.batch.size())
      return invalid_argument(where + ": " + tensor_label(g, t) + " has more batch dims than the output");
    const auto packed = row_major_strides(d);
    out.assign(m.batch.size(), 0);
    for (size_t i = 0; i < nb; ++i) {
      const size_t oi = m.batch.size() - nb + i;
      if (d[i] == m.batch[oi]) out[oi] = packed[i];
      else if (d[i] != 1)
        return invalid_argument(where + ": batch dims of " + tensor_label(g, t) + " " + dims_str(d) +
                                " do not broadcast to the output's " + dims_str(c));
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(batch_strides(a, node.inputs[0], m.a_batch));
  KILN_RETURN_IF_ERROR(batch_strides(b, node.inputs[1], m.b_batch));
  p.reduction_length = m.k;
  return Status::ok();
}

namespace {

Values run_matmul(const MatmulGeom& m, const Values& a, const Values& b) {
  const int64_t batches = m.batch_count();
  Values c(static_cast<size_t>(batches * m.m * m.n), 0.0);
  std::vector<int64_t> idx(m.batch.size(), 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t ao = 0, bo = 0, rem = bi;
    for (size_t k = m.batch.size(); k-- > 0;) {
      const int64_t ik = rem % m.batch[k];
      rem /= m.batch[k];
      ao += ik * m.a_batch[k];
      bo += ik * m.b_batch[k];
    }
    double* cp = c.data() + bi * m.m * m.n;
    for (int64_t i = 0; i < m.m; ++i)
      for (int64_t kk = 0; kk < m.k; ++kk) {
        const double av = a[static_cast<size_t>(ao + i * m.k + kk)];
        const double* brow = b.data() + bo + kk * m.n;
        for (int64_t j = 0; j < m.n; ++j) cp[i * m.n + j] += av * brow[j];
      }
  }
  return c;
}

}  // namespace

HostNodeResult matmul_host(const NodePlan& p, const Node&, const std::vector<const Values*>& in,
                           const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  return contraction_host([&](const Values& a, const Values& b) { return run_matmul(p.mm, a, b); }, in, op, sop);
}

}  // namespace kiln::validate_internal
