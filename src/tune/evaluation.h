// Internal to the tune layer: what the numerics gate of one graph works on, on the device — its inputs,
// generated once, and its reference, computed once — shared by every fused candidate, the unfused chain
// and the tuner's result (kiln/tune/tuner.h TuneResult::evaluation).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kiln/graph/graph.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/device_check.h"

namespace kiln {

struct GraphEvaluation {
  Graph graph;  // a copy: the buffers' layout
  uint64_t seed = 0;
  std::string inputs_dir;                    // recorded inputs, or empty: generated from the seed
  std::string inputs;                        // "random seed N" or "files DIR"
  GraphBuffers buffers;                      // inputs generated or uploaded; outputs allocated (poisoned)
  std::optional<DeviceReference> reference;  // none when not verifying or none could be made
  ReferenceKind reference_kind = ReferenceKind::kNone;
  // A graph with dropout (kiln/validate/dropout_probe.h): no reference is made here; each plan's is made from the
  // mask it draws (probe_dropout), on the device.
  bool per_plan_reference = false;
  double inputs_ms = 0, reference_ms = 0;  // wall time of each, synchronised
};

// Allocates the graph's buffers, generates its inputs on the device (seed; or uploads the recorded ones of
// `inputs_dir`, read once) and, when `verify`, computes
// its reference: on the device and kept there, or with `host_reference` on the host (make_random_inputs
// gives the same inputs) and uploaded. A reference that cannot be made is a logged warning and
// reference_kind kNone; a failure to allocate or generate is an error.
StatusOr<std::shared_ptr<GraphEvaluation>> prepare_evaluation(const Graph& graph, uint64_t seed, bool verify,
                                                              bool host_reference, const std::string& inputs_dir = "");

}  // namespace kiln
