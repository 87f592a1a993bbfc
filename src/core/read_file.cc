// read_file (kiln/core/read_file.h).
#include "kiln/core/read_file.h"

#include <sys/stat.h>

#include <fstream>
#include <vector>

namespace kiln {

namespace {
constexpr const char* kOverLimit = " bytes, over the limit";
}  // namespace

StatusOr<std::string> read_file(const std::string& path, const ReadFileOptions& o) {
  if (!o.regular_only && o.max_bytes < 0)
    return internal_error("read_file: reading what may be a device needs a limit (" + path + ")");
  const std::string name = o.what + " '" + path + "'";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return invalid_argument(name + " is a folder, not a file");
    if (o.regular_only && !S_ISREG(st.st_mode))
      return invalid_argument(name + " is not a regular file (a pipe, socket or device)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(name + " cannot be read");
  std::string text;
  std::vector<char> piece(1 << 16);
  while (in.read(piece.data(), static_cast<std::streamsize>(piece.size())) || in.gcount() > 0) {
    text.append(piece.data(), static_cast<size_t>(in.gcount()));
    if (o.max_bytes >= 0 && text.size() > static_cast<size_t>(o.max_bytes))
      return invalid_argument(name + " has more than " + std::to_string(o.max_bytes) + kOverLimit);
  }
  if (in.bad()) return not_found(name + " cannot be read");
  return text;
}

bool is_over_read_limit(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().find(kOverLimit) != std::string::npos &&
         s.message().find(" has more than ") != std::string::npos;
}

}  // namespace kiln
