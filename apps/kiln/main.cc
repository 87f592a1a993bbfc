// kiln: a thin CLI. Parse options, call the library, turn its Status into an exit code and a message.
#include <cstdio>

#include "commands.h"
#include "kiln/build_info.h"
#include "kiln/exit_codes.h"
#include "kiln/log.h"

int main(int argc, char** argv) {
  CLI::App app{"Kiln: fused cuDNN graphs, tuned, baked and shipped"};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION_STRING + " (" + KILN_GIT_REVISION + ")");
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log more, and print where an error travelled");
  kiln::cli::Runner run;
  kiln::cli::add_registered_commands(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kiln::kExitOk : kiln::kExitBadInput;
  }
  if (verbose) kiln::set_log_level(kiln::LogLevel::kInfo);
  kiln::Status st = run ? run() : kiln::invalid_argument("no subcommand");
  if (!st.is_ok()) {
    std::fprintf(stderr, "kiln: %s\n", st.to_string().c_str());
    if (verbose && !st.trace().empty()) std::fprintf(stderr, "  trace:\n%s\n", st.trace().c_str());
  }
  return kiln::exit_code_for(st);
}
