// kiln/numerics.h: error measures between an output and its reference, per-dtype tolerances, and the
// disposition of a checked result. See docs/numerics.md for the reasoning behind every number here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"

namespace kiln {

// The disposition of a candidate or a run, after the CUTLASS profiler:
//   kPassed       ran, and every output is within tolerance of the reference
//   kIncorrect    ran, but some output is not (including NaN/Inf where the reference is finite)
//   kNotSupported cuDNN or the device refused the configuration (not an error of the candidate)
//   kFailed       it should have run but did not (build, launch or runtime failure)
//   kNotVerified  ran, no reference was available (e.g. too large for the host and no device reference)
enum class Verdict { kPassed, kIncorrect, kNotSupported, kFailed, kNotVerified };
const char* verdict_name(Verdict v);  // "Passed", "Incorrect", "NotSupported", "Failed", "NotVerified"

// How close is close enough. An element matches when |out - ref| <= atol + rtol * |ref| (both finite),
// or when both are the same non-finite value. A tensor passes when every element matches, no element
// is NaN/Inf where the reference is finite, and nmse <= nmse_max.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double nmse_max = 0.0;
  double rel_floor = 1e-6;  // max_rel divides by max(|ref|, rel_floor)
};

// Options that widen the default tolerance.
struct ToleranceOptions {
  // Length of the longest reduction feeding the output (conv C/g * filter size, matmul K, reduced
  // element count, normalized row length, SDPA key count); 1 for elementwise work.
  int64_t reduction_length = 1;
  // fp32 results may come from TF32 tensor cores (10-bit mantissa inputs); cuDNN does this for fp32
  // conv/matmul unless math mode forbids it.
  bool allow_tf32 = false;
  // The dtype intermediates were rounded to, when it is coarser than the output dtype.
  DataType intermediate_dtype = DataType::kFloat32;
};

// Default tolerance for an output of `dtype` (see docs/numerics.md "Tolerances"):
//   fp32  atol=rtol=1e-5, nmse 1e-10     (TF32 allowed: atol 1e-2, rtol 5e-3, nmse 2e-6)
//   fp16  atol=rtol=1e-2, nmse 1e-5,  rel floor 1e-3
//   bf16  atol=rtol=2e-2, nmse 1e-4,  rel floor 1e-2
//   e4m3  atol=rtol=1.25e-1, nmse 2e-2;  e5m2 atol=rtol=2.5e-1, nmse 6e-2
//   int8/int32/int64: exact but for atol 1 on int8 (one rounding step)
// With k = max(1, K / 64) for reduction length K: atol is multiplied by sqrt(k) (output/input rounding
// errors add like a random walk), except for plain fp32, where fp32 accumulation error dominates and
// atol and nmse_max are multiplied by k. rtol does not change: it already tracks |ref|. The coarser
// of `dtype` and options.intermediate_dtype sets the base numbers.
Tolerance default_tolerance(DataType dtype, const ToleranceOptions& options = {});

struct ErrorMeasures {
  int64_t count = 0;           // elements compared
  double max_abs = 0.0;        // max |out - ref| over finite pairs
  double max_rel = 0.0;        // max |out - ref| / max(|ref|, rel_floor) over finite pairs
  double nmse = 0.0;           // sum (out - ref)^2 / sum ref^2 over finite pairs (sum (out-ref)^2 if ref is all 0)
  int64_t nan_count = 0;       // elements where out is NaN/Inf but ref is finite
  int64_t mismatch_count = 0;  // elements that do not match (includes nan_count)
  int64_t worst_index = -1;    // row-major logical index of the largest |out - ref| / (atol + rtol|ref|)
};

// Compares two tensors of the same dims element by element (through their strides; dtypes may differ).
StatusOr<ErrorMeasures> measure_error(const HostTensor& out, const HostTensor& ref, const Tolerance& tol);

// Passed or Incorrect. NaN/Inf in `out` where `ref` is finite is always Incorrect, whatever `tol` says.
Verdict judge(const ErrorMeasures& e, const Tolerance& tol);

struct OutputCheck {
  std::string name;  // tensor name
  int tensor = -1;   // index into Graph::tensors
  DataType dtype = DataType::kFloat32;
  Tolerance tolerance;
  ErrorMeasures error;
  Verdict verdict = Verdict::kNotVerified;
  // "y: Passed max_abs=3.1e-03 max_rel=2.0e-03 nmse=1.2e-07 (fp16 tol atol=1.0e-02 rtol=1.0e-02 nmse<=1.0e-05 K=64)"
  std::string summary;
};

struct CheckReport {
  Verdict verdict = Verdict::kNotVerified;  // the worst over outputs (Passed only if all passed)
  std::vector<OutputCheck> outputs;
  std::string summary() const;  // one line per output
};

struct CheckOptions {
  bool allow_tf32 = false;
  // Multiplies atol and rtol of every default tolerance (> 1 to loosen).
  double tolerance_scale = 1.0;
};

// Checks `outputs` against `references`, both in the order of graph.outputs (as returned by the
// reference functions in kiln/reference.h). The reduction length of each output is taken from the
// nodes that lead to it. Returns kInvalidArgument when counts or dims do not line up.
StatusOr<CheckReport> check_outputs(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::vector<HostTensor>& references, const CheckOptions& options = {});

// The reduction length of the longest reduction on any path into `tensor` (1 if none).
int64_t reduction_length_into(const Graph& graph, int tensor);

}  // namespace kiln
