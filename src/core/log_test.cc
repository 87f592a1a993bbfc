// Leveled logging (kiln/core/log.h): a message above the level is dropped without its text being built, a
// sink installed by a service receives what would go to stderr, and removing it restores stderr.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kiln/core/log.h"

namespace kiln {
namespace {

// Restores the level and the sink a test changed.
class Log : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = log_level(); }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(saved_);
  }
  LogLevel saved_ = LogLevel::kWarn;
};

TEST_F(Log, TheLevelFiltersAndTheSinkReceivesWhatPasses) {
  std::vector<std::pair<LogLevel, std::string>> got;
  set_log_sink([&](LogLevel l, const std::string& m) { got.emplace_back(l, m); });
  set_log_level(LogLevel::kWarn);
  EXPECT_EQ(log_level(), LogLevel::kWarn);
  KILN_LOG(kError, "error " << 1);
  KILN_LOG(kWarn, "warn " << 2);
  KILN_LOG(kInfo, "info " << 3);
  KILN_LOG(kDebug, "debug " << 4);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (std::pair<LogLevel, std::string>{LogLevel::kError, "error 1"}));
  EXPECT_EQ(got[1], (std::pair<LogLevel, std::string>{LogLevel::kWarn, "warn 2"}));

  got.clear();
  set_log_level(LogLevel::kDebug);
  KILN_LOG(kInfo, "info");
  KILN_LOG(kDebug, "debug");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].first, LogLevel::kDebug);

  got.clear();
  set_log_level(LogLevel::kError);
  KILN_LOG(kWarn, "warn");
  EXPECT_TRUE(got.empty());
}

// -v costs nothing when off: the streamed expression is not evaluated for a dropped message.
TEST_F(Log, ADroppedMessageIsNotBuilt) {
  set_log_sink([](LogLevel, const std::string&) {});
  set_log_level(LogLevel::kWarn);
  int built = 0;
  auto text = [&] {
    ++built;
    return std::string("costly");
  };
  KILN_LOG(kDebug, text());
  KILN_LOG(kInfo, text());
  EXPECT_EQ(built, 0);
  KILN_LOG(kWarn, text());
  EXPECT_EQ(built, 1);
}

TEST_F(Log, WithoutASinkAMessageGoesToStderrNamingItsLevel) {
  set_log_level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::kWarn, "store miss");
  KILN_LOG(kInfo, "plan " << 7 << " loaded");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "kiln warn: store miss\nkiln info: plan 7 loaded\n");

  std::vector<std::string> got;
  set_log_sink([&](LogLevel, const std::string& m) { got.push_back(m); });
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::kError, "to the sink");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(got, std::vector<std::string>{"to the sink"});

  set_log_sink(nullptr);  // stderr again
  ::testing::internal::CaptureStderr();
  log_message(LogLevel::kError, "back");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "kiln error: back\n");
  EXPECT_EQ(got.size(), 1u);
}

}  // namespace
}  // namespace kiln
