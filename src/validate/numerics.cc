#include "kiln/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPassed: return "Passed";
    case Verdict::kIncorrect: return "Incorrect";
    case Verdict::kNotSupported: return "NotSupported";
    case Verdict::kFailed: return "Failed";
    case Verdict::kNotVerified: return "NotVerified";
  }
  return "?";
}

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

StatusOr<ErrorMeasures> measure_error(const HostTensor& out, const HostTensor& ref, const Tolerance& tol,
                                      const HostTensor* magnitude) {
  if (out.dims != ref.dims)
    return invalid_argument("measure_error: output " + out.describe() + " and reference " + ref.describe() +
                            " have different dims");
  if (magnitude && magnitude->dims != ref.dims)
    return invalid_argument("measure_error: magnitude " + magnitude->describe() + " and reference " + ref.describe() +
                            " have different dims");
  const std::vector<double> a = out.values(), r = ref.values();
  const std::vector<double> m = magnitude ? magnitude->values() : std::vector<double>{};
  double sum_sq_mag = 0.0;
  ErrorMeasures e;
  e.count = static_cast<int64_t>(a.size());
  double sum_sq_err = 0.0, sum_sq_ref = 0.0, worst = -1.0;
  const double floor = tol.rel_floor > 0 ? tol.rel_floor : 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = r[i];
    if (!std::isfinite(y)) {
      // Non-finite reference: only the same value matches (NaN matches NaN).
      const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
      if (!same) {
        ++e.mismatch_count;
        if (worst < std::numeric_limits<double>::infinity()) {
          worst = std::numeric_limits<double>::infinity();
          e.worst_index = static_cast<int64_t>(i);
        }
      }
      continue;
    }
    if (!std::isfinite(x)) {
      ++e.nan_count;
      ++e.mismatch_count;
      worst = std::numeric_limits<double>::infinity();
      e.worst_index = static_cast<int64_t>(i);
      continue;
    }
    const double diff = std::fabs(x - y);
    double allowed = tol.atol + tol.rtol * std::fabs(y);
    if (magnitude) {
      allowed += tol.acc_coeff * m[i];
      sum_sq_mag += m[i] * m[i];
    }
    e.max_abs = std::max(e.max_abs, diff);
    e.max_rel = std::max(e.max_rel, diff / std::max(std::fabs(y), floor));
    sum_sq_err += diff * diff;
    sum_sq_ref += y * y;
    if (diff > allowed) ++e.mismatch_count;
    const double ratio = allowed > 0 ? diff / allowed : (diff > 0 ? std::numeric_limits<double>::max() : 0.0);
    if (ratio > worst) {
      worst = ratio;
      e.worst_index = static_cast<int64_t>(i);
    }
  }
  e.nmse = sum_sq_ref > 0 ? sum_sq_err / sum_sq_ref : sum_sq_err;
  if (magnitude) e.nmse_allowance = tol.acc_nmse_coeff * (sum_sq_ref > 0 ? sum_sq_mag / sum_sq_ref : sum_sq_mag);
  return e;
}

Verdict judge(const ErrorMeasures& e, const Tolerance& tol) {
  if (e.nan_count > 0 || e.mismatch_count > 0 || !(e.nmse <= tol.nmse_max + e.nmse_allowance))
    return Verdict::kIncorrect;
  return Verdict::kPassed;
}

double accumulation_lambda(int64_t reduction_length) {
  const double k = static_cast<double>(std::max<int64_t>(1, reduction_length));
  const double u = 0x1p-24;
  return std::sqrt(2.0 * std::log(2.0 * k / kAccumulationFailureProbability)) / (1.0 - u);
}

AccumulationPath accumulation_into(const Graph& graph, int tensor) {
  using namespace validate_internal;
  const auto prod = producers(graph);
  AccumulationPath path;
  std::vector<bool> seen(graph.tensors.size(), false);
  std::vector<int> stack{tensor};
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size() || seen[static_cast<size_t>(t)]) continue;
    seen[static_cast<size_t>(t)] = true;
    const int n = prod[static_cast<size_t>(t)];
    if (n < 0) continue;
    const Node& node = graph.nodes[static_cast<size_t>(n)];
    ++path.nodes;
    auto plan = plan_node(graph, n);
    if (plan.is_ok()) path.reduction_length = std::max(path.reduction_length, plan->reduction_length);
    const bool gemm = node.op == OpKind::kConvFprop || node.op == OpKind::kConvDgrad ||
                      node.op == OpKind::kConvWgrad || node.op == OpKind::kMatmul;
    if (gemm && node.compute_dtype.value_or(graph.compute_dtype) == DataType::kFloat16)
      path.unit_roundoff = std::max(path.unit_roundoff, 0x1p-11);
    for (int in : node.inputs) stack.push_back(in);
  }
  return path;
}

int64_t reduction_length_into(const Graph& graph, int tensor) {
  return accumulation_into(graph, tensor).reduction_length;
}

std::string CheckReport::summary() const {
  std::string s;
  for (const auto& o : outputs) s += (s.empty() ? "" : "\n") + o.summary;
  return s;
}

namespace {

StatusOr<CheckReport> check_impl(const Graph& graph, const std::vector<HostTensor>& outputs,
                                 const std::vector<HostTensor>& references, const std::vector<HostTensor>* magnitudes,
                                 const CheckOptions& options) {
  using namespace validate_internal;
  if (outputs.size() != graph.outputs.size() || references.size() != graph.outputs.size())
    return invalid_argument("check_outputs: graph '" + graph.name + "' has " + std::to_string(graph.outputs.size()) +
                            " outputs, got " + std::to_string(outputs.size()) + " results and " +
                            std::to_string(references.size()) + " references");
  if (magnitudes && magnitudes->size() != graph.outputs.size())
    return invalid_argument("check_outputs: graph '" + graph.name + "' has " + std::to_string(graph.outputs.size()) +
                            " outputs, got " + std::to_string(magnitudes->size()) + " magnitudes");
  CheckReport report;
  report.verdict = Verdict::kPassed;
  const bool multi_node = graph.nodes.size() > 1;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const int t = graph.outputs[i];
    if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size())
      return invalid_argument("check_outputs: output index " + std::to_string(t) + " out of range");
    OutputCheck c;
    c.name = graph.tensors[static_cast<size_t>(t)].name;
    c.tensor = t;
    c.dtype = dtype_of(graph, t);
    const AccumulationPath path = accumulation_into(graph, t);
    ToleranceOptions to;
    to.reduction_length = path.reduction_length;
    to.allow_tf32 = options.allow_tf32;
    to.accumulation_bound = magnitudes != nullptr;
    if (multi_node) to.intermediate_dtype = graph.intermediate_dtype;
    c.tolerance = default_tolerance(c.dtype, to);
    const bool with_bound = magnitudes != nullptr && !is_integer(c.dtype);
    if (with_bound) {
      // Higham & Mary's probabilistic bound on the accumulations, plus one fp32 rounding per node on the
      // path (the magnitude rules carry both; see reference_math.h and docs/numerics.md).
      const double k = static_cast<double>(path.reduction_length);
      const double rms = std::sqrt(k) * path.unit_roundoff + path.nodes * 0x1p-24;
      c.tolerance.acc_coeff = accumulation_lambda(path.reduction_length) * std::sqrt(k) * path.unit_roundoff +
                              path.nodes * 0x1p-24;
      c.tolerance.acc_nmse_coeff = 4.0 * rms * rms;
    }
    // A reduction fused behind a GEMM or convolution (the FP8 recipe's AMAX) reads the accumulator before
    // it is rounded to the stored dtype of its input, while the reference reduces the rounded values: the
    // two may differ by one rounding of the input dtype, so rtol is at least that dtype's.
    // The same holds for a pointwise chain after such a reduction (the recipe's 448 / amax): a quotient or
    // product carries the reduction's relative difference unchanged, so the nearest reduction up a chain
    // of pointwise nodes decides.
    int p = graph.producer(t);
    while (p >= 0 && graph.nodes[static_cast<size_t>(p)].op == OpKind::kPointwise) {
      int next = -1;
      for (int in : graph.nodes[static_cast<size_t>(p)].inputs)
        if (graph.producer(in) >= 0) { next = graph.producer(in); break; }
      p = next;
    }
    if (p >= 0 && graph.nodes[static_cast<size_t>(p)].op == OpKind::kReduction) {
      const int in = graph.nodes[static_cast<size_t>(p)].inputs[0];
      double roundoff = 0;  // unit roundoff of the input's stored dtype, 2^-(mantissa bits + 1)
      switch (dtype_of(graph, in)) {
        case DataType::kFloat16: roundoff = std::ldexp(1.0, -11); break;
        case DataType::kBFloat16: roundoff = std::ldexp(1.0, -8); break;
        case DataType::kFp8E4M3: roundoff = std::ldexp(1.0, -4); break;
        case DataType::kFp8E5M2: roundoff = std::ldexp(1.0, -3); break;
        default: break;
      }
      c.tolerance.rtol = std::max(c.tolerance.rtol, 2 * roundoff);
      c.tolerance.nmse_max = std::max(c.tolerance.nmse_max, 4 * roundoff * roundoff);
      // With magnitudes the same holds per summed element: each term may differ by a rounding of its stored
      // dtype, at most u |x_j| <= u M_x_j, and sum_j M_x_j <= M_out (max M_x_j for max/min/amax). rtol on
      // the result alone misses a sum that cancels.
      if (with_bound && graph.producer(in) >= 0) c.tolerance.acc_coeff += 2 * roundoff;
    }
    c.tolerance.atol *= options.tolerance_scale;
    c.tolerance.rtol *= options.tolerance_scale;
    c.tolerance.acc_coeff *= options.tolerance_scale;
    auto err = measure_error(outputs[i], references[i], c.tolerance, with_bound ? &(*magnitudes)[i] : nullptr);
    if (!err.is_ok()) return err.status().with_context("output '" + c.name + "'");
    c.error = *err;
    c.verdict = judge(c.error, c.tolerance);
    c.summary = c.name + ": " + verdict_name(c.verdict) + " max_abs=" + sci(c.error.max_abs) +
                " max_rel=" + sci(c.error.max_rel) + " nmse=" + sci(c.error.nmse);
    if (c.error.nan_count > 0) c.summary += " nonfinite=" + std::to_string(c.error.nan_count);
    if (c.error.mismatch_count > 0)
      c.summary += " mismatches=" + std::to_string(c.error.mismatch_count) + "/" + std::to_string(c.error.count) +
                   " (worst at index " + std::to_string(c.error.worst_index) + ")";
    c.summary += std::string(" (") + dtype_name(c.dtype) + " tol atol=" + sci(c.tolerance.atol) +
                 " rtol=" + sci(c.tolerance.rtol) + " nmse<=" + sci(c.tolerance.nmse_max + c.error.nmse_allowance) +
                 " K=" + std::to_string(to.reduction_length) + (options.allow_tf32 ? " tf32" : "");
    if (with_bound) c.summary += " acc=" + sci(c.tolerance.acc_coeff) + "*M";
    c.summary += ")";
    if (c.verdict != Verdict::kPassed) report.verdict = c.verdict;
    report.outputs.push_back(std::move(c));
  }
  return report;
}

}  // namespace

StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const ReferenceOutputs& reference, const CheckOptions& options) {
  // A reference without its magnitude pass falls back to the legacy tolerances.
  return catch_exceptions("graph '" + graph.name + "': checking outputs", [&] {
    return check_impl(graph, outputs, reference.values, reference.magnitudes.empty() ? nullptr : &reference.magnitudes,
                      options);
  });
}

StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::vector<HostTensor>& references, const CheckOptions& options) {
  return catch_exceptions("graph '" + graph.name + "': checking outputs",
                          [&] { return check_impl(graph, outputs, references, nullptr, options); });
}

}  // namespace kiln
