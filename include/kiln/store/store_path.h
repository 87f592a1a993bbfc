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
// A PostgreSQL location (is_server_location) is no file: the store is opened, as `options` says, and its status
// returned (Unavailable naming the location, password hidden, when the server cannot be reached; InvalidArgument
// for a schema holding tables that are not a Kiln store). Opened to write, an empty schema gets the store's
// tables, as a new SQLite store would be made at the first write.
Status check_store_destination(const std::string& path, const StoreOpenOptions& options = {});

// Whether a store location names a PostgreSQL server rather than a file: a postgresql:// or postgres:// URI, or a
// libpq key=value connection string (host=, hostaddr=, dbname=, service=, user= or port= first).
bool is_server_location(const std::string& location);

// The location as messages show it: a PostgreSQL location with its password replaced by *** (a URI's
// "user:secret@", a password=... pair); a file path as it is.
std::string shown_location(const std::string& location);

}  // namespace kiln
