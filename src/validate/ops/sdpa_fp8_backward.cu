// The device reference of FP8 attention's backward pass (sdpa_fp8_backward): sdpa_backward's device reference on the
// descaled q, k, v, o, do (sdpa_math.h sdpa_fp8_backward_factors), each gradient times its fp8 factor, the stored
// dq, dk, dv times their scales, the amax the largest of each before them, amax_dp the largest |dS|.
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"

namespace kiln::validate_internal {
namespace {

// The twelve scales, read back (each a one-element buffer).
StatusOr<SdpaFp8BackwardFactors> device_factors(const std::vector<const double*>& in, const std::string& where) {
  double s[12];
  for (size_t i = 0; i < 12; ++i)
    if (cudaMemcpy(&s[i], in[kFp8bDescaleQ + i], sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess)
      return internal_error(where + ": reading an FP8 scale back failed");
  return sdpa_fp8_backward_factors(s);
}

// q, k, v, o, do (or their magnitudes) times their descales, in buffers of their own.
struct Descaled {
  DeviceBuffer buf[5];
  const double* at(size_t i) const { return buf[i].as<double>(); }
};
StatusOr<Descaled> descaled(const NodePlan& p, const double* const x[5], const SdpaFp8BackwardFactors& f, bool abs) {
  const SdpaGeom& s = p.sdpa;
  const int64_t qo = s.b * s.h * s.sq;
  const int64_t counts[5] = {qo * s.d, s.b * s.hk * s.skv * s.d, s.b * s.hk * s.skv * s.dv, qo * s.dv, qo * s.dv};
  Descaled out;
  for (size_t i = 0; i < 5; ++i) {
    KILN_ASSIGN_OR_RETURN(out.buf[i], DeviceBuffer::allocate(static_cast<size_t>(counts[i]) * sizeof(double)));
    launch_scaled_copy(x[i], out.buf[i].as<double>(), abs ? std::fabs(f.in[i]) : f.in[i], counts[i]);
  }
  return out;
}

// The element count of the plain pass's output `g` (0 dq, 1 dk, 2 dv).
int64_t grad_count(const NodePlan& p, int g) {
  const SdpaGeom& s = p.sdpa;
  return g == 0 ? s.b * s.h * s.sq * s.d : s.b * s.hk * s.skv * (g == 1 ? s.d : s.dv);
}

// The plain node's inputs among `in` after q, k, v, o, do: the statistics, the lengths.
template <typename T>
std::vector<T> plain_tail(const Node& node, const std::vector<T>& in) {
  std::vector<T> tail = {in[5]};
  if (const SdpaInputs r = sdpa_inputs(node); r.seq_len_q >= 0)
    tail.insert(tail.end(), {in[static_cast<size_t>(r.seq_len_q)], in[static_cast<size_t>(r.seq_len_kv)]});
  return tail;
}

}  // namespace

Status sdpa_fp8_backward_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in,
                                      double* y, int64_t count, const std::string& where) {
  KILN_ASSIGN_OR_RETURN(const SdpaFp8BackwardFactors f, device_factors(in, where));
  const double* x[5] = {in[0], in[1], in[2], in[3], in[4]};
  KILN_ASSIGN_OR_RETURN(const Descaled d, descaled(p, x, f, false));
  std::vector<const double*> plain_in = {d.at(0), d.at(1), d.at(2), d.at(3), d.at(4)};
  for (const double* t : plain_tail(node, in)) plain_in.push_back(t);
  const Node plain = sdpa_fp8_backward_plain(node);
  const NodePlan pp = sdpa_fp8_backward_plain_plan(p);
  if (p.output == kFp8bAmaxDp) {  // cuDNN's dS carries attn_scale before its amax (FE 1.32)
    KILN_RETURN_IF_ERROR(sdpa_backward_device_value(plain, pp, plain_in, y, count, where));
    launch_scale(y, std::fabs(p.sdpa.scale), count);
    return Status::ok();
  }
  const int g = p.output % 3;
  if (p.output <= kFp8bDv) {
    KILN_RETURN_IF_ERROR(sdpa_backward_device_value(plain, pp, plain_in, y, count, where));
    launch_scale(y, f.grad[g] * f.out[g], count);
    return Status::ok();
  }
  const int64_t n = grad_count(p, g);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer grad, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  KILN_RETURN_IF_ERROR(sdpa_backward_device_value(plain, pp, plain_in, grad.as<double>(), n, where));
  launch_scale(grad.as<double>(), f.grad[g], n);
  return launch_largest_abs(grad.as<double>(), n, y);
}

Status sdpa_fp8_backward_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                          const double* y, double* by, int64_t count, bool scale_pass,
                                          const std::string& where) {
  std::vector<const double*> values;
  for (const DeviceOperand& o : op) values.push_back(o.value);
  KILN_ASSIGN_OR_RETURN(const SdpaFp8BackwardFactors f, device_factors(values, where));
  const double* x[5] = {op[0].value, op[1].value, op[2].value, op[3].value, op[4].value};
  const double* xm[5] = {op[0].mag, op[1].mag, op[2].mag, op[3].mag, op[4].mag};
  KILN_ASSIGN_OR_RETURN(const Descaled d, descaled(p, x, f, false));
  KILN_ASSIGN_OR_RETURN(const Descaled m, descaled(p, xm, f, true));  // a magnitude (or scale) scales as its value
  std::vector<DeviceOperand> pop(5);
  for (size_t i = 0; i < 5; ++i) pop[i] = DeviceOperand{d.at(i), m.at(i), op[i].carries, op[i].count};
  for (const DeviceOperand& t : plain_tail(node, op)) pop.push_back(t);
  const Node plain = sdpa_fp8_backward_plain(node);
  const NodePlan pp = sdpa_fp8_backward_plain_plan(p);
  if (p.output == kFp8bAmaxDp) {
    KILN_RETURN_IF_ERROR(sdpa_backward_device_magnitude(plain, pp, pop, y, by, count, scale_pass, where));
    launch_scale(by, std::fabs(p.sdpa.scale), count);
    return Status::ok();
  }
  const int g = p.output % 3;
  const int64_t n = grad_count(p, g);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer grad, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  // The plain pass's gradient (its magnitude pass reads it): y over its factors, or for an amax computed again.
  if (p.output <= kFp8bDv) {
    launch_scaled_copy(y, grad.as<double>(), 1.0 / (f.grad[g] * f.out[g]), n);
    KILN_RETURN_IF_ERROR(
        sdpa_backward_device_magnitude(plain, pp, pop, grad.as<double>(), by, count, scale_pass, where));
    launch_scale(by, std::fabs(f.grad[g] * f.out[g]), count);
    return Status::ok();
  }
  std::vector<const double*> plain_in;
  for (const DeviceOperand& t : pop) plain_in.push_back(t.value);
  KILN_RETURN_IF_ERROR(sdpa_backward_device_value(plain, pp, plain_in, grad.as<double>(), n, where));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer mg, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  KILN_RETURN_IF_ERROR(
      sdpa_backward_device_magnitude(plain, pp, pop, grad.as<double>(), mg.as<double>(), n, scale_pass, where));
  launch_scale(mg.as<double>(), std::fabs(f.grad[g]), n);
  return launch_largest_abs(mg.as<double>(), n, by);
}

}  // namespace kiln::validate_internal
