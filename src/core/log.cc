#include "kiln/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kiln/core/enum_names.h"

namespace kiln {
namespace {

constexpr EnumName<LogLevel> kLogLevelNames[] = {
    {LogLevel::kError, "error"}, {LogLevel::kWarn, "warn"}, {LogLevel::kInfo, "info"}, {LogLevel::kDebug, "debug"}};

// KILN_LOG's level; warn when unset or not a level's name.
LogLevel level_from_env() {
  const char* v = std::getenv("KILN_LOG");
  if (!v) return LogLevel::kWarn;
  StatusOr<LogLevel> level = parse_enum(kLogLevelNames, v, "log level");
  return level.is_ok() ? *level : LogLevel::kWarn;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

std::function<void(LogLevel, const std::string&)>& sink_ref() {
  static std::function<void(LogLevel, const std::string&)> sink;
  return sink;
}

const char* level_name(LogLevel level) { return enum_name(kLogLevelNames, level); }

}  // namespace

void set_log_level(LogLevel level) { level_ref() = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(level_ref().load()); }

void set_log_sink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  sink_ref() = std::move(sink);
}

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (sink_ref()) {
    sink_ref()(level, message);
    return;
  }
  std::fprintf(stderr, "kiln %s: %s\n", level_name(level), message.c_str());
}

}  // namespace kiln
