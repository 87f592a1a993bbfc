#include "commands.h"

#include <cstdint>
#include <limits>
#include <map>
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

}  // namespace kiln::cli
