// The device reference of FP8 attention (sdpa_fp8): sdpa's device reference on the descaled operands
// (sdpa_math.h sdpa_fp8_factors), o scaled by scale_o, amax_o the largest |o| before it.
#include <cuda_runtime_api.h>

#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/ops/sdpa_math.h"

namespace kiln::validate_internal {
namespace {

// The six scales, read back (each a one-element buffer).
StatusOr<SdpaFp8Factors> device_factors(const std::vector<const double*>& scales, const std::string& where) {
  double s[6];
  for (size_t i = 0; i < 6; ++i)
    if (cudaMemcpy(&s[i], scales[kFp8DescaleQ + i], sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess)
      return internal_error(where + ": reading an FP8 scale back failed");
  return sdpa_fp8_factors(s);
}

// q, k, v (or their magnitudes) times their factors, in buffers of their own.
struct Scaled {
  DeviceBuffer buf[3];
  const double* at(size_t i) const { return buf[i].as<double>(); }
};
StatusOr<Scaled> scaled_qkv(const NodePlan& p, const double* const x[3], const SdpaFp8Factors& f) {
  const SdpaGeom& s = p.sdpa;
  const int64_t counts[3] = {s.b * s.h * s.sq * s.d, s.b * s.hk * s.skv * s.d, s.b * s.hk * s.skv * s.dv};
  const double factor[3] = {f.q, f.k, f.v};
  Scaled out;
  for (size_t i = 0; i < 3; ++i) {
    KILN_ASSIGN_OR_RETURN(out.buf[i], DeviceBuffer::allocate(static_cast<size_t>(counts[i]) * sizeof(double)));
    launch_scaled_copy(x[i], out.buf[i].as<double>(), factor[i], counts[i]);
  }
  return out;
}

int64_t o_count(const NodePlan& p) { return p.sdpa.b * p.sdpa.h * p.sdpa.sq * p.sdpa.dv; }

}  // namespace

Status sdpa_fp8_device_value(const Node& node, const NodePlan& p, const std::vector<const double*>& in, double* y,
                             int64_t count, const std::string& where) {
  KILN_ASSIGN_OR_RETURN(const SdpaFp8Factors f, device_factors(in, where));
  const double* x[3] = {in[0], in[1], in[2]};
  KILN_ASSIGN_OR_RETURN(const Scaled q, scaled_qkv(p, x, f));
  const Node plain = sdpa_fp8_plain(node);
  const NodePlan pp = sdpa_fp8_plain_plan(p);
  std::vector<const double*> plain_in = {q.at(0), q.at(1), q.at(2)};
  if (const SdpaInputs r = sdpa_inputs(node); r.seq_len_q >= 0)  // the lengths, as they are
    plain_in.insert(plain_in.end(), {in[static_cast<size_t>(r.seq_len_q)], in[static_cast<size_t>(r.seq_len_kv)]});
  if (p.output != kFp8AmaxO) {
    KILN_RETURN_IF_ERROR(sdpa_device_value(plain, pp, plain_in, y, count, where));
    if (p.output == kFp8O) launch_scale(y, f.o, count);
    return Status::ok();
  }
  const int64_t n = o_count(p);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer o, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  KILN_RETURN_IF_ERROR(sdpa_device_value(plain, pp, plain_in, o.as<double>(), n, where));
  return launch_largest_abs(o.as<double>(), n, y);
}

Status sdpa_fp8_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                                 const double* y, double* by, int64_t count, bool scale_pass,
                                 const std::string& where) {
  std::vector<const double*> values;
  for (const DeviceOperand& o : op) values.push_back(o.value);
  KILN_ASSIGN_OR_RETURN(const SdpaFp8Factors f, device_factors(values, where));
  const double* x[3] = {op[0].value, op[1].value, op[2].value};
  const double* xm[3] = {op[0].mag, op[1].mag, op[2].mag};
  KILN_ASSIGN_OR_RETURN(const Scaled q, scaled_qkv(p, x, f));
  KILN_ASSIGN_OR_RETURN(const Scaled m, scaled_qkv(p, xm, f));  // a magnitude (or scale) scales as its value
  std::vector<DeviceOperand> pop(3);
  for (size_t i = 0; i < 3; ++i) pop[i] = DeviceOperand{q.at(i), m.at(i), op[i].carries, op[i].count};
  const SdpaInputs roles = sdpa_inputs(node);
  if (roles.seq_len_q >= 0)  // the lengths, as they are
    for (int i : {roles.seq_len_q, roles.seq_len_kv}) pop.push_back(op[static_cast<size_t>(i)]);
  const Node plain = sdpa_fp8_plain(node);
  const NodePlan pp = sdpa_fp8_plain_plan(p);
  if (p.output == kFp8Stats) return sdpa_device_magnitude(plain, pp, pop, y, by, count, scale_pass, where);
  // o's magnitude from the plain sdpa's o (o before scale_o): y / scale_o, or for amax_o computed again.
  const int64_t n = o_count(p);
  KILN_ASSIGN_OR_RETURN(DeviceBuffer o, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  if (p.output == kFp8O) {
    launch_scaled_copy(y, o.as<double>(), 1.0 / f.o, n);
    KILN_RETURN_IF_ERROR(sdpa_device_magnitude(plain, pp, pop, o.as<double>(), by, count, scale_pass, where));
    launch_scale(by, f.o, count);
    return Status::ok();
  }
  std::vector<const double*> plain_in = {q.at(0), q.at(1), q.at(2)};
  for (size_t i = 3; i < pop.size(); ++i) plain_in.push_back(pop[i].value);
  KILN_RETURN_IF_ERROR(sdpa_device_value(plain, pp, plain_in, o.as<double>(), n, where));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer mo, DeviceBuffer::allocate(static_cast<size_t>(n) * sizeof(double)));
  KILN_RETURN_IF_ERROR(sdpa_device_magnitude(plain, pp, pop, o.as<double>(), mo.as<double>(), n, scale_pass, where));
  return launch_largest_abs(mo.as<double>(), n, by);
}

}  // namespace kiln::validate_internal
