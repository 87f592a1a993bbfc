// kiln/validate/check_types.h: the types of a numerical check (a tolerance, the error measures, each output's
// check and the report, the options), apart from the functions that make and judge them
// (kiln/validate/numerics.h), so that the gate's internals (src/validate/gate.h), which numerics.cc uses,
// need not include numerics.h back. See docs/numerics.md for the reasoning behind every number here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/disposition.h"
#include "kiln/graph/graph.h"

namespace kiln {

// How close is close enough. An element matches when |out - ref| <= atol + rtol * |ref| (+ acc_coeff *
// M_i when a magnitude tensor M is given), both finite, or when both are the same non-finite value. A
// tensor passes when every element matches, no element is NaN/Inf where the reference is finite, and
// nmse <= nmse_max (+ the accumulation allowance, ErrorMeasures::nmse_allowance); with a scale tensor S
// (the expected-error model, docs/numerics.md "The gate") it must also pass the error-size, the bias and
// the per-element tests (judge()).
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double nmse_max = 0.0;
  double rel_floor = 1e-6;  // max_rel divides by max(|ref|, rel_floor)
  // The accumulation bound (docs/numerics.md "The accumulation bound"), used only with a magnitude
  // tensor M (ReferenceOutputs::magnitudes): element i may also differ by acc_coeff * M_i, and nmse may
  // exceed nmse_max by acc_nmse_coeff * sum M^2 / sum ref^2.
  double acc_coeff = 0.0;
  double acc_nmse_coeff = 0.0;
  // The expected-error model, used only with a scale tensor S (ReferenceOutputs::scales): before the
  // output's own rounding, element i is expected to differ from the exact result by an error of mean
  // square var_coeff * S_i^2, of which at most dir_coeff * S_i may be systematic toward zero (truncating
  // accumulation) and dir_sym_coeff * S_i systematic of either sign (function approximations).
  bool statistical = false;
  double var_coeff = 0.0;
  double dir_coeff = 0.0;
  double dir_sym_coeff = 0.0;
  // The per-element test's relative allowance beyond the model (a reduction fused behind a GEMM reads the
  // unrounded accumulator: 2 u of its input's dtype).
  double elem_rtol = 0.0;
};

struct ErrorMeasures {
  int64_t count = 0;            // elements compared
  double max_abs = 0.0;         // max |out - ref| over finite pairs
  double max_rel = 0.0;         // max |out - ref| / max(|ref|, rel_floor) over finite pairs
  double nmse = 0.0;            // sum (out - ref)^2 / sum ref^2 over finite pairs (sum (out-ref)^2 if ref is all 0)
  int64_t nan_count = 0;        // elements where out is NaN/Inf but ref is finite
  int64_t mismatch_count = 0;   // elements that do not match (includes nan_count)
  int64_t worst_index = -1;     // row-major logical index of the largest |out - ref| / (allowed band)
  double nmse_allowance = 0.0;  // acc_nmse_coeff * sum M^2 / sum ref^2 (0 without a magnitude tensor)
  // The expected-error model (tol.statistical with a scale tensor; zero otherwise):
  bool statistical = false;
  double sum_sq_err = 0.0;       // sum (out - ref)^2 over finite pairs
  double expected_sq_err = 0.0;  // sum V_i (see kGateSizeFactor)
  double size_limit = 0.0;       // what sum_sq_err may reach
  double mean_signed_rel = 0.0;  // sum (out - ref) sign(ref) / sum |ref|: the mean signed relative error,
                                 // |ref|-weighted (exactly e for out = (1 + e) ref)
  double bias_limit = 0.0;       // what |mean_signed_rel| may reach toward zero (mean_signed_rel < 0)
  double bias_limit_away = 0.0;  // what mean_signed_rel may reach away from zero (> 0)
  // The per-element test: the largest |out - ref| / element allowance (> 1 fails), its row-major index and
  // how many elements exceed their allowance.
  double element_ratio = 0.0;
  int64_t element_worst_index = -1;
  int64_t element_over = 0;
  // The first mismatching elements (lowest indices, at most 8) with their values and allowed band.
  struct Offender {
    int64_t index = -1;
    double out = 0, ref = 0, allowed = 0;
  };
  std::vector<Offender> offenders;
};

struct OutputCheck {
  std::string name;  // tensor name
  int tensor = -1;   // index into Graph::tensors
  DataType dtype = DataType::kFloat32;
  Tolerance tolerance;
  ErrorMeasures error;
  Disposition verdict = Disposition::kNotVerified;
  // "y: Passed max_abs=3.1e-03 max_rel=2.0e-03 nmse=1.2e-07 (fp16 tol atol=1.0e-02 rtol=1.0e-02 nmse<=1.0e-05 K=64
  //  acc=4.2e-06*M)", the last term only with magnitudes; nmse<= is the effective limit.
  std::string summary;
};

struct CheckReport {
  Disposition verdict = Disposition::kNotVerified;  // the worst over outputs (Passed only if all passed)
  std::vector<OutputCheck> outputs;
  std::string summary() const;  // one line per output (defined in src/validate/numerics.cc)
};

struct CheckOptions {
  bool allow_tf32 = false;
  // Multiplies atol, rtol and the accumulation coefficient of every default tolerance, and the expected
  // error of the statistical model (its variance by the square), (> 1 to loosen).
  double tolerance_scale = 1.0;
  // The dtype the computation under test stored its intermediates in, when it did (an unfused chain of
  // plans: its materialized dtype). Unset: a fused kernel, which keeps them in fp32 registers; the
  // reference rounds them to the graph's intermediate dtype either way.
  std::optional<DataType> stored_intermediates;
};

}  // namespace kiln
