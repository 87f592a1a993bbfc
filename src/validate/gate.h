// Internal to the validate layer: what the host comparison (numerics.cc) and the device comparison
// (device_check.cu) share around the per-element arithmetic of gate_math.h: each output's tolerance and
// gate parameters, planned once from the graph, and the verdict and summary made from the sums.
#pragma once

#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/validate/check_types.h"
#include "validate/gate_math.h"

namespace kiln::validate_internal {

struct OutputGate {
  OutputCheck check;  // name, tensor, dtype and tolerance filled; error and verdict by finish_output
  GateParams params;
  int64_t reduction_length = 1;
  bool with_bound = false;  // magnitudes: the accumulation bound
};

// The gate of every graph output, in the order of graph.outputs. `magnitudes`: the reference has them
// (the accumulation bound); `scales`: it has the scales too (the expected-error model, floating-point
// outputs only). InvalidArgument for an output index out of range.
StatusOr<std::vector<OutputGate>> plan_output_gates(const Graph& graph, bool magnitudes, bool scales,
                                                    const CheckOptions& options);

// The grid of a dtype for gate_ulp (mantissa bits, smallest normal exponent; -1 bits for integers).
void dtype_grid(DataType dtype, int* bits, int* emin);

// Measures from the sums of one pass over an output (offenders in index order).
ErrorMeasures measures_from_sums(const GateSums& sums, const std::vector<GateOffender>& offenders, const Tolerance& tol,
                                 bool with_magnitude);

// Sets gate.check's error, verdict and summary, and adds it to `report` (whose verdict becomes the worst).
void finish_output(OutputGate& gate, ErrorMeasures error, bool tf32, CheckReport& report);

}  // namespace kiln::validate_internal
