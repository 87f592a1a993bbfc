// kiln build-helper (hidden): a build helper of `kiln tune` (kiln/tune/build_helpers.h). It reads the graph and then
// one engine configuration at a time from the socket on file descriptor 3, builds each plan and sends its bytes
// back, until the tuner closes the socket. It ends when that socket ends (the tuner done, or dead).
#include <unistd.h>

#include "commands.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/build_helpers.h"
#include "tune_isolation.h"

namespace kiln::cli {
namespace {

Status build_helper_cmd() {
  KILN_RETURN_IF_ERROR(become_build_helper(3, "kiln build-helper", [] { ::_exit(0); }));
  HelperBuilder b = cudnn_helper_builder([](const std::string& spec) { return parse_spec_string(spec, "the tuner"); });
  return serve_build_helper(3, b);
}

void add_build_helper(CLI::App& app, Runner* run) {
  CLI::App* sub = app.add_subcommand("build-helper", "Internal: a build helper process of kiln tune");
  sub->group("");  // hidden from --help
  sub->callback([run] { *run = [] { return build_helper_cmd(); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("build-helper", add_build_helper);

BuildHelperOptions cli_build_helpers(int processes) {
  BuildHelperOptions o;
  if (processes == 0) return o;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return o;  // no path to start helpers from: builds stay on the tuner's threads
  o.executable.assign(self, static_cast<size_t>(n));
  o.args = {"build-helper"};
  o.processes = processes < 0 ? default_build_helper_processes() : processes;
  o.write_spec = [](const Graph& g) { return graph_to_spec_json(g); };
  return o;
}

}  // namespace kiln::cli
