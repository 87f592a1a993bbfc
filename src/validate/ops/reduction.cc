// The reduction family's node plan (reduced axes) and host reference.
#include <cmath>
#include <limits>

#include "kiln/validate/host_tensor.h"
#include "validate/ops/reference_ops.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

Status reduction_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p) {
  const auto x = tensor_dims(g, node.inputs[0]), y = tensor_dims(g, node.outputs[0]);
  if (x.size() != y.size())
    return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(y) +
                            " must keep the input's rank " + dims_str(x));
  ReduceGeom& r = p.red;
  r.in_dims = x;
  r.reduced.assign(x.size(), false);
  if (node.reduction.axes.empty()) {
    for (size_t i = 0; i < x.size(); ++i) r.reduced[i] = y[i] == 1 && x[i] != 1;
  } else {
    for (int ax : node.reduction.axes) {
      const int rank = static_cast<int>(x.size());
      const int a = ax < 0 ? ax + rank : ax;
      if (a < 0 || a >= rank)
        return invalid_argument(where + ": axis " + std::to_string(ax) + " out of range for rank " +
                                std::to_string(rank));
      r.reduced[static_cast<size_t>(a)] = true;
    }
  }
  r.reduced_count = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t want = r.reduced[i] ? 1 : x[i];
    if (y[i] != want)
      return invalid_argument(where + ": output " + tensor_label(g, node.outputs[0]) + " " + dims_str(y) +
                              " does not match input " + dims_str(x) + " reduced over the given axes");
    if (r.reduced[i]) r.reduced_count *= x[i];
  }
  p.reduction_length = r.reduced_count;
  return Status::ok();
}

namespace {

Values run_reduction(const ReduceGeom& r, ReductionMode mode, const Values& x) {
  std::vector<int64_t> out_dims = r.in_dims;
  for (size_t i = 0; i < out_dims.size(); ++i)
    if (r.reduced[i]) out_dims[i] = 1;
  std::vector<int64_t> so = row_major_strides(out_dims);
  for (size_t i = 0; i < so.size(); ++i)
    if (r.reduced[i]) so[i] = 0;
  double init = 0.0;
  if (mode == ReductionMode::kMax) init = -std::numeric_limits<double>::infinity();
  if (mode == ReductionMode::kMin) init = std::numeric_limits<double>::infinity();
  Values y(static_cast<size_t>(product(out_dims)), init);
  const std::vector<int64_t> none;
  for_each_broadcast(r.in_dims, so, none, [&](int64_t pos, int64_t oy, int64_t) {
    const double v = x[pos];
    double& acc = y[oy];
    switch (mode) {
      case ReductionMode::kSum: acc += v; break;
      case ReductionMode::kMax: acc = std::fmax(acc, v); break;
      case ReductionMode::kMin: acc = std::fmin(acc, v); break;
      case ReductionMode::kAmax: acc = std::fmax(acc, std::fabs(v)); break;
    }
  });
  return y;
}

}  // namespace

HostNodeResult reduction_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                              const std::vector<Operand>* op, const std::vector<Operand>* sop) {
  HostNodeResult r;
  r.y = run_reduction(p.red, node.reduction.mode, *in[0]);
  if (op) {
    // A sum accumulates (its own error and the operand's); max, min and amax pick one element.
    if (node.reduction.mode == ReductionMode::kSum) {
      const double f = contraction_factor((*op)[0].carries, false);
      r.m = scaled(run_reduction(p.red, ReductionMode::kSum, *(*op)[0].mag), f);
      r.sc = run_reduction(p.red, ReductionMode::kSum, squared(*(*sop)[0].mag));
      r.root_factor = f;
    } else {
      r.m = run_reduction(p.red, ReductionMode::kAmax, *(*op)[0].mag);
      r.sc = run_reduction(p.red, ReductionMode::kAmax, *(*sop)[0].mag);
    }
  }
  return r;
}

}  // namespace kiln::validate_internal
