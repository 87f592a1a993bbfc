// kiln/core/read_file.h: reading a whole file a user named (a spec, a trace, a recorded-shapes file, a
// device profile, a worker request), the one way Kiln does it: only regular files (a FIFO or a device would
// block the read or never end), in pieces, never past a limit. Writing is kiln/core/atomic_file.h.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

struct ReadFileOptions {
  // What the file is, for messages ("trace", "device profile").
  std::string what = "file";
  // The most bytes read (< 0: no limit). A longer file is refused as soon as the limit is passed, before the
  // rest is read.
  int64_t max_bytes = -1;
  // Refuse what is not a regular file (a pipe, socket or device). Off: also read an anonymous pipe, by
  // whatever path (process substitution `<(cat spec.json)`, `cat spec.json | kiln validate /dev/stdin`, a link
  // to one), and a device or socket named by a descriptor this process holds (names_open_descriptor), up to
  // max_bytes (which must then be set). A FIFO on disk (mkfifo), even through /dev/fd/N, and a device by its
  // name (/dev/zero, /dev/ptmx) are refused either way: the first waits for a writer, forever when none
  // comes, and some devices never answer.
  bool regular_only = true;
};

// The file's bytes. NotFound "<what> '<path>' cannot be read: No such file or directory" when there is none,
// InvalidArgument "... cannot be read: <the system's reason>" when it cannot be opened or read otherwise
// (Permission denied, Too many levels of symbolic links);
// InvalidArgument "<what> '<path>' is a folder, not a file", "... is not a regular file (a pipe, socket or
// device)", "... is a named pipe (FIFO) ...", or "... has more than N bytes, over the limit". Never waits
// for a FIFO's writer: the open does not block, and what was opened is checked again.
StatusOr<std::string> read_file(const std::string& path, const ReadFileOptions& options = {});

// What read_file refuses before it opens anything, for a caller that checks its files before other work:
// the InvalidArgument above for a folder, a FIFO on disk, or (regular_only) what is not a regular file.
// A path with nothing there passes (reading it says so).
Status check_readable_file(const std::string& path, const ReadFileOptions& options = {});

// Whether something is at `path` (following links): true, false when nothing is (ENOENT, or a folder on the
// way is missing), or InvalidArgument "<what> '<path>' cannot be reached: <the system's reason>" when it
// cannot be told (permission denied on a folder, a loop of symbolic links): never "missing" for those.
StatusOr<bool> path_exists(const std::string& path, const std::string& what);

// Whether `path` names a descriptor this process already holds: /dev/fd/N, /proc/self/fd/N,
// /proc/thread-self/fd/N, /dev/stdin. Such a pipe has its writer already (the shell's process
// substitution made both ends); a FIFO named on disk may never get one.
bool names_open_descriptor(const std::string& path);

// Whether `s` is read_file's refusal of a file longer than its limit (callers that word that themselves).
bool is_over_read_limit(const Status& s);

}  // namespace kiln
