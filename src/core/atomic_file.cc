// Atomic, non-clobbering file writes (kiln/core/atomic_file.h).
#include "kiln/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A failure caused by the path the user gave (missing folder, no permission, read-only file system) is bad
// input (exit 2); anything else (disk full, I/O error) is the environment (exit 3).
Status errno_status(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case EACCES:
    case EPERM:
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case EROFS:
    case ENAMETOOLONG:
    case ELOOP:
    case EEXIST: return invalid_argument(msg);
    default: return unavailable(msg);
  }
}

// The path with its folder made absolute and symlinks in it resolved; the last component kept as written
// when it does not exist (so that a protected file that is not there yet still compares equal by name).
std::string normal_name(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return fs::absolute(path, ec).lexically_normal().string();
  return p.string();
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// InvalidArgument when `path` is, or names, one of the protected files.
Status check_protected(const std::string& path, const FileWriteOptions& o) {
  if (o.protected_paths.empty()) return Status::ok();
  struct stat dest {};
  const bool dest_exists = ::stat(path.c_str(), &dest) == 0;  // follows a symlink to its target
  const std::string dest_name = normal_name(path);
  for (const std::string& p : o.protected_paths) {
    if (p.empty()) continue;
    struct stat prot {};
    const bool same =
        (dest_exists && ::stat(p.c_str(), &prot) == 0 && same_file(dest, prot)) || dest_name == normal_name(p);
    if (same)
      return invalid_argument("refusing to write the " + o.what + " to " + path + ": it is " + p + ", " +
                              o.protected_what + " (never written over, --force or not)");
  }
  return Status::ok();
}

Status fsync_path(const std::string& path, int flags, const std::string& what) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open " + what + " " + path + " to sync it");
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // A folder on a file system that cannot sync folders says EINVAL: the rename is done, nothing to undo.
  if (rc != 0 && !(err == EINVAL && (flags & O_DIRECTORY)))
    return errno_status(err, "cannot sync " + what + " " + path);
  return Status::ok();
}

// Moves `tmp` to `path` without replacing an existing file: renameat2(RENAME_NOREPLACE) where the file
// system has it, else link + unlink (link never replaces), else a last look before a plain rename.
Status publish_no_replace(const std::string& tmp, const std::string& path, const FileWriteOptions& o) {
  auto exists = [&] {
    return invalid_argument(o.what + " " + path + " already exists (pass --force to write over it)");
  };
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return Status::ok();
  if (errno == EEXIST) return exists();
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return errno_status(errno, "cannot move the " + o.what + " into place at " + path);
  if (::link(tmp.c_str(), path.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return Status::ok();
  }
  if (errno == EEXIST) return exists();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return exists();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return errno_status(errno, "cannot move the " + o.what + " into place at " + path);
  return Status::ok();
}

}  // namespace

std::string parent_folder(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

Status check_parent_folder(const std::string& path) {
  const std::string folder = parent_folder(path);
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return invalid_argument("folder " + folder + " does not exist");
    return errno_status(errno, "cannot look at folder " + folder);
  }
  if (!S_ISDIR(st.st_mode)) return invalid_argument(folder + " is not a folder");
  return Status::ok();
}

Status check_destination(const std::string& path, const FileWriteOptions& o) {
  if (path.empty()) return invalid_argument("no file named for the " + o.what);
  KILN_RETURN_IF_ERROR(check_protected(path, o));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return invalid_argument(o.what + " destination " + path + " is a folder, not a file");
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOTDIR) return invalid_argument(o.what + " destination " + path + ": a folder on its path is a file");
    if (errno != ENOENT) return errno_status(errno, "cannot reach the " + o.what + " destination " + path);
    if (!o.create_folders) return check_parent_folder(path).with_context(o.what + " destination " + path);
    return Status::ok();
  }
  // --force replaces a regular file; a device, pipe, socket or symbolic link is never replaced by a file
  // (`--force` to /dev/null once made it a regular file).
  if (!S_ISREG(st.st_mode))
    return invalid_argument(o.what + " destination " + path + " is not a regular file (" +
                            (S_ISLNK(st.st_mode) ? "a symbolic link" : "a device, pipe or socket") +
                            "): refusing to replace it, --force or not");
  if (!o.overwrite) return invalid_argument(o.what + " " + path + " already exists (pass --force to write over it)");
  return Status::ok();
}

Status write_file_atomically(const std::string& path, const FileWriteOptions& o,
                             const std::function<Status(const std::string& temp_path)>& fill) {
  KILN_RETURN_IF_ERROR(check_destination(path, o));
  const std::string folder = parent_folder(path);
  std::error_code ec;
  if (o.create_folders && !fs::exists(folder, ec)) {
    fs::create_directories(folder, ec);
    if (ec) return errno_status(ec.value(), "cannot create folder " + folder + " for the " + o.what);
  }

  // A new, empty temporary file beside the destination (same file system, so the rename is atomic), made
  // with the usual mode (0666 less the umask) that the destination should have.
  static std::atomic<unsigned> counter{0};
  const std::string stem =
      folder + "/." + fs::path(path).filename().string() + ".kiln-tmp-" + std::to_string(::getpid());
  std::string tmp;
  for (int attempt = 0;; ++attempt) {
    tmp = stem + "-" + std::to_string(counter++);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      break;
    }
    if (errno != EEXIST || attempt > 1000)
      return errno_status(errno, "cannot create a temporary file in " + folder + " for the " + o.what);
  }

  auto fail = [&](Status s) {
    ::unlink(tmp.c_str());
    return s;
  };
  Status filled = fill(tmp);
  if (!filled.is_ok()) return fail(filled);
  Status synced = fsync_path(tmp, O_RDONLY, o.what);
  if (!synced.is_ok()) return fail(synced);
  // The destination may have changed while the contents were made: look again at what must not be replaced.
  Status prot = check_protected(path, o);
  if (!prot.is_ok()) return fail(prot);
  if (o.overwrite) {
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      return fail(errno_status(errno, "cannot move the " + o.what + " into place at " + path));
  } else {
    Status published = publish_no_replace(tmp, path, o);
    if (!published.is_ok()) return fail(published);
  }
  return fsync_path(folder, O_RDONLY | O_DIRECTORY, "folder");
}

Status write_file_atomically(const std::string& path, std::string_view bytes, const FileWriteOptions& o) {
  return write_file_atomically(path, o, [&](const std::string& tmp) -> Status {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return errno_status(errno, "cannot open " + tmp + " for writing");
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        return errno_status(err, "cannot write the " + o.what + " " + path);
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) return errno_status(errno, "cannot write the " + o.what + " " + path);
    return Status::ok();
  });
}

}  // namespace kiln
