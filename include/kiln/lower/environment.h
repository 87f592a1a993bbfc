// kiln/lower/environment.h: collecting this process's environment fingerprint (kiln/core/fingerprint.h).
// Defined in the lower layer because it asks the loaded cuDNN (and the frontend) for their versions.
#pragma once

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

}  // namespace kiln
