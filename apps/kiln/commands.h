// The CLI's subcommands. Each registers its options on the app and returns the Status of its run;
// main() turns that Status into an exit code and one message.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>

#include "kiln/status.h"

namespace kiln::cli {

using Runner = std::function<Status()>;

// Each adds a subcommand to `app` and sets `*run` to its runner when the subcommand is chosen.
void add_doctor(CLI::App& app, Runner* run);

}  // namespace kiln::cli
