// kiln/tune/unfused.h: the unfused alternatives to a fused graph, measured. Each decomposition
// (kiln/graph/decompose.h unfused_groupings: each node alone, then the graph cut once at each point of its
// topological order) has its parts tuned as graphs of their own (a part two decompositions share is tuned once), and
// the parts' winners are then run back to back, intermediates in memory, as one timed unit: that chain is checked
// against the fused graph's reference and timed with the same measurement module, so the fused winner and the chain
// are compared like for like (decide_fusion in kiln/tune/tune_policy.h makes the choice). The fastest chain that
// passes is the unfused side. A decomposition past the first whose bound (chain_lower_bound_ms) passes the fused
// winner's median by more than 3% is skipped before its remaining parts are tuned (a heuristic: the report says so).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tune/tuner.h"

namespace kiln {

struct UnfusedOptions {
  // Per-part tuning: modes, filters, measurement, budget (what is left of it is shared by the parts and
  // the chain), seed, verify, cancel. Pin, incumbent, output_hook and progress are not applied to the
  // parts.
  TuneOptions tune;
  // Dtype intermediates are stored in between parts; unset: the graph's io dtype (what a framework that
  // runs one kernel per op keeps in memory).
  std::optional<DataType> materialized;
  // The fused graph's inputs and reference (TuneResult::evaluation): the chain is run on the same inputs
  // and checked against the same reference, on the device, nothing recomputed. Null: made here.
  std::shared_ptr<const GraphEvaluation> evaluation;
  // The fused winner's median (0: none, or unknown, or a policy that stores the chain however it compares): a
  // decomposition past the first whose bound (chain_lower_bound_ms over the times known so far) passes it by more
  // than 3% is skipped, and the report says so.
  double fused_ms = 0.0;
  // false: only each node alone (no split points).
  bool split_points = true;
};

// One decomposition considered: its grouping, its parts' winners, its chain (or why there is none).
struct DecompositionResult {
  std::string name;                     // "each node", or its parts' names: "mlp/mm+1 | mlp/gelu"
  std::vector<int> groups;              // partition_graph's group numbers
  std::vector<std::string> parts;       // its parts' names
  std::vector<std::string> identities;  // each part's winner (as far as they were tuned)
  CandidateResult chain;                // checked and timed; not timed where `unavailable` says why
  std::string unavailable;              // a part without a correct plan, skipped by its bound, the budget; or empty
};

struct UnfusedPartResult {
  std::string name;           // "<graph>/<first node>", "+N" with N more nodes
  std::string structure_sig;  // the part's own signature (it can be stored and run as a graph)
  std::string shape_key;
  TuneResult tune;  // the part's full tuning result
};

// The chosen decomposition (the fastest chain that passed; else the first, each node alone, with why it has no
// chain) in the fields below `decompositions`.
struct UnfusedResult {
  DataType materialized = DataType::kFloat16;
  std::vector<DecompositionResult> decompositions;  // every one considered, in order
  std::vector<int> groups;                          // the chosen grouping (partition_graph's group numbers)
  std::vector<UnfusedPartResult> parts;
  // The chain of the parts' winners: disposition from checking the graph's outputs against the fused
  // graph's reference; timing of one whole chain per sample. engine_id is -1; identity() is not
  // meaningful, use `identities`.
  CandidateResult chain;
  std::vector<std::string> identities;  // each part's winner
  std::string chain_check;              // the chain's numerics summary
  ReferenceKind reference_kind = ReferenceKind::kNone;
  double sum_of_parts_ms = 0;     // sum of the parts' medians, each timed alone
  double intermediate_bytes = 0;  // bytes written and read back through memory between parts
  std::string unavailable;        // why there is no chain (a part without a correct plan), or empty
};

// NotSupported for a graph of one node (there is nothing to unfuse). A part that cannot be tuned makes the
// result unavailable (UnfusedResult::unavailable says which and why), not an error.
StatusOr<UnfusedResult> tune_unfused(const Graph& graph, const UnfusedOptions& options);

// The unfused side for decide_fusion: available when the chain passed and was timed.
FusionSide unfused_chain_side(const UnfusedResult& result);

// The fused-vs-unfused block of `kiln tune`'s report: both sides' times and plans, each part's winner
// timed alone, the bytes that travel through memory between parts, and the decision (or why none).
std::string format_fusion_report(const CandidateResult* fused_winner, const UnfusedResult& unfused, FusionPolicy policy,
                                 const StatusOr<FusionDecision>& decision);
nlohmann::json fusion_report_json(const CandidateResult* fused_winner, const UnfusedResult& unfused,
                                  FusionPolicy policy, const StatusOr<FusionDecision>& decision);

}  // namespace kiln
