// The host reference: every node in double precision over packed row-major arrays, by its op family
// (src/validate/ops/<family>.cc), and optionally the magnitude pass of the accumulation bound
// (reference_math.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "kiln/validate/reference.h"
#include "validate/ops/reference_ops.h"
#include "validate/reference_common.h"
#include "validate/reference_math.h"

namespace kiln {

namespace validate_internal {

Values scaled(Values v, double f) {
  if (f != 1.0)
    for (double& x : v) x *= f;
  return v;
}

Values squared(const Values& v) {
  Values s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = v[i] * v[i];
  return s;
}

double largest(const Values& v) {
  double m = 0.0;
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
  return m;
}

}  // namespace validate_internal

namespace {

using namespace validate_internal;

// The scale of a contraction or sum (reference_math.h): f * sqrt(sum of squared terms + y^2).
Values root_with(Values sum_sq, const Values& y, double f) {
  for (size_t i = 0; i < sum_sq.size(); ++i) sum_sq[i] = f * std::sqrt(sum_sq[i] + y[i] * y[i]);
  return sum_sq;
}

StatusOr<ReferenceOutputs> evaluate(const Graph& g, const std::map<int, HostTensor>& inputs,
                                    const HostReferenceOptions& options, bool with_magnitudes) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph prep, prepare_graph(g));
  if (prep.macs > options.max_macs) {
    std::ostringstream os;
    os.precision(3);
    os << "graph '" << g.name << "' needs " << prep.macs << " multiply-accumulates, over the host reference cap of "
       << options.max_macs << "; use the device reference";
    return invalid_argument(os.str());
  }
  KILN_ASSIGN_OR_RETURN(auto values, load_inputs(g, inputs));
  // Magnitudes (M) and scales (S) start as |x| at the graph inputs.
  std::map<int, Values> mags, scales;
  if (with_magnitudes)
    for (const auto& [t, v] : values) {
      Values m(v.size());
      for (size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
      mags.emplace(t, m);
      scales.emplace(t, std::move(m));
    }
  const GraphRoles roles(g);
  for (const NodePlan& p : prep.plans) {
    const Node& node = g.nodes[static_cast<size_t>(p.node)];
    std::vector<const Values*> in;
    std::vector<Operand> op, sop;  // the operands with their magnitudes, and with their scales
    for (int t : node.inputs) {
      auto it = values.find(t);
      if (it == values.end()) return internal_error(node_label(g, p.node) + ": input not computed");
      in.push_back(&it->second);
      if (with_magnitudes) {
        const bool carries = roles.producer(t) >= 0;
        op.push_back(Operand{&it->second, &mags.at(t), carries});
        sop.push_back(Operand{&it->second, &scales.at(t), carries});
      }
    }
    HostNodeResult res =
        reference_family(p.op).host(p, node, in, with_magnitudes ? &op : nullptr, with_magnitudes ? &sop : nullptr);
    Values y = std::move(res.y), m = std::move(res.m), sc = std::move(res.sc);
    const double root_factor = res.root_factor;
    const int out = node.outputs[static_cast<size_t>(p.output)];
    const DataType dt = roles.dtype_of(out);
    for (double& v : y) v = round_to_dtype(v, dt);
    if (with_magnitudes && root_factor > 0) sc = root_with(std::move(sc), y, root_factor);
    values[out] = std::move(y);
    if (with_magnitudes) {
      mags[out] = std::move(m);
      scales[out] = std::move(sc);
    }
  }
  ReferenceOutputs r;
  r.kind = ReferenceKind::kHost;
  KILN_ASSIGN_OR_RETURN(r.values, make_outputs(g, values));
  if (with_magnitudes) {
    KILN_ASSIGN_OR_RETURN(r.magnitudes, make_magnitude_outputs(g, mags));
    KILN_ASSIGN_OR_RETURN(r.scales, make_magnitude_outputs(g, scales));
  }
  return r;
}

}  // namespace

StatusOr<std::vector<HostTensor>> run_host_reference(const Graph& g, const std::map<int, HostTensor>& inputs,
                                                     const HostReferenceOptions& options) {
  return catch_exceptions("graph '" + g.name + "': host reference", [&]() -> StatusOr<std::vector<HostTensor>> {
    KILN_ASSIGN_OR_RETURN(ReferenceOutputs r, evaluate(g, inputs, options, false));
    return std::move(r.values);
  });
}

StatusOr<ReferenceOutputs> run_host_reference_with_magnitudes(const Graph& g, const std::map<int, HostTensor>& inputs,
                                                              const HostReferenceOptions& options) {
  return catch_exceptions("graph '" + g.name + "': host reference", [&] { return evaluate(g, inputs, options, true); });
}

}  // namespace kiln
