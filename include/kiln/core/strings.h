// Small string helpers shared by the layers.
#pragma once

#include <string>
#include <vector>

namespace kiln {

// The parts with `sep` between them ("" for none).
std::string join(const std::vector<std::string>& parts, const char* sep);

}  // namespace kiln
