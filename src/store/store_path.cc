// check_store_destination, is_server_location, shown_location (kiln/store/store_path.h).
#include "kiln/store/store_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include "kiln/core/atomic_file.h"
#include "kiln/core/read_file.h"
#include "store/database.h"
#include "store/pg_conn.h"

namespace kiln {

Status check_store_destination(const std::string& path, const StoreOpenOptions& options) {
  if (path.empty()) return invalid_argument("plan store: the path is empty");
  // A server holds no file to look at: only connecting says whether it is reachable and holds a Kiln store.
  // An empty schema is a store to be made, as a missing file is: the command's own open makes it (and says so
  // when this role may not).
  if (is_server_location(path)) {
    Status s = PlanStore::open(path, options).status();
    return options.read_only && store::Database::is_empty(s) ? Status::ok() : s;
  }
  KILN_ASSIGN_OR_RETURN(bool exists, path_exists(path, "plan store"));
  struct stat st {};
  if (exists && ::stat(path.c_str(), &st) == 0 && !(S_ISREG(st.st_mode) && st.st_size == 0)) {
    // An existing store is read as one now (a file that is not a Kiln store is refused here, not after the GPU);
    // an empty file is made a store, as a missing one is.
    return PlanStore::open(path, options).status();
  }
  KILN_RETURN_IF_ERROR(check_parent_folder(path).with_context("plan store " + path));
  // To be made there: a folder this user cannot write is refused now, not after the GPU work.
  const std::string folder = parent_folder(path);
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return invalid_argument("plan store " + path + ": folder " + folder +
                            " cannot be written by this user, so the store cannot be made there");
  return Status::ok();
}

bool is_server_location(const std::string& location) { return store::is_postgres_location(location); }

std::string shown_location(const std::string& location) {
  return is_server_location(location) ? store::redact_location(location) : location;
}

}  // namespace kiln
