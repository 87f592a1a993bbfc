// The inputs and outputs of a graph that a caller binds, with the bytes each spans: what ExecutablePlan checks a
// call against and what a split stopgap's cover checks for aliasing. Private to the runtime layer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln {

// An input or output of a graph that a caller binds (not by value, not virtual), with the bytes it spans.
struct BoundTensor {
  int tensor = -1;
  std::string name;
  size_t bytes = 0;
  bool output = false;  // written by a node
};

std::vector<BoundTensor> bound_tensors(const Graph& g);

}  // namespace kiln
