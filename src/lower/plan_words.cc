#include "kiln/lower/plan_words.h"

#include <cctype>

namespace kiln {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Where a call "name(...)" that ends right before `pos` starts, or npos.
size_t call_start_before(const std::string& m, size_t pos) {
  if (pos == 0 || m[pos - 1] != ')') return std::string::npos;
  size_t open = m.rfind('(', pos - 1);
  if (open == std::string::npos || open == 0) return std::string::npos;
  size_t start = open;
  while (start > 0 &&
         (std::isalnum(static_cast<unsigned char>(m[start - 1])) || m[start - 1] == '_' || m[start - 1] == ':'))
    --start;
  return start < open ? start : std::string::npos;
}

}  // namespace

Status plan_failure_in_words(const Status& s, const std::string& graph_name) {
  if (s.is_ok()) return s;
  const std::string& m = s.message();
  std::string words;
  if (m.find("No valid engine configs for") != std::string::npos) {
    words = "cuDNN offers no engine configuration for graph '" + graph_name + "'";
    if (m.find("RUNTIME_PREREQUISITE_MISSING") != std::string::npos)
      words += ": the engines it has for this graph are compiled at run time, which needs the CUDA driver "
               "library, and there is none here (build this graph on a machine with a GPU)";
    else words += ": its heuristics returned none for this graph on this device";
    // Lowering names the engine coverage gap when its registry knows the graph: kept.
    if (size_t gap = m.find(" [engine coverage gap "); gap != std::string::npos) words += m.substr(gap);
  } else if (size_t with = m.find(" failed with "); with != std::string::npos) {
    size_t start = call_start_before(m, with);
    if (start == std::string::npos) return s;
    std::string reason = first_line(m.substr(with + 13));
    words = m.substr(0, start) + "a CUDA query inside cuDNN Frontend failed: " + reason;
    if (reason.find("driver version is insufficient") != std::string::npos)
      words += " (cuDNN Frontend asks the CUDA device about this graph even when building for a recorded "
               "profile, and there is no usable one here)";
  } else {
    return s;
  }
  Status out(s.code(), words);
  if (!s.trace().empty()) out.add_trace(s.trace());
  out.add_trace("cuDNN Frontend said: " + m);
  return out;
}

}  // namespace kiln
