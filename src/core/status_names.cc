// StatusCode's names (kiln/core/status.h status_code_name), as an EnumName table.
#include <iterator>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"

namespace kiln {

namespace {

// Here rather than beside the enum: kiln/core/enum_names.h includes kiln/core/status.h (and status.cc does not
// include enum_names.h, so the two do not include each other).
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

}  // namespace kiln
