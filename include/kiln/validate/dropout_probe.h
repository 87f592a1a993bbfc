// kiln/validate/dropout_probe.h: checking a plan that drops attention probabilities (kiln/graph/graph.h
// SdpaAttrs::dropout). cuDNN draws the mask with its Philox generator from the seed and offset tensors; Kiln does not
// reproduce that generator. It reads the mask the plan under test draws instead, from the plan itself:
//   - the probe runs the plan with v replaced by one-hot blocks (value row j of each kv head holds a 1 in column
//     j mod Dv, only for the block of keys [k Dv, (k + 1) Dv) of run k), so each output element o[b, h, i, c] of run
//     k is query row i's weight for key k Dv + c: p / (1 - dropout) where kept, exactly 0 where dropped;
//   - a backward pass (sdpa_backward) is probed alike through dv = (P dropped and scaled)^T do: do one-hot over
//     blocks of Dv query rows, one member of each key head's group at a time, so dv[b, hk, j, c] is query row
//     k Dv + c's weight for key j (ceil(Sq / Dv) (H / Hk) runs); the reference's backward then takes that mask;
//   - v is restored, and the reference (host or device) computes the node with that mask, through the usual gate;
//   - the probe's own check: among the probabilities the rows attend to, the share dropped must be dropout's,
//     within 6 standard deviations of a binomial draw (and 0.001), or the plan does not drop as asked (a plan that
//     ignores dropout matches a reference given its all-kept mask: this is what catches it).
// The seed and offset are not changed between the probe's runs and the checked run, so the plan draws one mask.
// Kiln serves a dropout graph only at the exact shape (runtime/padding.cc: no padded or split stopgap), since the mask
// is drawn by position in the shape run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/graph.h"
#include "kiln/validate/check_types.h"
#include "kiln/validate/device_check.h"

namespace kiln {

// Whether any node of the graph drops probabilities (SdpaAttrs::dropout > 0).
bool has_dropout(const Graph& graph);

// The references' form of a dropout graph: each dropout node gets one more input, its mask (int8 [B, H, Sq, Skv],
// named "<node>.dropout_keep", appended to the graph's tensors: every other tensor keeps its index) and
// SdpaAttrs::dropout_keep_input. `masks` receives, per node index, the mask's tensor index. Never lowered.
Graph dropout_reference_graph(const Graph& graph, std::map<int, int>* masks);

// What a probe found, per dropout node.
struct DropoutNodeProbe {
  int node = -1;
  int mask_tensor = -1;  // in DropoutProbe::reference_graph
  double dropout = 0;
  int runs = 0;          // the plan's runs
  int64_t attended = 0;  // probabilities the rows attend to (the band, the lengths)
  int64_t dropped = 0;   // of those, read as 0
  double dropped_share() const { return attended > 0 ? static_cast<double>(dropped) / attended : 0.0; }
  // The share dropped the check allows: dropout +- (6 standard deviations of a binomial draw + 0.001).
  double allowed_deviation() const;
  Disposition verdict() const;  // Passed within it, Incorrect outside, NotVerified with nothing attended
  std::string summary(const std::string& node_name) const;
};

struct DropoutProbe {
  Graph reference_graph;                // dropout_reference_graph
  std::map<int, DeviceBuffer> masks;    // mask tensor index -> int8 [B, H, Sq, Skv] on the device (1 kept)
  std::vector<DropoutNodeProbe> nodes;  // one per dropout node
  // The inputs of reference_graph: `inputs` (the graph's) and the masks.
  std::map<int, void*> reference_inputs(const std::map<int, void*>& inputs) const;
  // Adds one check per dropout node to `report` (named "<o's name> dropout mask", for o's tensor) and makes the
  // report's verdict the worse of the two.
  void add_to(const Graph& graph, CheckReport& report) const;
};

// Probes the masks the plan draws: `run` runs the plan under test on `buffers` (tensor index -> device pointer, the
// graph's inputs and outputs; it must enqueue on `stream` or finish before it returns). Each dropout node's v (a
// backward pass's do) must be a graph input and its o (dv) a graph output (NotSupported otherwise); that input is
// restored before this returns, the outputs hold the last probe's. ceil(Skv / Dv) runs per forward node,
// ceil(Sq / Dv) (H / Hk) per backward one. NotSupported past 2^31 probabilities (the device reference holds the
// mask as doubles).
StatusOr<DropoutProbe> probe_dropout(const Graph& graph, const std::map<int, void*>& buffers,
                                     const std::function<Status()>& run, cudaStream_t stream = nullptr);

// The device reference of a dropout graph: device_reference_on_device of the probe's reference graph on `inputs` (the
// graph's) and the masks.
StatusOr<DeviceReference> dropout_reference_on_device(const DropoutProbe& probe, const std::map<int, void*>& inputs);

// The whole check of a plan of a dropout graph, as the tuner, the Planner's first-use check and `kiln run --verify`
// make it: probe_dropout, one more run of the plan on `buffers` (then `after_run` where given: a test's hook on the
// outputs), the reference made with the probed masks, `checker`'s comparison of the graph's outputs with it, and
// the probe's own verdicts added (DropoutProbe::add_to).
StatusOr<CheckReport> check_dropout_plan(const Graph& graph, const std::map<int, void*>& buffers,
                                         const std::function<Status()>& run, DeviceChecker& checker,
                                         cudaStream_t stream = nullptr,
                                         const std::function<Status()>& after_run = nullptr);

}  // namespace kiln
