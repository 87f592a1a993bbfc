// Kiln IR -> cuDNN Frontend graph. Only for src/lower/.
#pragma once

#include <memory>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/lower/lower.h"
#include "lower/frontend.h"

namespace kiln::lower_detail {

fe::DataType_t to_fe_dtype(DataType t);
// The cuDNN uid of each tensor (by index): its canonical number in the structure signature + 1
// (GraphSignature::tensor_ids), so a plan stored under a signature binds the same tensors in every graph
// with that signature, whatever order their tensors were declared in.
StatusOr<std::vector<int64_t>> tensor_uids(const Graph& graph);
// Builds the frontend graph (nodes and tensors, the given uids: tensor_uids of the caller's graph, which a
// known-defect rewrite of it keeps) and validates it. Does not build the operation graph. Nothing the
// frontend throws escapes.
StatusOr<std::shared_ptr<fe::graph::Graph>> lower_graph(const Graph& graph, const std::vector<int64_t>& uids);
// Applies a target: device properties, SM version and count for a profile.
Status apply_profile(fe::graph::Graph& g, const DeviceProfile& profile);

}  // namespace kiln::lower_detail
