#pragma once
// Advice on a validated graph: choices in a spec that are valid, and that cuDNN serves far more slowly than a
// nearby equivalent, each backed by a measurement named in its text; or that are valid and likely not what the
// author meant (an attention band aligned top-left with fewer queries than keys), each saying why. Advice never changes the
// graph (that would change its numerics); `kiln tune` and `kiln validate` print it so the author can decide.
#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln {

struct Advice {
  std::string node;     // the node it is about
  std::string tensor;   // the tensor it is about, if one
  std::string message;  // "node 'norm': scale 'gamma' is fp32 while input 'x' is bf16: ..."
};

// Every piece of advice for `validated_graph`, in node order; empty when there is none.
std::vector<Advice> graph_advice(const Graph& validated_graph);

}  // namespace kiln
