#include "kiln/core/printable.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Printable, EscapesControlsAndKeepsText) {
  EXPECT_EQ(printable("plain name_1"), "plain name_1");
  EXPECT_EQ(printable("a\nb"), "a\\x0ab");
  EXPECT_EQ(printable("\x1b[2Jred\x7f"), "\\x1b[2Jred\\x7f");
  EXPECT_EQ(printable("\xc2\x9b"
                      "31m"),
            "\\u009b31m");                              // C1 CSI
  EXPECT_EQ(printable("x\xe2\x80\xaey"), "x\\u202ey");  // right-to-left override
  EXPECT_EQ(printable("\xe2\x81\xa6"
                      "z"),
            "\\u2066z");                                                         // left-to-right isolate
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // other UTF-8 kept
  EXPECT_EQ(printable(""), "");
  EXPECT_EQ(printable("\xc2"), "\xc2");  // a cut sequence is not read past the end
}

}  // namespace
}  // namespace kiln
