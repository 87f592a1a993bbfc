// Canonicalization: a valid Kiln graph rewritten into the tensor ranks and layouts cuDNN's engines run,
// without changing its meaning or the caller's bindings (the same tensors, uids and memory; only how the
// memory is described changes). It runs between validation and lowering: LoweredGraph::create and
// deserialize_for lower rewrite_for_cudnn(graph).graph, which applies the canonical rules below and then
// the known-defect rewrites (lower/known_defects.h).
//
// Each rule has the shape of a known-defect entry (KnownDefect: the cuDNN behaviour behind it, the cuDNN
// versions it was seen on, an example spec, the GPU test that re-checks it on every cuDNN) and its own host
// tests (canonicalize_test.cc). The GPU test (known_defects_gpu_test.cc, Table/CanonicalRules) runs each
// example through `kiln run --verify`'s path and every engine configuration `kiln tune` tries, and reports
// whether this cuDNN still needs the rule.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "lower/known_defects.h"

namespace kiln::lower_detail {

// The canonical rules, in the order they apply.
const std::vector<KnownDefect>& canonical_rules();

// Applies every canonical rule that matches `graph` (validated), then every known defect's rewrite.
// `applied` names each ("pointwise_rank_below_3: ..."). NotSupported where a defect cannot be worked around.
StatusOr<DefectWorkaround> rewrite_for_cudnn(const Graph& graph);

// The form the pointwise rules give a graph of pointwise ops only (for the engine coverage registry, which
// names why cuDNN refuses one): rank 3 row-major, or rank 4-5 with the innermost axis second.
StatusOr<Graph> canonical_pointwise_form(const Graph& graph);

// The rank-lifting rewrite on its own (for tests): every tensor that is not a by-value scalar is given
// leading axes of extent 1 up to max(min_rank, the graph's largest rank), right-aligned as Kiln's
// broadcasting is, with the strides of a row-major view of the same memory.
StatusOr<Graph> lift_to_rank(const Graph& graph, size_t min_rank, const std::string& where);

}  // namespace kiln::lower_detail
