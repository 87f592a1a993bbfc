// kiln: a thin CLI. Parse options, call the library, turn its Status into an exit code and a message.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "commands.h"
#include "kiln/core/build_identity.h"
#include "kiln/core/exit_codes.h"
#include "kiln/core/log.h"
#include "kiln/core/printable.h"

namespace {

// When parsing failed, a word where a command belongs that names none is the likely cause ("kiln bogus",
// "kiln plans lsit"): CLI11 would only say that a subcommand is required. Walks the words before the first
// option (whose value could be any word) down the command tree.
std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "kiln";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "-v" || word == "--verbose") continue;
    if (word.empty() || word[0] == '-') return std::nullopt;
    std::vector<CLI::App*> subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;  // a command's own arguments from here on
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      if (s->check_name(word)) next = s;
      if (s->get_group().empty()) continue;  // hidden (kiln tune-worker): not offered
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (!next)
      return "unknown command '" + word + "'" + (cur == &app ? "" : " for '" + path + "'") +
             "; the commands are: " + names + " (`" + path + " --help` says more)";
    cur = next;
    path += " " + word;
  }
  return std::nullopt;
}

// SIGTERM, for a command that does not handle it itself (tune and compile stop between steps and keep what
// they finished): the documented "interrupted" exit, 130, rather than the shell's 143 for a killed process.
extern "C" void on_unhandled_sigterm(int) { ::_exit(kiln::kExitInterrupted); }

// Output that could not be written (a full disk, `> /dev/full`, a closed stdout) fails the command: stdio
// buffers, so the error shows only once the buffer is flushed, after the command has returned. `st` is the
// command's own outcome, kept when it already failed.
kiln::Status check_stdout(kiln::Status st) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return st;
  const int err = errno;
  kiln::Status out =
      kiln::unavailable(std::string("writing standard output failed: ") +
                        (err ? std::strerror(err) : "an output error") + " (what was printed is incomplete)");
  if (st.is_ok()) return out;
  std::fprintf(stderr, "kiln: %s\n", out.message().c_str());
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGTERM, on_unhandled_sigterm);
  CLI::App app{"Kiln: fused cuDNN graphs, tuned, baked and shipped"};
  app.set_version_flag("--version",
                       std::string("kiln ") + kiln::kiln_version_string() + " (" + kiln::kiln_git_revision() + ")");
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log more, and print where an error travelled");
  kiln::cli::Runner run;
  kiln::cli::add_registered_commands(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (std::optional<std::string> unknown = unknown_command(app, argc, argv)) {
        std::fprintf(stderr, "kiln: %s\n", unknown->c_str());
        return kiln::kExitBadInput;
      }
    }
    int rc = app.exit(e);
    if (rc != 0) return kiln::kExitBadInput;
    // --help and --version print to stdout and end here: a failed write fails them as it fails a command.
    kiln::Status out = check_stdout(kiln::Status::ok());
    if (!out.is_ok()) std::fprintf(stderr, "kiln: %s\n", out.to_string().c_str());
    return kiln::exit_code_for(out);
  }
  if (verbose) kiln::set_log_level(kiln::LogLevel::kInfo);
  // The library returns a Status for every failure; should anything still throw, it is a bug (exit 10)
  // reported in one line, not an abort.
  kiln::Status st =
      kiln::catch_exceptions("kiln", [&] { return run ? run() : kiln::invalid_argument("no subcommand"); });
  st = check_stdout(st);
  if (!st.is_ok()) {
    // The message quotes names from specs and stores: a NUL would cut it, a control byte reach the terminal.
    std::fprintf(stderr, "kiln: %s\n", kiln::printable_lines(st.to_string()).c_str());
    if (verbose && !st.trace().empty()) std::fprintf(stderr, "  trace:\n%s\n", st.trace().c_str());
  }
  return kiln::exit_code_for(st);
}
