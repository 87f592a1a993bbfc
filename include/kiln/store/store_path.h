// A plan store's path checked before any GPU work, for the commands that open or make one (kiln run, kiln tune):
// bad input is exit 2 at once, not a late failure after the GPU was asked, and a refused run leaves nothing behind.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "kiln/store/plan_store.h"

namespace kiln {

// An existing store (not an empty file) must open as one, as `options` says (its own errors: Corruption,
// NewerVersion, InvalidArgument for a file that is not a Kiln store). A new one must be possible to make: the path
// reachable (InvalidArgument "plan store '<path>' cannot be reached: <the system's reason>" for a link loop, a
// folder this user may not enter), its folder present, and writable by this user. Nothing is created.
Status check_store_destination(const std::string& path, const StoreOpenOptions& options = {});

}  // namespace kiln
