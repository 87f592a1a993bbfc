// kiln/tune/build_helper_options.h: which build helpers a tune starts (TuneOptions::build_helpers). The helpers
// themselves, their channel and the pool: kiln/tune/build_helpers.h (docs/measure.md "Build helpers").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

struct BuildHelperOptions {
  std::string executable;         // empty: no helpers (every build on the tuner's threads)
  std::vector<std::string> args;  // after the executable: {"build-helper"} for the kiln CLI
  int processes = 0;              // at most this many helpers; 0: none
  // Writes a graph as a spec (kiln/spec/spec.h graph_to_spec_json) for the helper to parse: set by the caller
  // that knows the spec layer (the CLI); not carried in a tune worker's request (the worker sets it again).
  // Unset: no helpers.
  std::function<StatusOr<std::string>(const Graph&)> write_spec;
};

}  // namespace kiln
