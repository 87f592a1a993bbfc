// The Python Planner's C++ side (py_planner.cc): a Planner shared by every plan it hands out, so that a plan
// outlives the Python object that made it.
#pragma once
#include <memory>

#include "kiln/runtime/planner.h"
#include "py_graph.h"

namespace kiln::py {

struct PyPlanner {
  std::shared_ptr<Planner> planner;
};

// A graph prepared by a Planner (validated, signature computed once): what obtain() is cheapest on.
struct PyPrepared {
  std::shared_ptr<Planner> planner;
  PreparedGraph prepared;
  PyGraph graph;
};

// A plan handed to Python, with the Planner that keeps its handles and backend alive.
struct PyPlan {
  std::shared_ptr<Planner> planner;
  Obtained obtained;
};

PyPrepared prepare(const PyPlanner& p, const PyGraph& g);
// obtain() on a prepared graph, the GIL released while it runs.
Obtained obtain(Planner& planner, const PreparedGraph& pg, const std::map<std::string, int64_t>& shape);

}  // namespace kiln::py
