#include "kiln/core/strings.h"

#include <charconv>

namespace kiln {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& s : parts) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string shortest_number(double v) {
  char buf[32];  // the longest shortest form of a double is 24 characters ("-2.2250738585072014e-308")
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace kiln
