#include "kiln/core/printable.h"

#include <cstdio>

namespace kiln {

std::string printable(const std::string& s) {
  std::string out;
  char buf[16];
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const auto c1 = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    const auto c2 = i + 2 < s.size() ? static_cast<unsigned char>(s[i + 2]) : 0;
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == 0xc2 && c1 >= 0x80 && c1 <= 0x9f) {  // U+0080..U+009F
      std::snprintf(buf, sizeof buf, "\\u%04x", c1);
      out += buf;
      i += 1;
    } else if (c == 0xe2 && ((c1 == 0x80 && c2 >= 0xaa && c2 <= 0xae) || (c1 == 0x81 && c2 >= 0xa6 && c2 <= 0xa9))) {
      std::snprintf(buf, sizeof buf, "\\u%04x", 0x2000 | ((c1 & 0x3f) << 6) | (c2 & 0x3f));  // U+202A.., U+2066..
      out += buf;
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string printable_lines(const std::string& s) {
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t nl = s.find('\n', start);
    out += printable(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) return out;
    out += '\n';
    start = nl + 1;
  }
}

}  // namespace kiln
