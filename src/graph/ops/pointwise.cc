// The pointwise family in the graph layer: its modes (names, arity), inference, signature attributes
// and cost. A new mode is an enumerator and a row of kPointwiseModeNames in kiln/graph/graph.h (and of
// kBinaryModes here when it takes two inputs), its math in
// src/validate/ops/pointwise_math.h and its frontend mode in src/lower/ops/pointwise.cc
// (docs/contributing.md "Adding an op or a pointwise mode").
#include <algorithm>
#include <iterator>

#include "graph/ops/op_family.h"

namespace kiln {
namespace {

// The binary modes; every other mode of kPointwiseModeNames (kiln/graph/graph.h) is unary.
constexpr PointwiseMode kBinaryModes[] = {PointwiseMode::kAdd,   PointwiseMode::kSub,    PointwiseMode::kMul,
                                          PointwiseMode::kDiv,   PointwiseMode::kMin,    PointwiseMode::kMax,
                                          PointwiseMode::kScale, PointwiseMode::kBiasAdd};

}  // namespace

const char* pointwise_mode_name(PointwiseMode m) { return enum_name(kPointwiseModeNames, m); }

bool pointwise_is_unary(PointwiseMode m) {
  if (!enum_name(kPointwiseModeNames, m, nullptr)) return false;  // no mode at all
  return std::find(std::begin(kBinaryModes), std::end(kBinaryModes), m) == std::end(kBinaryModes);
}

const std::vector<PointwiseMode>& pointwise_modes() {
  static const std::vector<PointwiseMode> modes = [] {
    std::vector<PointwiseMode> v;
    for (const auto& row : kPointwiseModeNames) v.push_back(row.value);
    return v;
  }();
  return modes;
}

}  // namespace kiln

namespace kiln::graph_internal {
namespace {

void pointwise_arity(const Node& n, size_t* lo, size_t* hi) {
  *lo = *hi = pointwise_is_unary(n.pointwise.mode) ? 1 : 2;
}

Status infer_pointwise(NodeCtx& c, const ValidateOptions&, std::vector<Dims>* out) {
  PointwiseMode m = c.node.pointwise.mode;
  for (size_t i = 0; i < c.node.inputs.size(); ++i)
    if (m != PointwiseMode::kIdentity) KILN_RETURN_IF_ERROR(check_float_in(c, i));
  if (m != PointwiseMode::kIdentity) KILN_RETURN_IF_ERROR(check_float_out(c));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  const Dims& a = c.in(0).dims;
  if (pointwise_is_unary(m)) {
    out->push_back(a);
    return Status::ok();
  }
  const Dims& b = c.in(1).dims;
  if (m == PointwiseMode::kScale) {
    if (c.in(1).element_count() != 1)
      return c.error(c.in_label(1) + ": a scale must be a scalar (one element), got " + dims_text(b));
    out->push_back(a);
    return Status::ok();
  }
  if (m == PointwiseMode::kBiasAdd) {
    // The bias broadcasts into x, never the other way: same rank, each extent 1 or equal to x's.
    if (b.size() != a.size())
      return c.error(c.in_label(1) + ": rank " + std::to_string(b.size()) + ", expected " + std::to_string(a.size()) +
                     " (same rank as " + c.in_label(0) + ", e.g. [1,C,1,1])");
    for (size_t i = 0; i < a.size(); ++i)
      if (b[i].value != 1 && b[i].value != a[i].value)
        return c.error(c.in_label(1) + ": dim " + std::to_string(i) + " is " + std::to_string(b[i].value) +
                       ", expected 1 or " + std::to_string(a[i].value) + " (" + c.in_label(0) + " " + dims_text(a) +
                       ")");
    out->push_back(a);
    return Status::ok();
  }
  Dims y;
  KILN_RETURN_IF_ERROR(broadcast(c, a, c.in_label(0), b, c.in_label(1), &y));
  out->push_back(y);
  return Status::ok();
}

// The mode is in the op's name (node_op_name): no attributes.
std::string pointwise_signature_attrs(const Graph&, const Node&) { return ""; }

// One operation per output element (a broadcast operand is read once per output element).
OpCost pointwise_cost(const Graph& g, const Node& n) {
  return element_op_cost(static_cast<double>(g.tensors[static_cast<size_t>(n.outputs[0])].element_count()));
}

}  // namespace

const OpFamily kPointwiseFamily = {"pointwise", pointwise_arity, infer_pointwise, pointwise_signature_attrs,
                                   pointwise_cost};

}  // namespace kiln::graph_internal
