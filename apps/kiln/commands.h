// The CLI's subcommands. Each cmd_*.cc file registers itself with KILN_REGISTER_COMMAND: its function
// adds a subcommand (options and help) to the app and, when that subcommand is chosen, sets the runner.
// main() turns the runner's Status into an exit code (kiln/core/exit_codes.h) and one message.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"

namespace kiln::cli {

using Runner = std::function<Status()>;
using CommandAdder = void (*)(CLI::App& app, Runner* run);

// Registers an adder; returns true so it can initialise a static.
bool register_command(const char* name, CommandAdder adder);
// Calls every registered adder, in name order.
void add_registered_commands(CLI::App& app, Runner* run);

// Adds --seed to `sub`, read into *seed: a whole number from 0 to 2^64-1 in decimal (leading zeros are
// decimal too). Anything else ("-1", "1.5", "0x10", "1e3", "") is a usage error naming the option and the
// value (exit 2): CLI11 alone reads -1 as 2^64-1 and 010 as 8. No seed has a meaning beyond that range.
CLI::Option* add_seed_option(CLI::App* sub, uint64_t* seed, const std::string& help);

// A check for an option that names a file or folder: an empty value ("--store ''", an unset variable in a
// script) is a usage error, not "the option was not given" (exit 2, "--store: the path is empty").
CLI::Validator non_empty_path();
// The hidden testing flag --environment-json (kiln worker, kiln plans queue add): the environment of that
// fingerprint JSON file; InvalidArgument naming the flag and the file when it does not read as one.
StatusOr<EnvFingerprint> read_environment_json(const std::string& path);

// Checks for a number option, at parse time (before any GPU is touched): the value must read whole as a
// number (an integer for whole_number_at_least) not below `min`; a usage error names the option, the bound and
// the value ("--device: must be a whole number >= 0, got '-1'", exit 2). CLI11's NonNegativeNumber and
// PositiveNumber instead print a double's range, 309 digits of it.
CLI::Validator number_at_least(double min);
CLI::Validator whole_number_at_least(int64_t min);
// The candidate budget's flags of a command that tunes queued graphs (plans retune, worker): --exhaustive,
// --compile-first and --compile-patience (0 left: the budget's defaults; docs/measure.md "The candidate budget").
void add_candidate_budget_flags(CLI::App* sub, bool* exhaustive, int* first, int* patience);
// --build-helpers N of a command that tunes (tune, plans retune, worker): docs/measure.md "Build helpers".
void add_build_helpers_flag(CLI::App* sub, int* processes);
// A number above 0 (a budget, a time): "must be a number > 0, got '0'".
CLI::Validator positive_number();

// --target-sm: an SM version as cuDNN writes it, major * 10 + minor (90 for SM 9.0), or 0 for any. A value from
// 1 to 9 is refused as ambiguous (7 could be SM 7.0 or a typo for 70): "write 70 for SM 7.0".
CLI::Validator sm_version_option();

}  // namespace kiln::cli

#define KILN_REGISTER_COMMAND(name, adder) \
  static const bool kiln_cmd_registered_##adder = ::kiln::cli::register_command(name, adder)
