// kiln/core/exit_codes.h: the CLI's documented exit codes (README "Exit codes"). Extend deliberately.
#pragma once

#include "kiln/core/status.h"

namespace kiln {

enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,    // a numerical check, verify or policy check failed
  kExitBadInput = 2,       // bad spec, flag, file or usage
  kExitEnvironment = 3,    // no GPU, wrong driver, unsupported device, missing library
  kExitCorruption = 4,     // a corrupt store record, bundle or file
  kExitNotSupported = 5,   // cuDNN cannot build or run this graph / engine configuration
  kExitStalePlan = 6,      // a stored plan's environment does not pass its policy (policy = fail)
  kExitNewerVersion = 7,   // a store or bundle made by a newer Kiln: upgrade Kiln (or use another store)
  kExitInternal = 10,      // a bug: please report
  kExitInterrupted = 130,  // Ctrl-C; finished work was kept
};

inline int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kCheckFailed: return kExitCheckFailed;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound: return kExitBadInput;
    case StatusCode::kUnavailable: return kExitEnvironment;
    case StatusCode::kCorruption: return kExitCorruption;
    case StatusCode::kNotSupported: return kExitNotSupported;
    case StatusCode::kFailedPrecondition: return kExitStalePlan;
    case StatusCode::kCancelled: return kExitInterrupted;
    case StatusCode::kNewerVersion: return kExitNewerVersion;
    case StatusCode::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

}  // namespace kiln
