// Kiln IR -> cuDNN Frontend graph. Only for src/lower/.
#pragma once

#include <memory>

#include "kiln/graph.h"
#include "kiln/lower.h"
#include "lower/frontend.h"

namespace kiln::lower_detail {

fe::DataType_t to_fe_dtype(DataType t);
// Builds the frontend graph (nodes and tensors, uids = tensor index + 1) and validates it. Does not build
// the operation graph.
StatusOr<std::shared_ptr<fe::graph::Graph>> lower_graph(const Graph& graph);
// Applies a target: device properties, SM version and count for a profile.
Status apply_profile(fe::graph::Graph& g, const DeviceProfile& profile);

}  // namespace kiln::lower_detail
