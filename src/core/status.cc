#include "kiln/core/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace kiln {

void status_or_value_of_error(const Status& status) {
  std::fprintf(stderr, "kiln: StatusOr::value() of an error: %s\n", status.to_string().c_str());
  std::fflush(stderr);
  std::abort();
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  Status out(code_, context + ": " + message_);
  out.trace_ = trace_;
  return out;
}

Status annotate(Status s, const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  s.add_trace(std::string(expr) + " (" + base + ":" + std::to_string(line) + ")");
  return s;
}

}  // namespace kiln
