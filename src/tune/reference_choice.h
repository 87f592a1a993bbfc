// Internal to the tune layer: the reference the numerics gate compares with.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/reference.h"

namespace kiln::tune_internal {

// The host reference when its cost cap allows, else the device reference, with the magnitudes the
// accumulation bound needs (kiln/numerics.h). `kind` receives "host", "device" or "none"; with "none"
// (no reference could be computed, logged as a warning) the result is empty and candidates stay
// NotVerified.
std::optional<ReferenceOutputs> compute_reference(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                                  std::string* kind);

}  // namespace kiln::tune_internal
