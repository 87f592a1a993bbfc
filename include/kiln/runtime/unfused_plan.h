// kiln/runtime/unfused_plan.h: a graph's unfused chain as one ExecutablePlan (docs/runtime.md "Fused or unfused, in
// service"). Where `kiln tune` found that the chain of a graph's parts (kiln/graph/decompose.h) beats its fused
// plan, the store keeps that decision (kiln/store/fusion_record.h) and kiln::Planner serves this: the parts'
// plans run back to back on the caller's buffers, each tensor that crosses between parts in the workspace.
// It binds exactly the fused graph's inputs and outputs, so a caller cannot tell it from the fused plan
// except by parts() and identity().
#pragma once

#include <memory>
#include <vector>

#include "kiln/graph/decompose.h"
#include "kiln/runtime/plan_types.h"

namespace kiln {

// Where the chain keeps what crosses between parts: the workspace starts with one region per crossing
// tensor (kBindingAlignment-aligned, in tensor order), then the parts' own workspace (the largest of them,
// shared: the parts run one after another on one stream).
struct UnfusedLayout {
  std::map<int, int64_t> offsets;  // tensor index in the fused graph -> offset in the workspace
  std::map<int, int64_t> bytes;    // its span
  int64_t parts_workspace_offset = 0;
  int64_t workspace_bytes = 0;  // the whole chain's
};

// `plans[i]` runs `parts[i].graph` (same number of tensors, the part's tensor_map into `graph`). `graph` and
// `signature` are the fused graph's; the plan's built_from is `built_from`. InvalidArgument naming the part
// when the parts do not fit the graph: a count mismatch, fewer than two parts, a part plan for another
// graph, a part tensor mapped outside the graph, or a tensor that crosses between parts whose producer and
// consumer disagree on its size.
StatusOr<std::shared_ptr<const ExecutablePlan>> make_unfused_plan(
    const Graph& graph, const GraphSignature& signature, const std::vector<GraphPart>& parts,
    std::vector<std::shared_ptr<const ExecutablePlan>> plans, PlanSource built_from);

// The layout make_unfused_plan uses (for tests and reports).
StatusOr<UnfusedLayout> unfused_layout(const Graph& graph, const std::vector<GraphPart>& parts,
                                       const std::vector<std::shared_ptr<const ExecutablePlan>>& plans);

}  // namespace kiln
