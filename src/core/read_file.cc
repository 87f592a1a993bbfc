// read_file (kiln/core/read_file.h).
#include "kiln/core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

namespace kiln {

namespace {
constexpr const char* kOverLimit = " bytes, over the limit";

constexpr long kPipefsMagic = 0x50495045;  // statfs f_type of an anonymous pipe (linux/magic.h PIPEFS_MAGIC)

// The refusals by kind, for a file already stat'ed (by path before the open, by descriptor after it; `fd` is
// the open descriptor, or -1 before the open).
// - A pipe is read only when it is anonymous (a shell's `<(cat FILE)` or `cat FILE |`, by whatever path:
//   /dev/stdin, /dev/fd/N, a link to one): a named pipe (FIFO) on disk would wait for a writer, forever when
//   none comes. Before the open, the path alone cannot tell, so the check waits for the descriptor.
// - A device or socket is read only through the process's own descriptors (/dev/stdin, /dev/fd/N): a device
//   by its name (/dev/zero, /dev/ptmx) gives no spec, and some never answer.
Status check_kind(const struct stat& st, const std::string& path, const ReadFileOptions& o, int fd) {
  const std::string name = o.what + " '" + path + "'";
  if (S_ISDIR(st.st_mode)) return invalid_argument(name + " is a folder, not a file");
  if (S_ISREG(st.st_mode)) return Status::ok();
  if (o.regular_only) return invalid_argument(name + " is not a regular file (a pipe, socket or device)");
  if (S_ISFIFO(st.st_mode)) {
    if (fd < 0) return Status::ok();
    struct statfs fs {};
    if (::fstatfs(fd, &fs) == 0 && static_cast<long>(fs.f_type) == kPipefsMagic) return Status::ok();
    return invalid_argument(name + " is a named pipe (FIFO): reading it would wait for a writer, forever when " +
                            "none comes; give a file, or a pipe the shell opens, as in <(cat FILE)");
  }
  if (!names_open_descriptor(path))
    return invalid_argument(name + " is a device or socket, not a file; give a file, or a pipe the shell opens, " +
                            "as in <(cat FILE)");
  return Status::ok();
}

// Owns a descriptor: closed when it goes out of scope.
struct Fd {
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int fd;
};

// Why a path could not be opened or read, from errno: NotFound when nothing is there, else bad input with the
// system's reason (a file this user may not read is not a missing one).
Status unreadable(const std::string& name, int err) {
  const std::string why = name + " cannot be read: " + std::strerror(err);
  return err == ENOENT || err == ENOTDIR ? not_found(why) : invalid_argument(why);
}

// "N" is a descriptor number: digits only, at least one.
bool is_number(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

StatusOr<bool> path_exists(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return false;
  return invalid_argument(what + " '" + path + "' cannot be reached: " + std::strerror(err));
}

bool names_open_descriptor(const std::string& path) {
  if (path == "/dev/stdin") return true;
  for (const char* folder : {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"}) {
    const std::string f = folder;
    if (path.compare(0, f.size(), f) == 0 && is_number(path.substr(f.size()))) return true;
  }
  return false;
}

Status check_readable_file(const std::string& path, const ReadFileOptions& o) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::ok();
  KILN_RETURN_IF_ERROR(check_kind(st, path, o, -1));
  if (!S_ISFIFO(st.st_mode)) return Status::ok();
  // A pipe: opened without waiting (a named one opens at once for reading) to tell which kind it is.
  const Fd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.fd < 0) return Status::ok();  // the read says why
  return check_kind(st, path, o, f.fd);
}

StatusOr<std::string> read_file(const std::string& path, const ReadFileOptions& o) {
  if (!o.regular_only && o.max_bytes < 0)
    return internal_error("read_file: reading what may be a device needs a limit (" + path + ")");
  const std::string name = o.what + " '" + path + "'";
  KILN_RETURN_IF_ERROR(check_readable_file(path, o));
  // Opened without waiting: a FIFO that took the path's place since the check would otherwise block the open
  // until a writer comes. What was opened is checked again, then read blocking as usual.
  const Fd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.fd < 0) return unreadable(name, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return unreadable(name, errno);
  KILN_RETURN_IF_ERROR(check_kind(st, path, o, f.fd));
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return unreadable(name, errno);
  std::string text;
  std::vector<char> piece(1 << 16);
  for (;;) {
    const ssize_t n = ::read(f.fd, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unreadable(name, errno);
    if (n == 0) break;
    text.append(piece.data(), static_cast<size_t>(n));
    if (o.max_bytes >= 0 && text.size() > static_cast<size_t>(o.max_bytes))
      return invalid_argument(name + " has more than " + std::to_string(o.max_bytes) + kOverLimit);
  }
  return text;
}

bool is_over_read_limit(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().find(kOverLimit) != std::string::npos &&
         s.message().find(" has more than ") != std::string::npos;
}

}  // namespace kiln
