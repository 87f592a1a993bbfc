#include "kiln/validate/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>
#include <unordered_set>
#include <atomic>

#include "validate/gate.h"
#include "validate/node_plan.h"

namespace kiln {
namespace {

// Coarseness rank of a dtype's rounding: larger is coarser.
int coarseness(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 0;
    case DataType::kFloat16: return 1;
    case DataType::kBFloat16: return 2;
    case DataType::kFp8E4M3: return 3;
    case DataType::kFp8E5M2: return 4;
    default: return -1;  // integers: handled apart
  }
}

bool is_integer(DataType t) { return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64; }

}  // namespace

Tolerance default_tolerance(DataType dtype, const ToleranceOptions& options) {
  Tolerance t;
  if (is_integer(dtype)) {
    t.atol = dtype == DataType::kInt8 ? 1.0 : 0.0;
    t.rtol = 0.0;
    t.nmse_max = dtype == DataType::kInt8 ? 1e-2 : 0.0;
    t.rel_floor = 1.0;
    return t;
  }
  DataType base = dtype;
  if (coarseness(options.intermediate_dtype) > coarseness(base)) base = options.intermediate_dtype;
  switch (base) {
    case DataType::kFloat32:
      if (options.allow_tf32) t = {1e-2, 5e-3, 2e-6, 1e-3};
      else t = {1e-5, 1e-5, 1e-10, 1e-6};
      break;
    case DataType::kFloat16: t = {1e-2, 1e-2, 1e-5, 1e-3}; break;
    case DataType::kBFloat16: t = {2e-2, 2e-2, 1e-4, 1e-2}; break;
    case DataType::kFp8E4M3: t = {1.25e-1, 1.25e-1, 2e-2, 1e-1}; break;
    case DataType::kFp8E5M2: t = {2.5e-1, 2.5e-1, 6e-2, 1e-1}; break;
    default: break;
  }
  const double k_scale = std::max(1.0, static_cast<double>(options.reduction_length) / 64.0);
  if (base == DataType::kFloat32 && !options.allow_tf32) {
    // fp32's own rounding is negligible: fp32 accumulation error dominates. With the accumulation bound
    // the caller judges it per element from the magnitudes; the legacy rule (no magnitudes) grows atol
    // and nmse like K.
    if (!options.accumulation_bound) {
      t.atol *= k_scale;
      t.nmse_max *= k_scale;
    }
  } else {
    // Rounding of inputs (TF32) and outputs dominates: a sum of K independent errors grows like sqrt(K).
    t.atol *= std::sqrt(k_scale);
  }
  return t;
}

double accumulation_lambda(int64_t reduction_length) {
  const double k = static_cast<double>(std::max<int64_t>(1, reduction_length));
  const double u = 0x1p-24;
  return std::sqrt(2.0 * std::log(2.0 * k / kAccumulationFailureProbability)) / (1.0 - u);
}

namespace {

// Unit roundoff of a floating-point dtype's storage (0 for fp32 and integers: no coarser than the
// kernel's own fp32 arithmetic, which the per-node term counts).
double stored_roundoff(DataType t) {
  switch (t) {
    case DataType::kFloat16: return 0x1p-11;
    case DataType::kBFloat16: return 0x1p-8;
    case DataType::kFp8E4M3: return 0x1p-4;
    case DataType::kFp8E5M2: return 0x1p-3;
    default: return 0.0;
  }
}

bool is_fp8(DataType t) { return t == DataType::kFp8E4M3 || t == DataType::kFp8E5M2; }

}  // namespace

AccumulationPath accumulation_into(const Graph& graph, int tensor, std::optional<DataType> stored) {
  return accumulation_into(graph, GraphRoles(graph), tensor, stored);
}

AccumulationPath accumulation_into(const Graph& graph, const GraphRoles& roles, int tensor,
                                   std::optional<DataType> stored) {
  using namespace validate_internal;
  AccumulationPath path;
  std::unordered_set<int> seen;  // only what the path visits: asked once per output
  std::vector<int> stack{tensor};
  const double stored_u = stored ? stored_roundoff(*stored) : 0.0;
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size() || !seen.insert(t).second) continue;
    const int n = roles.producer(t);
    if (n < 0) continue;
    const Node& node = graph.nodes[static_cast<size_t>(n)];
    ++path.nodes;
    if (node.op == OpKind::kPointwise) {
      const double a = function_approximation(node.pointwise.mode);
      path.approx_var += a * a;
      path.approx_dir += a;
    }
    if (t != tensor) {
      const double u = std::max(stored_roundoff(roles.dtype_of(t)), stored_u);
      path.rounding_var += u * u / 3.0;
    }
    auto plan = plan_node(graph, n);
    if (plan.is_ok()) path.reduction_length = std::max(path.reduction_length, plan->reduction_length);
    const bool gemm = node.op == OpKind::kConvFprop || node.op == OpKind::kConvDgrad || node.op == OpKind::kConvWgrad ||
                      node.op == OpKind::kMatmul;
    if (gemm && node.compute_dtype.value_or(graph.compute_dtype) == DataType::kFloat16)
      path.unit_roundoff = std::max(path.unit_roundoff, 0x1p-11);
    if (gemm) {
      bool fp8 = false, fp32 = true;
      for (int in : node.inputs) {
        const DataType d = roles.dtype_of(in);
        fp8 = fp8 || is_fp8(d);
        fp32 = fp32 && d == DataType::kFloat32;
      }
      if (fp8) path.unit_roundoff = std::max(path.unit_roundoff, 0x1p-14);
      if (fp32) ++path.fp32_gemms;
    }
    if (is_attention(node.op) && node.inputs.size() > 2) {
      // cuDNN rounds P to v's dtype before P.V (sdpa_fp8: to fp8 at scale_s); a backward pass rounds P (for dV)
      // and dS (for dQ and dK) alike (sdpa_fp8_backward: to fp8 at scale_s and scale_dp).
      const double u = stored_roundoff(roles.dtype_of(node.inputs[2]));
      path.rounding_var += (is_attention_backward(node.op) ? 2.0 : 1.0) * u * u / 3.0;
    }
    for (int in : node.inputs) stack.push_back(in);
  }
  return path;
}

int64_t reduction_length_into(const Graph& graph, int tensor) {
  return accumulation_into(graph, tensor).reduction_length;
}

ErrorModel expected_error_model(const AccumulationPath& path, bool tf32) {
  ErrorModel m;
  const double k = static_cast<double>(std::max<int64_t>(1, path.reduction_length));
  const double blocks = path.reduction_length > 1 ? std::ceil(k / static_cast<double>(kGateTruncationBlock)) : 0.0;
  const double u = path.unit_roundoff;
  const double acc = path.reduction_length > 1 ? u * u * (k / 3.0 + blocks * blocks) / 3.0 : 0.0;
  const double node = 4.0 * path.nodes * 0x1p-24;
  double var = acc + path.rounding_var + node * node + path.approx_var;
  if (tf32) var += path.fp32_gemms * 2.0 * 0x1p-22 / 3.0;
  m.var_coeff = var;
  // Truncation toward zero, one unit roundoff at most per block of the partial sum after it, whose mean
  // over a random order is (b / B) y: at most u (B / 2) |y| <= u (B / 2) S in all, signed as y.
  m.dir_coeff = u * blocks / 2.0;
  m.dir_sym_coeff = path.approx_dir;
  return m;
}

double function_approximation(PointwiseMode mode) {
  switch (mode) {
    case PointwiseMode::kTanh:
    case PointwiseMode::kSigmoid:
    case PointwiseMode::kSilu:
    case PointwiseMode::kExp:
    case PointwiseMode::kGeluTanh: return 0x1p-16;
    case PointwiseMode::kGeluErf: return 0x1p-12;
    default: return 0.0;
  }
}

std::string CheckReport::summary() const {
  std::string s;
  for (const auto& o : outputs) s += (s.empty() ? "" : "\n") + o.summary;
  return s;
}

namespace validate_internal {

void dtype_grid(DataType dtype, int* bits, int* emin) {
  switch (dtype) {
    case DataType::kFloat32:
      *bits = 23;
      *emin = -126;
      return;
    case DataType::kFloat16:
      *bits = 10;
      *emin = -14;
      return;
    case DataType::kBFloat16:
      *bits = 7;
      *emin = -126;
      return;
    case DataType::kFp8E4M3:
      *bits = 3;
      *emin = -6;
      return;
    case DataType::kFp8E5M2:
      *bits = 2;
      *emin = -14;
      return;
    default:
      *bits = -1;
      *emin = 0;
      return;
  }
}

namespace {

GateParams params_for(const Tolerance& tol, DataType dtype, bool with_magnitude) {
  GateParams p;
  p.atol = tol.atol;
  p.rtol = tol.rtol;
  p.rel_floor = tol.rel_floor;
  p.acc_coeff = tol.acc_coeff;
  p.with_magnitude = with_magnitude ? 1 : 0;
  p.statistical = tol.statistical ? 1 : 0;
  p.var_coeff = tol.var_coeff;
  p.dir_coeff = tol.dir_coeff;
  p.dir_sym_coeff = tol.dir_sym_coeff;
  p.elem_sigmas = kGateElementSigmas;
  p.elem_rtol = tol.elem_rtol;
  dtype_grid(dtype, &p.ulp_bits, &p.ulp_emin);
  return p;
}

// Reads element `off` of a tensor's storage.
struct Strided {
  const double* data = nullptr;
  const int64_t* strides = nullptr;
};

// One pass over logical indices [begin, end) of `out` against `ref` (and m, s), in ascending order.
void compare_range(const GateParams& p, const HostTensor& out, const HostTensor& ref, const HostTensor* mag,
                   const HostTensor* scale, int64_t begin, int64_t end, GateSums& g, std::vector<GateOffender>& off) {
  const size_t r = out.dims.size();
  std::vector<int64_t> idx(r, 0);
  int64_t rem = begin;
  for (size_t k = r; k-- > 0;) {
    idx[k] = rem % out.dims[k];
    rem /= out.dims[k];
  }
  const HostTensor* ts[4] = {&out, &ref, mag, scale};
  int64_t o[4] = {0, 0, 0, 0};
  for (int t = 0; t < 4; ++t)
    if (ts[t])
      for (size_t k = 0; k < r; ++k) o[t] += idx[k] * ts[t]->strides[k];
  GateOffender found[kMaxOffenders];
  int n_found = 0;
  for (int64_t pos = begin; pos < end; ++pos) {
    const double m = mag ? mag->storage[static_cast<size_t>(o[2])] : 0.0;
    const double s = scale ? scale->storage[static_cast<size_t>(o[3])] : 0.0;
    gate_element(p, out.storage[static_cast<size_t>(o[0])], ref.storage[static_cast<size_t>(o[1])], m, s, pos, g, found,
                 &n_found);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < out.dims[k]) {
        for (int t = 0; t < 4; ++t)
          if (ts[t]) o[t] += ts[t]->strides[k];
        break;
      }
      for (int t = 0; t < 4; ++t)
        if (ts[t]) o[t] -= (out.dims[k] - 1) * ts[t]->strides[k];
      idx[k] = 0;
    }
  }
  off.assign(found, found + n_found);
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

}  // namespace

ErrorMeasures measures_from_sums(const GateSums& g, const std::vector<GateOffender>& offenders, const Tolerance& tol,
                                 bool with_magnitude) {
  ErrorMeasures e;
  e.count = g.count;
  e.max_abs = g.max_abs;
  e.max_rel = g.max_rel;
  e.nan_count = g.nan_count;
  e.mismatch_count = g.mismatch_count;
  e.worst_index = g.worst_index;
  e.nmse = g.sum_sq_ref > 0 ? g.sum_sq_err / g.sum_sq_ref : g.sum_sq_err;
  if (with_magnitude)
    e.nmse_allowance = tol.acc_nmse_coeff * (g.sum_sq_ref > 0 ? g.sum_sq_mag / g.sum_sq_ref : g.sum_sq_mag);
  e.sum_sq_err = g.sum_sq_err;
  if (tol.statistical) {
    e.statistical = true;
    e.expected_sq_err = g.sum_expected;
    // The grid step the quanta allowance counts: twice the root mean square spacing, at most the largest.
    const double step = g.finite_count > 0 ? std::min(g.max_ulp, 2.0 * std::sqrt(g.sum_ulp_sq / g.finite_count)) : 0.0;
    e.size_limit = kGateSizeFactor * g.sum_expected + kGateQuanta * step * step;
    // Truncating accumulation only shrinks a result: toward zero the directed parts are allowed, away
    // from it only the function approximations' (either sign).
    const double random = kGateBiasSigmas * std::sqrt(g.sum_expected) + kGateQuanta * step;
    const double toward = kGateBiasFactor * (g.sum_directed + g.sum_directed_sym) + random;
    const double away = kGateBiasFactor * g.sum_directed_sym + random;
    if (g.sum_abs_ref > 0) {
      e.mean_signed_rel = g.sum_signed / g.sum_abs_ref;
      e.bias_limit = toward / g.sum_abs_ref;
      e.bias_limit_away = away / g.sum_abs_ref;
    }
    e.element_ratio = g.elem_worst_ratio;
    e.element_worst_index = g.elem_worst_index;
    e.element_over = g.elem_over_count;
  }
  for (const GateOffender& o : offenders) e.offenders.push_back({o.index, o.out, o.ref, o.allowed});
  return e;
}

StatusOr<std::vector<OutputGate>> plan_output_gates(const Graph& graph, bool magnitudes, bool scales,
                                                    const CheckOptions& options) {
  std::vector<OutputGate> gates;
  // One index of producers for every question below: Graph::producer() scans the nodes per call, and the
  // walk up a pointwise chain asks once per node (quadratic on a long chain).
  const GraphRoles roles(graph);
  const bool multi_node = graph.nodes.size() > 1;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const int t = graph.outputs[i];
    if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size())
      return invalid_argument("check_outputs: output index " + std::to_string(t) + " out of range");
    OutputGate gate;
    OutputCheck& c = gate.check;
    c.name = graph.tensors[static_cast<size_t>(t)].name;
    c.tensor = t;
    c.dtype = roles.dtype_of(t);
    const AccumulationPath path = accumulation_into(graph, roles, t, options.stored_intermediates);
    gate.reduction_length = path.reduction_length;
    ToleranceOptions to;
    to.reduction_length = path.reduction_length;
    to.allow_tf32 = options.allow_tf32;
    to.accumulation_bound = magnitudes;
    if (multi_node) to.intermediate_dtype = graph.intermediate_dtype;
    c.tolerance = default_tolerance(c.dtype, to);
    const bool with_bound = magnitudes && !is_integer(c.dtype);
    gate.with_bound = with_bound;
    if (with_bound) {
      // Higham & Mary's probabilistic bound on the accumulations, plus one fp32 rounding per node on the
      // path (the magnitude rules carry both; see reference_math.h and docs/numerics.md).
      const double k = static_cast<double>(path.reduction_length);
      const double rms = std::sqrt(k) * path.unit_roundoff + path.nodes * 0x1p-24;
      c.tolerance.acc_coeff =
          accumulation_lambda(path.reduction_length) * std::sqrt(k) * path.unit_roundoff + path.nodes * 0x1p-24;
      c.tolerance.acc_nmse_coeff = 4.0 * rms * rms;
      if (scales) {
        const ErrorModel model = expected_error_model(path, options.allow_tf32);
        c.tolerance.statistical = true;
        c.tolerance.var_coeff = model.var_coeff;
        c.tolerance.dir_coeff = model.dir_coeff;
        c.tolerance.dir_sym_coeff = model.dir_sym_coeff;
      }
      // The old nmse limit allows for the same function approximations (an error of a S_i, S_i <= 2 |y_i|
      // for these functions' typical arguments, in mean square).
      c.tolerance.nmse_max += 4.0 * path.approx_var;
    }
    // A reduction fused behind a GEMM or convolution (the FP8 recipe's AMAX) reads the accumulator before
    // it is rounded to the stored dtype of its input, while the reference reduces the rounded values: the
    // two may differ by one rounding of the input dtype, so rtol is at least that dtype's.
    // The same holds for a pointwise chain after such a reduction (the recipe's 448 / amax): a quotient or
    // product carries the reduction's relative difference unchanged, so the nearest reduction up a chain
    // of pointwise nodes decides.
    int p = roles.producer(t);
    while (p >= 0 && graph.nodes[static_cast<size_t>(p)].op == OpKind::kPointwise) {
      int next = -1;
      for (int in : graph.nodes[static_cast<size_t>(p)].inputs)
        if (roles.producer(in) >= 0) {
          next = roles.producer(in);
          break;
        }
      p = next;
    }
    if (p >= 0 && graph.nodes[static_cast<size_t>(p)].op == OpKind::kReduction) {
      const int in = graph.nodes[static_cast<size_t>(p)].inputs[0];
      const double roundoff = stored_roundoff(roles.dtype_of(in));
      c.tolerance.rtol = std::max(c.tolerance.rtol, 2 * roundoff);
      c.tolerance.nmse_max = std::max(c.tolerance.nmse_max, 4 * roundoff * roundoff);
      // With magnitudes the same holds per summed element: each term may differ by a rounding of its stored
      // dtype, at most u |x_j| <= u M_x_j, and sum_j M_x_j <= M_out (max M_x_j for max/min/amax). rtol on
      // the result alone misses a sum that cancels.
      if (with_bound && roles.producer(in) >= 0) c.tolerance.acc_coeff += 2 * roundoff;
      if (with_bound && roles.producer(in) >= 0) c.tolerance.elem_rtol = 2 * roundoff;
    }
    // sdpa_fp8's amax_o (fp32) is the largest |o| of an o whose every element carries P's fp8 rounding inside
    // cuDNN: |d o_e| <= u sum_j p_j |v_j| <= u M_e (u the fp8 unit roundoff), so the amax may differ by u M_amax,
    // as a reduction over stored fp8 values would (the rule above): its fp32 dtype's tolerance would refuse it.
    const int w = roles.producer(t);
    const Node* writer = w >= 0 ? &graph.nodes[static_cast<size_t>(w)] : nullptr;
    // sdpa_fp8_backward's amax (fp32) likewise: each of dq, dk, dv sums terms of dS or P rounded to fp8, and dS may
    // be read from P rounded so too.
    const bool fp8_amax =
        writer &&
        ((writer->op == OpKind::kSdpaFp8 && writer->outputs.size() > kFp8AmaxO && writer->outputs[kFp8AmaxO] == t) ||
         (writer->op == OpKind::kSdpaFp8Backward && writer->outputs.size() > kFp8bAmaxDp &&
          std::find(writer->outputs.begin() + kFp8bAmaxDq, writer->outputs.end(), t) != writer->outputs.end()));
    if (fp8_amax) {
      const double roundoff = stored_roundoff(roles.dtype_of(writer->inputs[2]));
      c.tolerance.rtol = std::max(c.tolerance.rtol, 2 * roundoff);
      c.tolerance.nmse_max = std::max(c.tolerance.nmse_max, 4 * roundoff * roundoff);
      if (with_bound) {
        c.tolerance.acc_coeff += 2 * roundoff;
        c.tolerance.elem_rtol = std::max(c.tolerance.elem_rtol, 2 * roundoff);
      }
    }
    c.tolerance.atol *= options.tolerance_scale;
    c.tolerance.rtol *= options.tolerance_scale;
    c.tolerance.acc_coeff *= options.tolerance_scale;
    c.tolerance.var_coeff *= options.tolerance_scale * options.tolerance_scale;
    c.tolerance.dir_coeff *= options.tolerance_scale;
    c.tolerance.dir_sym_coeff *= options.tolerance_scale;
    c.tolerance.elem_rtol *= options.tolerance_scale;
    gate.params = params_for(c.tolerance, c.dtype, with_bound);
    gates.push_back(std::move(gate));
  }
  return gates;
}

void finish_output(OutputGate& gate, ErrorMeasures error, bool tf32, CheckReport& report) {
  OutputCheck& c = gate.check;
  c.error = std::move(error);
  c.verdict = judge(c.error, c.tolerance);
  const ErrorMeasures& e = c.error;
  c.summary = c.name + ": " + disposition_name(c.verdict) + " max_abs=" + sci(e.max_abs) +
              " max_rel=" + sci(e.max_rel) + " nmse=" + sci(e.nmse);
  if (e.nan_count > 0) c.summary += " nonfinite=" + std::to_string(e.nan_count);
  if (e.mismatch_count > 0)
    c.summary += " mismatches=" + std::to_string(e.mismatch_count) + "/" + std::to_string(e.count) +
                 " (worst at index " + std::to_string(e.worst_index) + ")";
  c.summary += std::string(" (") + dtype_name(c.dtype) + " tol atol=" + sci(c.tolerance.atol) +
               " rtol=" + sci(c.tolerance.rtol) + " nmse<=" + sci(c.tolerance.nmse_max + e.nmse_allowance) +
               " K=" + std::to_string(gate.reduction_length) + (tf32 ? " tf32" : "");
  if (gate.with_bound) c.summary += " acc=" + sci(c.tolerance.acc_coeff) + "*M";
  c.summary += ")";
  if (e.statistical) {
    // The error's size against the rounding expected, and the mean signed relative error (bias).
    const double ratio = e.expected_sq_err > 0 ? e.sum_sq_err / e.expected_sq_err : (e.sum_sq_err > 0 ? INFINITY : 0.0);
    const double limit = e.expected_sq_err > 0 ? e.size_limit / e.expected_sq_err : INFINITY;
    c.summary += " err2/expected=" + fixed2(ratio) + (e.sum_sq_err <= e.size_limit ? "" : " OVER") +
                 "(<=" + fixed2(limit) + ") bias=" + sci(e.mean_signed_rel) + (bias_within(e) ? "" : " OVER") + "(" +
                 sci(-e.bias_limit) + ".." + sci(e.bias_limit_away) + ") elem=" + fixed2(e.element_ratio) +
                 (e.element_ratio <= 1.0 ? "" : " OVER") + "(<=1";
    if (e.element_over > 0)
      c.summary += ", " + std::to_string(e.element_over) + " over, worst at " + std::to_string(e.element_worst_index);
    c.summary += ")";
  }
  if (!e.offenders.empty()) {
    c.summary += " first offenders:";
    for (size_t i = 0; i < e.offenders.size() && i < 3; ++i) {
      const auto& o = e.offenders[i];
      c.summary +=
          " [" + std::to_string(o.index) + "] out=" + sci(o.out) + " ref=" + sci(o.ref) + " band=" + sci(o.allowed);
    }
  }
  if (c.verdict != Disposition::kPassed) report.verdict = c.verdict;
  report.outputs.push_back(c);
}

}  // namespace validate_internal

StatusOr<ErrorMeasures> measure_error(const HostTensor& out, const HostTensor& ref, const Tolerance& tol,
                                      const HostTensor* magnitude, const HostTensor* scale) {
  using namespace validate_internal;
  if (out.dims != ref.dims)
    return invalid_argument("measure_error: output " + out.describe() + " and reference " + ref.describe() +
                            " have different dims");
  for (const HostTensor* t : {&out, &ref, magnitude, scale}) {
    if (!t) continue;
    if (t->dims != ref.dims)
      return invalid_argument("measure_error: " + t->describe() + " and reference " + ref.describe() +
                              " have different dims");
    if (t->strides.size() != t->dims.size() || static_cast<int64_t>(t->storage.size()) < t->storage_span())
      return invalid_argument("measure_error: " + t->describe() + ": storage does not cover its strides");
  }
  if (tol.statistical && !scale)
    return invalid_argument("measure_error: a statistical tolerance needs the scale tensor");
  const GateParams p = params_for(tol, out.dtype, magnitude != nullptr);
  const int64_t n = out.element_count();
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
  std::vector<GateSums> sums(static_cast<size_t>(chunks));
  std::vector<std::vector<GateOffender>> offs(static_cast<size_t>(chunks));
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c = next++; c < chunks; c = next++)
      compare_range(p, out, ref, magnitude, tol.statistical ? scale : nullptr, c * kChunk,
                    std::min(n, (c + 1) * kChunk), sums[static_cast<size_t>(c)], offs[static_cast<size_t>(c)]);
  };
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  GateSums total;
  std::vector<GateOffender> offenders;
  for (int64_t c = 0; c < chunks; ++c) {
    gate_merge(total, sums[static_cast<size_t>(c)]);
    for (const GateOffender& o : offs[static_cast<size_t>(c)])
      if (offenders.size() < static_cast<size_t>(kMaxOffenders)) offenders.push_back(o);
  }
  return measures_from_sums(total, offenders, tol, magnitude != nullptr);
}

bool bias_within(const ErrorMeasures& e) {
  return e.mean_signed_rel < 0 ? -e.mean_signed_rel <= e.bias_limit : e.mean_signed_rel <= e.bias_limit_away;
}

Disposition judge(const ErrorMeasures& e, const Tolerance& tol) {
  if (e.nan_count > 0 || e.mismatch_count > 0 || !(e.nmse <= tol.nmse_max + e.nmse_allowance))
    return Disposition::kIncorrect;
  if (e.statistical && (!(e.sum_sq_err <= e.size_limit) || !bias_within(e) || !(e.element_ratio <= 1.0)))
    return Disposition::kIncorrect;
  return Disposition::kPassed;
}

namespace {

StatusOr<CheckReport> check_impl(const Graph& graph, const std::vector<HostTensor>& outputs,
                                 const std::vector<HostTensor>& references, const std::vector<HostTensor>* magnitudes,
                                 const std::vector<HostTensor>* scales, const CheckOptions& options) {
  using namespace validate_internal;
  if (outputs.size() != graph.outputs.size() || references.size() != graph.outputs.size())
    return invalid_argument("check_outputs: graph '" + graph.name + "' has " + std::to_string(graph.outputs.size()) +
                            " outputs, got " + std::to_string(outputs.size()) + " results and " +
                            std::to_string(references.size()) + " references");
  if (magnitudes && magnitudes->size() != graph.outputs.size())
    return invalid_argument("check_outputs: graph '" + graph.name + "' has " + std::to_string(graph.outputs.size()) +
                            " outputs, got " + std::to_string(magnitudes->size()) + " magnitudes");
  if (scales && scales->size() != graph.outputs.size())
    return invalid_argument("check_outputs: graph '" + graph.name + "' has " + std::to_string(graph.outputs.size()) +
                            " outputs, got " + std::to_string(scales->size()) + " scales");
  KILN_ASSIGN_OR_RETURN(std::vector<OutputGate> gates,
                        plan_output_gates(graph, magnitudes != nullptr, scales != nullptr, options));
  CheckReport report;
  report.verdict = Disposition::kPassed;
  for (size_t i = 0; i < gates.size(); ++i) {
    OutputGate& gate = gates[i];
    auto err =
        measure_error(outputs[i], references[i], gate.check.tolerance, gate.with_bound ? &(*magnitudes)[i] : nullptr,
                      gate.check.tolerance.statistical ? &(*scales)[i] : nullptr);
    if (!err.is_ok()) return err.status().with_context("output '" + gate.check.name + "'");
    finish_output(gate, std::move(err).value(), options.allow_tf32, report);
  }
  return report;
}

}  // namespace

StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const ReferenceOutputs& reference, const CheckOptions& options) {
  // A reference without its magnitude pass falls back to the legacy tolerances; one without scales has no
  // expected-error model.
  const bool mags = !reference.magnitudes.empty();
  return catch_exceptions("graph '" + graph.name + "': checking outputs", [&] {
    return check_impl(graph, outputs, reference.values, mags ? &reference.magnitudes : nullptr,
                      mags && !reference.scales.empty() ? &reference.scales : nullptr, options);
  });
}

StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::vector<HostTensor>& references, const CheckOptions& options) {
  return catch_exceptions("graph '" + graph.name + "': checking outputs",
                          [&] { return check_impl(graph, outputs, references, nullptr, nullptr, options); });
}

}  // namespace kiln
