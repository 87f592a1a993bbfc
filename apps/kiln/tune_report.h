// kiln tune's printing (cmd_tune.cc): the candidate list of --list and the report of one tuned graph.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/runtime/planner_jobs.h"

namespace kiln::cli {

// --list: every distinct engine configuration cuDNN offers for `g` (needs a GPU), as a table or JSON.
Status list_candidates(const Graph& g, bool json);

// The report of one tuned graph: a table and lines on stdout, or (json) one object appended to `all`.
void print_tuned(const std::string& spec, const Graph& g, const TunedGraph& t, const TuneJob& job, bool json,
                 nlohmann::json* all);

}  // namespace kiln::cli
