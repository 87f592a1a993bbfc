// `kiln tune`'s crash isolation (kiln/tune/tune_supervisor.h): the candidates of one graph are built, checked
// and timed in a `kiln tune-worker` process started fresh from this binary; a candidate that kills it is
// reported Failed with the signal and a new worker goes on.
#pragma once

#include "kiln/graph/graph.h"
#include "kiln/tune/build_helper_options.h"
#include "kiln/tune/tuner.h"

namespace kiln::cli {

// tune_graph's result, supervised. Test hook: KILN_TEST_CRASH=<identity>:<build|run> in the environment
// makes the worker die by SIGSEGV when it builds or runs that candidate.
StatusOr<TuneResult> tune_isolated(const Graph& graph, const TuneOptions& options);

// Build helpers started from this binary (`kiln build-helper`), `processes` of them; < 0: as many as
// default_build_helper_processes() says; 0: none (every build on the tuner's threads).
BuildHelperOptions cli_build_helpers(int processes);

}  // namespace kiln::cli
