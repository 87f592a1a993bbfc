// kiln/core/log.h: leveled logging to stderr. The level comes from KILN_LOG (error|warn|info|debug),
// default warn, or from set_log_level(). Services can redirect by installing a sink.
#pragma once

#include <functional>
#include <sstream>
#include <string>

namespace kiln {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Replaces the stderr sink (nullptr restores it).
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);
void log_message(LogLevel level, const std::string& message);

}  // namespace kiln

#define KILN_LOG(level, expr)                                                                 \
  do {                                                                                        \
    if (static_cast<int>(::kiln::LogLevel::level) <= static_cast<int>(::kiln::log_level())) { \
      std::ostringstream kiln_log_os_;                                                        \
      kiln_log_os_ << expr;                                                                   \
      ::kiln::log_message(::kiln::LogLevel::level, kiln_log_os_.str());                       \
    }                                                                                         \
  } while (0)
