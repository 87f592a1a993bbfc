// kiln/lower/environment.h: collecting this process's environment fingerprint (kiln/core/fingerprint.h).
// Defined in the lower layer because it asks the loaded cuDNN (and the frontend) for their versions.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"

namespace kiln {

// Collects the fingerprint of this process's environment: versions always, device fields when a GPU is
// present. Unavailable (with the fields that could be read still filled) when there is no GPU.
// `ordinal` picks the device.
struct EnvReport {
  EnvFingerprint fingerprint;
  Status device_status;  // OK, or why the device fields are empty
};
EnvReport collect_environment(int ordinal = 0);

// The cuBLASLt this process loaded (a source of matmul candidates: docs/measure.md "cuBLASLt's candidates and
// Kiln's own kernels"), for kiln doctor: its version (cublasLtGetVersion(), 130100 is 13.1.0) and where it came from.
// Not part of the fingerprint: a stored cuBLASLt plan carries the version that made it and is refused by another.
struct LibraryInfo {
  int64_t version = 0;
  std::string path;
};
LibraryInfo cublaslt_library();

}  // namespace kiln
