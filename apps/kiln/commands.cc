#include "commands.h"

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

}  // namespace kiln::cli
