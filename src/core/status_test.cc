// StatusOr: a value reads back; reading the value of an error aborts with the status named, by every
// accessor (value, *, ->), instead of reading an empty optional.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/status.h"

namespace kiln {
namespace {

StatusOr<std::string> make(bool ok) {
  if (ok) return std::string("plan");
  return not_found("no plan 'x' in the store");
}

TEST(StatusOr, ValueOfASuccessReadsBack) {
  StatusOr<std::string> s = make(true);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s.value(), "plan");
  EXPECT_EQ(*s, "plan");
  EXPECT_EQ(s->size(), 4u);
  EXPECT_EQ(std::move(s).value(), "plan");
}

TEST(StatusOrDeathTest, ValueOfAnErrorAbortsNamingTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* expected = "StatusOr::value\\(\\) of an error: NotFound: no plan 'x' in the store";
  EXPECT_DEATH({ (void)make(false).value(); }, expected);
  EXPECT_DEATH(
      {
        StatusOr<std::string> s = make(false);
        (void)*s;
      },
      expected);
  EXPECT_DEATH(
      {
        StatusOr<std::string> s = make(false);
        (void)s->size();
      },
      expected);
  EXPECT_DEATH(
      {
        const StatusOr<std::string> s = make(false);
        (void)s.value();
      },
      expected);
}

}  // namespace
}  // namespace kiln
