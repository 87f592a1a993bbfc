#include "kiln/core/strings.h"

namespace kiln {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& s : parts) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace kiln
