#include "kiln/core/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "kiln/core/enum_names.h"

namespace kiln {

namespace {

// Here rather than beside the enum: kiln/core/enum_names.h includes kiln/core/status.h.
constexpr EnumName<StatusCode> kStatusCodeNames[] = {{StatusCode::kOk, "OK"},
                                                     {StatusCode::kInvalidArgument, "InvalidArgument"},
                                                     {StatusCode::kNotFound, "NotFound"},
                                                     {StatusCode::kCorruption, "Corruption"},
                                                     {StatusCode::kNotSupported, "NotSupported"},
                                                     {StatusCode::kUnavailable, "Unavailable"},
                                                     {StatusCode::kFailedPrecondition, "FailedPrecondition"},
                                                     {StatusCode::kCheckFailed, "CheckFailed"},
                                                     {StatusCode::kCancelled, "Cancelled"},
                                                     {StatusCode::kNewerVersion, "NewerVersion"},
                                                     {StatusCode::kInternal, "Internal"}};
static_assert(std::size(kStatusCodeNames) == static_cast<size_t>(StatusCode::kInternal) + 1,
              "a StatusCode without a name");

}  // namespace

const char* status_code_name(StatusCode code) { return enum_name(kStatusCodeNames, code, "Unknown"); }

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
