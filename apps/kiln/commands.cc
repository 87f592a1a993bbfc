#include "commands.h"

#include "kiln/core/read_file.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <string>

namespace kiln::cli {
namespace {
std::map<std::string, CommandAdder>& registry() {
  static std::map<std::string, CommandAdder> r;
  return r;
}
}  // namespace

bool register_command(const char* name, CommandAdder adder) {
  registry()[name] = adder;
  return true;
}

void add_registered_commands(CLI::App& app, Runner* run) {
  for (auto& [name, adder] : registry()) adder(app, run);
}

StatusOr<EnvFingerprint> read_environment_json(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  StatusOr<EnvFingerprint> fp = fingerprint_from_json(text);
  if (!fp.is_ok()) return invalid_argument("--environment-json " + path + ": " + fp.status().message());
  return fp;
}

CLI::Validator non_empty_path() {
  return CLI::Validator([](const std::string& v) { return v.empty() ? std::string("the path is empty") : ""; }, "");
}

CLI::Option* add_seed_option(CLI::App* sub, uint64_t* seed, const std::string& help) {
  // A transform, not a check: the value is rewritten as plain decimal, so that CLI11's own conversion (base
  // 0) never reads a leading zero as octal.
  CLI::Validator decimal(
      [](std::string& v) -> std::string {
        const std::string why = "must be a whole number from 0 to " +
                                std::to_string(std::numeric_limits<uint64_t>::max()) + ", got '" + v + "'";
        if (v.empty()) return why;
        uint64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') return why;
          const uint64_t digit = static_cast<uint64_t>(c - '0');
          if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) return why;
          n = n * 10 + digit;
        }
        v = std::to_string(n);
        return std::string();
      },
      "");  // the type (UINT) says it in --help
  return sub->add_option("--seed", *seed, help)->transform(decimal)->capture_default_str();
}

namespace {
// The value as a number, or nullopt when it is not one whole ("1x", "", "nan"); `whole`: an integer.
std::optional<double> read_number(const std::string& v, bool whole) {
  if (v.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  if (whole) {
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (errno != 0 || end != v.c_str() + v.size()) return std::nullopt;
    return static_cast<double>(n);
  }
  const double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || end != v.c_str() + v.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

std::string number_text(double d) {
  std::string s = std::to_string(d);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

CLI::Validator number_at_least(double min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        const std::optional<double> d = read_number(v, false);
        if (d && *d >= min) return "";
        return "must be a number >= " + number_text(min) + ", got '" + v + "'";
      },
      "NUMBER >= " + number_text(min));
}

void add_candidate_budget_flags(CLI::App* sub, bool* exhaustive, int* first, int* patience) {
  sub->add_flag("--exhaustive", *exhaustive,
                "Compile and time every runtime-compiled candidate (default: the candidate budget; docs/measure.md)");
  sub->add_option("--compile-first", *first,
                  "The candidate budget: runtime-compiled candidates always compiled, in rank order, per build lane "
                  "(default 4)")
      ->check(whole_number_at_least(1));
  sub->add_option("--compile-patience", *patience,
                  "The candidate budget: stop when none of the last N timed beat the best by more than the noise "
                  "(default 2)")
      ->check(whole_number_at_least(1));
}

void add_build_helpers_flag(CLI::App* sub, int* processes) {
  sub->add_option("--build-helpers", *processes,
                  "Processes that build runtime-compiled candidates beside the tune (cuDNN compiles one at a time per "
                  "process); 0: build them on the tune's own threads; -1 (default): half the hardware threads, at "
                  "most 6, none below 4")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const std::optional<double> d = read_number(v, true);
            if (d && *d >= -1 && *d <= 64) return "";
            return "must be a whole number in -1..64 (-1: the default, 0: none), got '" + v + "'";
          },
          "INT in -1..64"));
}

CLI::Validator whole_number_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        const std::optional<double> d = read_number(v, true);
        if (d && *d >= static_cast<double>(min)) return "";
        return "must be a whole number >= " + std::to_string(min) + ", got '" + v + "'";
      },
      "INT >= " + std::to_string(min));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const std::optional<double> d = read_number(v, false);
        if (d && *d > 0) return "";
        return "must be a number > 0, got '" + v + "'";
      },
      "NUMBER > 0");
}

CLI::Validator sm_version_option() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const std::optional<double> d = read_number(v, true);
        if (!d || *d < 0 || *d > 1000)
          return "must be an SM version written as major * 10 + minor (90 for SM 9.0), or 0 for any; got '" + v + "'";
        if (*d >= 1 && *d <= 9) {
          const std::string n = std::to_string(static_cast<int>(*d));
          return "'" + n + "' is ambiguous: an SM version is written as major * 10 + minor; write " + n + "0 for SM " +
                 n + ".0";
        }
        return "";
      },
      "SM");
}

}  // namespace kiln::cli
