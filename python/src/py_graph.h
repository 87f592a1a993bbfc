// The Python Graph's C++ side (py_graph.cc): a validated graph, shared, with its signature.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "kiln/graph/graph.h"

namespace kiln::py {

struct PyGraph {
  std::shared_ptr<const Graph> graph;  // validated
  GraphSignature signature;
  static PyGraph make(Graph validated);
  PyGraph at(const std::map<std::string, int64_t>& shape) const;
};

}  // namespace kiln::py
