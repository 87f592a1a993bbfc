// kiln/lower/plan_words.h: Kiln's own words for cuDNN's failure to offer or build a plan for a graph.
//
// cuDNN Frontend's messages are written for its developers: "No valid engine configs for ___" (the
// underscores are its operation-graph tag) followed by the backend's log, or "cuda_get_device(&device)
// failed with ...", C++ and all. Commands say instead what failed, for which graph, and why, in one line;
// the frontend's text goes to the Status's trace (`kiln -v` prints it).
#pragma once

#include <string>

#include "kiln/core/status.h"

namespace kiln {

// `s` reworded when it carries one of the frontend's messages above (code and trace kept; the original
// message added to the trace); otherwise `s` unchanged. `graph_name` is the graph the plan was for.
//   "No valid engine configs for ..." -> "cuDNN offers no engine configuration for graph 'G': <why>", where
//     <why> says when the engines are runtime-compiled and the CUDA driver library is missing
//     (RUNTIME_PREREQUISITE_MISSING in cuDNN's log);
//   "<call>(...) failed with <reason>" -> the call replaced by "a CUDA query inside cuDNN Frontend failed".
Status plan_failure_in_words(const Status& s, const std::string& graph_name);

// The same for a StatusOr: its value, or its error in words.
template <typename T>
StatusOr<T> with_plan_words(StatusOr<T> r, const std::string& graph_name) {
  if (r.is_ok()) return r;
  return plan_failure_in_words(r.status(), graph_name);
}

}  // namespace kiln
