#include "kiln/core/strings.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kiln {
namespace {

TEST(Strings, JoinPutsTheSeparatorBetweenParts) {
  EXPECT_EQ(join({}, "; "), "");
  EXPECT_EQ(join({"a"}, "; "), "a");
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
}

TEST(Strings, ShortestNumberReadsBackAsTheSameDouble) {
  EXPECT_EQ(shortest_number(0.1), "0.1");
  EXPECT_EQ(shortest_number(0.25), "0.25");
  EXPECT_EQ(shortest_number(1e-46), "1e-46");
  EXPECT_EQ(shortest_number(0.99999999), "0.99999999");
  EXPECT_EQ(shortest_number(-2.2250738585072014e-308), "-2.2250738585072014e-308");
  for (double v : {0.1 + 0.2, 1.0 / 3.0, 5e-324}) EXPECT_EQ(std::strtod(shortest_number(v).c_str(), nullptr), v);
}

}  // namespace
}  // namespace kiln
