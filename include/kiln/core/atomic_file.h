// kiln/core/atomic_file.h: writing a file a user named (a bundle, a device profile, a saved output) without
// ever leaving it half-written, writing over an existing file unasked, or writing over a file that must
// never be replaced (the plan store a command reads, and its -wal/-shm/-journal companions).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln {

struct FileWriteOptions {
  // Replace an existing destination (a command's --force). Off: an existing one is refused.
  bool overwrite = false;
  // Files that are never written over, even with `overwrite`: compared by identity (st_dev and st_ino, so
  // another path, a hard link or a symlink to one of them is caught too) and by name (so that one which does
  // not exist right now, like a store's -wal file, is not created either).
  std::vector<std::string> protected_paths;
  // What the protected files are, for the message refusing one ("the plan store this export reads").
  std::string protected_what = "a file this command reads";
  // A short name of what is written, for messages: "bundle", "device profile", "output".
  std::string what = "file";
  // Create the destination's folder (and its parents) when missing.
  bool create_folders = true;
};

// Checks a destination before the work that fills it, so that a refusal costs nothing: InvalidArgument
// (exit 2) when the path is empty or a folder, names a protected file, or exists and overwrite is off.
// write_file_atomically checks again; this only lets a command refuse early.
Status check_destination(const std::string& path, const FileWriteOptions& options);

// Checks, before the work that writes it, that the folder a file at `path` goes in (its parent; "." for a
// bare name) exists and is a folder. InvalidArgument (exit 2) "folder F does not exist" or "F is not a
// folder", or, when the folder cannot be looked at (no permission), the system's reason naming it; the
// caller adds what the file is as context (the option that names it, "plan store P").
Status check_parent_folder(const std::string& path);
// The folder a file at `path` goes in: its parent, "." for a bare name.
std::string parent_folder(const std::string& path);

// Writes `path` atomically. `fill` writes the contents into a new, empty temporary file in the destination's
// folder (it is given that file's path and may write it by any means, SQLite included). The temporary file
// is then fsync'd and renamed into place (without replacing an existing file unless `overwrite`), and the
// folder is fsync'd. On any failure, the temporary file is removed and the destination is left as it was.
// A process killed in the middle leaves at most a hidden ".NAME.kiln-tmp-*" file beside the destination,
// never a partial destination.
Status write_file_atomically(const std::string& path, const FileWriteOptions& options,
                             const std::function<Status(const std::string& temp_path)>& fill);
// The same with the contents given as bytes.
Status write_file_atomically(const std::string& path, std::string_view bytes, const FileWriteOptions& options);

}  // namespace kiln
