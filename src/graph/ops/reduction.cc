// The reduction family in the graph layer: its modes, arity, inference, signature attributes, cost.
#include <algorithm>

#include "graph/ops/op_family.h"

namespace kiln {

const char* reduction_mode_name(ReductionMode m) { return enum_name(kReductionModeNames, m); }

const std::vector<ReductionMode>& reduction_modes() {
  static const std::vector<ReductionMode> modes = [] {
    std::vector<ReductionMode> v;
    for (const auto& row : kReductionModeNames) v.push_back(row.value);
    return v;
  }();
  return modes;
}

}  // namespace kiln

namespace kiln::graph_internal {
namespace {

void reduction_arity(const Node&, size_t* lo, size_t* hi) { *lo = *hi = 1; }

Status infer_reduction(NodeCtx& c, const ValidateOptions&, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_float_in(c, 0));
  KILN_RETURN_IF_ERROR(check_float_out(c));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  const Dims& x = c.in(0).dims;
  int rank = static_cast<int>(x.size());
  std::vector<int>& axes = c.node.reduction.axes;
  if (axes.empty()) {  // all axes
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int& ax : axes) {
    if (ax < -rank || ax >= rank)
      return c.error("attribute 'axes': axis " + std::to_string(ax) + " is out of range for " + c.in_label(0) +
                     " of rank " + std::to_string(rank));
    if (ax < 0) ax += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return c.error("attribute 'axes': axis " + std::to_string(*std::adjacent_find(axes.begin(), axes.end())) +
                   " is listed twice");
  Dims y = x;
  for (int ax : axes) y[ax] = Dim{1, ""};
  out->push_back(y);
  return Status::ok();
}

std::string reduction_signature_attrs(const Graph&, const Node& n) {
  return " axes=" + ints_text(std::vector<int64_t>(n.reduction.axes.begin(), n.reduction.axes.end()));
}

// One operation per input element.
OpCost reduction_cost(const Graph& g, const Node& n) {
  return element_op_cost(static_cast<double>(g.tensors[static_cast<size_t>(n.inputs[0])].element_count()));
}

}  // namespace

const OpFamily kReductionFamily = {"reduction", reduction_arity, infer_reduction, reduction_signature_attrs,
                                   reduction_cost};

}  // namespace kiln::graph_internal
