// kiln/core/disposition.h: what happened to a candidate, a run or a stored plan's check, in the CUTLASS
// profiler's vocabulary. One enum for the tuner's candidates, the references' checks and the store's
// recorded verdict (kept as its name in the store's column). In core because the store, which sees only
// core and graph, reads and writes it.
#pragma once

#include <string>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"

namespace kiln {

enum class Disposition {
  kPassed,        // built, ran, and every output is within tolerance of the reference
  kIncorrect,     // ran, but some output is not (including NaN/Inf where the reference is finite)
  kNotSupported,  // cuDNN or the device refused the configuration (not an error of the candidate)
  kFailed,        // it should have run but did not (build, launch or runtime failure)
  kNotVerified,   // ran, numerics not checked (no reference available or none asked)
};

inline constexpr EnumName<Disposition> kDispositionNames[] = {
    {Disposition::kPassed, "Passed"},
    {Disposition::kIncorrect, "Incorrect"},
    {Disposition::kNotSupported, "NotSupported"},
    {Disposition::kFailed, "Failed"},
    {Disposition::kNotVerified, "NotVerified"},
};

// "Passed", "Incorrect", "NotSupported", "Failed", "NotVerified" ("Unknown" for a value out of range).
inline const char* disposition_name(Disposition d) { return enum_name(kDispositionNames, d, "Unknown"); }
// Inverse of disposition_name (exact match); InvalidArgument naming the text and the choices otherwise.
inline StatusOr<Disposition> parse_disposition(const std::string& name) {
  return parse_enum(kDispositionNames, name, "disposition");
}

}  // namespace kiln
