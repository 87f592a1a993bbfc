#include "kiln/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("KILN_LOG");
  if (!v) return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  return LogLevel::kWarn;
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

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

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
