// The engine coverage registry: graphs that are valid but for which cuDNN (on the versions named) offers no
// engine configuration in any layout Kiln's canonical rules can re-describe them in. When cuDNN's heuristics
// return nothing, lowering asks this table why, so the refusal names the limit ("reduction_not_innermost: ...")
// instead of a bare "no engine configuration". Each entry has the fields of a known defect (the cuDNN versions
// it was seen on, the evidence, an example spec and the GPU test that re-checks it on every cuDNN); a GPU test
// reports an entry whose example cuDNN now runs, so the registry follows cuDNN instead of rotting.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::lower_detail {

struct CoverageGap {
  const char* id;                // stable name, e.g. "reduction_not_innermost"
  const char* summary;           // what cuDNN does not run
  std::vector<int64_t> seen_on;  // cuDNN versions (cudnnGetVersion()) it was confirmed on
  const char* evidence;          // how it was confirmed
  const char* example_spec;      // a spec (JSON) cuDNN offers nothing for; the tests use it
  // Where `graph` (validated, as the caller wrote it) falls in the gap ("node 'r' (reduce_sum): axes [0] of
  // [4,64,128]"), or "".
  std::string (*find)(const Graph& graph);
};

const std::vector<CoverageGap>& engine_coverage_gaps();

// "<id>: <where>: <summary> (seen on cuDNN <versions>)" for the first entry matching `graph`, or "".
std::string name_engine_coverage_gap(const Graph& graph);

}  // namespace kiln::lower_detail
