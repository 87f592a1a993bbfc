// Internal to the validate layer: each op family's references, reached through one table
// (reference_family(), src/validate/ops/reference_families.cc): src/validate/ops/<family>.cc resolves the
// node's geometry (its NodePlan) and holds the host reference, <family>.cu the device reference. The
// scalar math the two share is in <family>_math.h (pointwise, norm, sdpa) and validate/reference_math.h. Adding an op or a pointwise mode:
// docs/contributing.md "Adding an op or a pointwise mode".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "validate/node_plan.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

using Values = std::vector<double>;

// One operand of a node in the host reference's magnitude pass.
struct Operand {
  const Values* value = nullptr;
  const Values* mag = nullptr;  // the magnitude, or the scale in the scale pass
  bool carries = false;         // written by a node (carries accumulation error)
};

// One node in the host reference: its value y, before rounding to the stored dtype; with the magnitude
// pass its magnitude m and scale sc (root_factor > 0: sc holds a sum of squares whose scale is
// root_factor * sqrt(sc + y^2) once y is rounded).
struct HostNodeResult {
  Values y, m, sc;
  double root_factor = 0;
};

// One operand of a node in the device reference's magnitude pass.
struct DeviceOperand {
  const double* value = nullptr;
  const double* mag = nullptr;  // the magnitude, or the scale in the scale pass
  bool carries = false;         // written by a node (carries accumulation error)
  int64_t count = 0;            // elements
};

// The node's value into y (y_count elements, device memory), before rounding; kernels launched on the
// default stream, not waited for. `where` names the node in errors.
using DeviceValueFn = Status (*)(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                                 int64_t y_count, const std::string& where);

struct ReferenceFamily {
  // Resolves and checks the node's geometry into p (plan_node has checked its arity, tensor indices, dims
  // and strides); errors start with `where`.
  Status (*plan)(const Graph& g, const Node& node, const std::string& where, NodePlan& p);
  // The host reference: `in` the inputs' values (packed row-major); `op` and `sop` the inputs with their
  // magnitudes and scales, null without the magnitude pass.
  HostNodeResult (*host)(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,
                         const std::vector<Operand>* op, const std::vector<Operand>* sop);
  DeviceValueFn device_value;
  // The device magnitude pass (reference_math.h, the host's rules) into by, or with scale_pass the scale;
  // y is the node's rounded value.
  Status (*device_magnitude)(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t y_count, bool scale_pass, const std::string& where);
};

// The family of an op kind (the one table from OpKind to the references).
const ReferenceFamily& reference_family(OpKind kind);

// Each family's entries (src/validate/ops/<family>.cc and .cu).
#define KILN_REFERENCE_FAMILY(F)                                                                                \
  Status F##_plan(const Graph& g, const Node& node, const std::string& where, NodePlan& p);                     \
  HostNodeResult F##_host(const NodePlan& p, const Node& node, const std::vector<const Values*>& in,            \
                          const std::vector<Operand>* op, const std::vector<Operand>* sop);                     \
  Status F##_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y, \
                          int64_t y_count, const std::string& where);                                           \
  Status F##_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,        \
                              const double* y, double* by, int64_t y_count, bool scale_pass,                    \
                              const std::string& where);
KILN_REFERENCE_FAMILY(conv)
KILN_REFERENCE_FAMILY(matmul)
KILN_REFERENCE_FAMILY(pointwise)
KILN_REFERENCE_FAMILY(reduction)
KILN_REFERENCE_FAMILY(norm)
KILN_REFERENCE_FAMILY(sdpa)
KILN_REFERENCE_FAMILY(sdpa_backward)      // the sdpa family's sdpa_backward nodes: sdpa_host and the device entries
                                          // hand them on; its plan is sdpa_plan's
KILN_REFERENCE_FAMILY(sdpa_fp8)           // the sdpa family's sdpa_fp8 nodes, likewise (sdpa_fp8.cc, sdpa_fp8.cu)
KILN_REFERENCE_FAMILY(sdpa_fp8_backward)  // its sdpa_fp8_backward nodes (sdpa_fp8_backward.cc, .cu)
#undef KILN_REFERENCE_FAMILY
// An sdpa_backward plan's output past dq, dk, dv that the references compute for sdpa_fp8_backward's amax_dp: the
// largest |dS| over every pair (b, h, i, j) a query attends to, [1] (its magnitude: the largest bound of one).
constexpr int kSdpaBackwardDsAmax = 3;
// The plain sdpa_backward an sdpa_fp8_backward node computes on its descaled q, k, v, o, do (sdpa_fp8_backward.cc;
// sdpa_math.h sdpa_fp8_backward_factors), and the plan of that node for the output `p` evaluates (dq for dq and
// amax_dq, dk for dk and amax_dk, dv for dv and amax_dv, kSdpaBackwardDsAmax for amax_dp).
Node sdpa_fp8_backward_plain(const Node& node);
NodePlan sdpa_fp8_backward_plain_plan(const NodePlan& p);
// The plain sdpa an sdpa_fp8 node computes on its scaled q, k, v (sdpa_fp8.cc; sdpa_math.h sdpa_fp8_factors), and
// the plan of that node for the output `p` evaluates (o for o and amax_o, else the statistics).
Node sdpa_fp8_plain(const Node& node);
NodePlan sdpa_fp8_plain_plan(const NodePlan& p);

// Shared by the host references (src/validate/host_reference.cc).
Values scaled(Values v, double f);  // v * f
Values squared(const Values& v);    // v^2, elementwise
double largest(const Values& v);    // the largest element of a non-negative v (magnitudes, |x|), NaN where any is

// The host value and magnitude pass of a contraction (conv, matmul): `run(a, b)` contracts two packed
// operands; the magnitude is the contraction of the magnitudes times contraction_factor, the scale the
// root of the contraction of the squared scales plus y^2 (reference_math.h).
template <typename Run>
HostNodeResult contraction_host(Run&& run, const std::vector<const Values*>& in, const std::vector<Operand>* op,
                                const std::vector<Operand>* sop) {
  HostNodeResult r;
  r.y = run(*in[0], *in[1]);
  if (op) {
    const double f = contraction_factor((*op)[0].carries, (*op)[1].carries);
    r.m = scaled(run(*(*op)[0].mag, *(*op)[1].mag), f);
    r.sc = run(squared(*(*sop)[0].mag), squared(*(*sop)[1].mag));
    r.root_factor = f;
  }
  return r;
}

// Calls f(position, a_offset, b_offset) over `dims` in row-major order, with a and b read through
// broadcast strides (b may be empty).
template <typename F>
void for_each_broadcast(const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb, F&& f) {
  const int64_t total = product(dims);
  const size_t r = dims.size();
  std::vector<int64_t> idx(r, 0);
  int64_t oa = 0, ob = 0;
  const bool has_b = !sb.empty();
  for (int64_t pos = 0; pos < total; ++pos) {
    f(pos, oa, ob);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < dims[k]) {
        oa += sa[k];
        if (has_b) ob += sb[k];
        break;
      }
      oa -= (dims[k] - 1) * sa[k];
      if (has_b) ob -= (dims[k] - 1) * sb[k];
      idx[k] = 0;
    }
  }
}

}  // namespace kiln::validate_internal
