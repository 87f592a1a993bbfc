// Small string helpers shared by the layers.
#pragma once

#include <string>
#include <vector>

namespace kiln {

// The parts with `sep` between them ("" for none).
std::string join(const std::vector<std::string>& parts, const char* sep);

// The shortest text that reads back as exactly `v` ("0.1", as an author wrote it; "1e-46").
std::string shortest_number(double v);

}  // namespace kiln
