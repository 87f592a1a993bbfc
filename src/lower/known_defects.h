// Known cuDNN defects and how lowering works around them: ONE table (known_defects()), each entry with
// the cuDNN versions it was seen on, a graph that shows it, the host test of its rewrite
// (known_defects_test.cc) and the GPU test that checks the workaround on the device
// (known_defects_gpu_test.cc). LoweredGraph::create lowers work_around_known_defects(graph).graph in the
// caller's graph's place, so run, tune, compile and verify all get it; the Kiln graph, its signature,
// its tensor uids and the caller's buffers stay as they are (a rewrite only re-describes the same memory).
//
// To check a new cuDNN against the list, run the GPU tests on it: each also reports whether the defect
// still shows without the workaround. A defect no longer seen on any supported cuDNN can be dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln::lower_detail {

struct KnownDefect {
  const char* id;                // stable name, e.g. "pointwise_vector_broadcast"
  const char* summary;           // what cuDNN computes wrong
  std::vector<int64_t> seen_on;  // cuDNN versions (cudnnGetVersion()) it was confirmed on
  const char* evidence;          // how it was confirmed
  const char* example_spec;      // a spec (JSON) that shows it; the tests run it
  const char* gpu_test;          // the GPU test that checks the workaround
  // Where the graph (validated) has the defect ("node 'add' (add): input 'b' [1,1,64] ..."), or "".
  std::string (*find)(const Graph& graph);
  // An equivalent graph that cuDNN computes correctly, given find()'s answer; NotSupported naming the
  // reason when no rewrite applies (the graph would be computed wrong: refusing it is the safe answer).
  StatusOr<Graph> (*rewrite)(const Graph& graph, const std::string& where);
};

const std::vector<KnownDefect>& known_defects();

// How the rewrite tables' messages (known defects, canonical rules, engine coverage) print a tensor's extents,
// "[4,16,64]", and a list of integers such as strides, "[1024,64,1]".
std::string dims_text(const TensorDesc& t);
std::string ints_text(const std::vector<int64_t>& values);

struct DefectWorkaround {
  Graph graph;                       // the graph to lower (the input graph when nothing applies)
  std::vector<std::string> applied;  // "pointwise_vector_broadcast: node 'add' ...: lowered as ..."
};
// Applies every entry of `table` whose find() matches `start.graph`, in table order, appending "id: where" to
// start.applied (InternalError, "<graph>: the rewrite for <kind> <id> left its case in place (a bug)", when an
// entry still matches its own rewrite). Shared by the known defects below and the canonical rules
// (lower/canonicalize.h).
StatusOr<DefectWorkaround> apply_rewrites(const std::vector<KnownDefect>& table, DefectWorkaround start,
                                          const std::string& kind);

// Applies every known defect's rewrite that matches `graph` (validated), in table order. NotSupported
// (naming the defect and the reason) when a defect matches and cannot be worked around.
StatusOr<DefectWorkaround> work_around_known_defects(const Graph& graph);

}  // namespace kiln::lower_detail
