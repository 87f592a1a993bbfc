#include "kiln/core/strings.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Strings, JoinPutsTheSeparatorBetweenParts) {
  EXPECT_EQ(join({}, "; "), "");
  EXPECT_EQ(join({"a"}, "; "), "a");
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
}

}  // namespace
}  // namespace kiln
