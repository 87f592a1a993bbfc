#include "kiln/core/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kCheckFailed: return "CheckFailed";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kNewerVersion: return "NewerVersion";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

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
