// kiln/spec/spec.h: JSON specs (docs/spec.md) -> validated kiln::Graph.
//
// Every error is kInvalidArgument (kNotFound when the file cannot be read; kNotSupported when the graph
// needs a newer target than options.target_sm_version) and its message starts with the source name,
// then names the node, tensor or attribute at fault: "conv.json: node 'conv1' (conv_fprop): input 'w':
// rank 3, expected 4". Malformed JSON reports the line, column and byte offset. No exception escapes.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// Reads and parses the spec at `path`, then validates it (validate_graph). Messages start with `path`.
StatusOr<Graph> parse_spec_file(const std::string& path, const ValidateOptions& options = {});

// Parses spec text; `source_name` starts every message (a file name, or e.g. "<stdin>").
StatusOr<Graph> parse_spec_string(const std::string& text, const std::string& source_name,
                                  const ValidateOptions& options = {});

// Writes a graph as spec JSON (docs/spec.md "Writing a graph back"): the inverse of parse_spec_string for
// a validated graph (from a spec or GraphBuilder::build). Reading the text back gives a graph with the same
// structure signature and shape key. Every tensor is declared in Graph::tensors order with its dims (dynamic
// ones by symbol), layout (or explicit strides), dtype when set, and value when passed by value; nodes
// keep their names, ops, compute dtypes and attributes; the graph's dtypes, dynamic dims and `pin` are
// written. `indent` < 0: one line (the form stored in the plan store); else pretty-printed with that indent.
// InvalidArgument for a graph that no spec can express (an empty or repeated name, a name that is not
// UTF-8).
// InvalidArgument for an indent over kMaxSpecIndent.
inline constexpr int kMaxSpecIndent = 64;
StatusOr<std::string> graph_to_spec_json(const Graph& graph, int indent = -1);

// The spec op names ("conv_fprop", "relu", "reduce_amax", ...), in documentation order.
const std::vector<std::string>& spec_op_names();

}  // namespace kiln
