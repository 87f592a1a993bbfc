// kiln/validate/normalized_graph.h: a validated graph as the normalized-graph JSON document
// (docs/normalized-graph.md), what an outside checker (scripts/torch_check/) reads instead of parsing a
// spec itself: every dim inferred, every dtype and stride resolved, the nodes in topological order with
// canonical op names and every attribute's default filled in, and the numbers Kiln's own check uses (each
// graph input's random range, each node's reduction length, each output's accumulation path and the
// tolerances check_outputs gives it).
//
// It lives in the validate layer, not beside the spec writer, because those numbers are the validate
// layer's (input_draws, accumulation_into, check_outputs' tolerances); the graph part needs only the graph
// layer.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// The document's "version". A reader refuses another version; a change that a reader of the current
// version would misread (a field renamed, removed or given another meaning) takes the next one, a new
// field does not.
constexpr int kNormalizedGraphVersion = 1;

// The "format" field, so that a reader can tell this document from a spec.
constexpr const char* kNormalizedGraphFormat = "kiln-normalized-graph";

// Writes `graph`, which must have passed validate_graph (parse_spec_file, GraphBuilder::build), as a
// normalized-graph document; `indent` < 0: one line, else pretty-printed with that indent. Errors
// (InvalidArgument) name what is wrong: a graph whose tensors or nodes cannot be ordered or planned (one
// that did not pass validation), a name that is not UTF-8.
StatusOr<std::string> normalized_graph_json(const Graph& graph, int indent = 2);

}  // namespace kiln
