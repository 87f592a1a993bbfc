// kiln tune-worker --request FILE (hidden): the worker side of `kiln tune`'s crash isolation. It reads the
// graph and the options from FILE (written by tune_isolated), tunes with the cuDNN backend and writes every
// event as a JSON line to file descriptor 3 (kiln/tune/tune_supervisor.h).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "kiln/core/read_file.h"
#include "kiln/core/exit_codes.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/tune_supervisor.h"
#include "tune_isolation.h"

extern char** environ;

namespace kiln::cli {
namespace {

using Json = nlohmann::json;

std::atomic<bool> g_worker_interrupted{false};
extern "C" void on_worker_signal(int sig) {
  g_worker_interrupted = true;
  ::signal(sig, SIG_DFL);
}

Status tune_worker_setup_and_run(const std::string& request_path, bool* reported);

// Every failure reaches the supervisor as an event, whichever step it came from.
Status tune_worker_cmd(const std::string& request_path) {
  bool reported = false;
  Status st = tune_worker_setup_and_run(request_path, &reported);
  if (!st.is_ok() && !reported && st.code() != StatusCode::kCancelled) write_worker_error(3, st);
  return st;
}

Status tune_worker_setup_and_run(const std::string& request_path, bool* reported) {
  auto text = read_file(request_path, {"the worker request", -1});
  if (!text.is_ok() && text.status().code() == StatusCode::kNotFound)
    return not_found("cannot open the worker request '" + request_path + "'");
  KILN_RETURN_IF_ERROR(text.status());
  Json req;
  try {
    req = Json::parse(*text);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("malformed worker request: ") + e.what());
  }
  StatusOr<Graph> g = internal_error("unset");
  StatusOr<TuneOptions> to = internal_error("unset");
  WorkerRequest wr;
  try {
    g = parse_spec_string(req.at("graph").get<std::string>(), request_path);
    to = tune_worker_options_from_json(req.at("options").dump());
    wr.skip = req.at("skip").get<std::vector<std::string>>();
    wr.serial = req.at("serial").get<bool>();
    wr.time_budget_s = req.at("time_budget_s").get<double>();
  } catch (const std::exception& e) {
    return invalid_argument(std::string("malformed worker request: ") + e.what());
  }
  if (!g.is_ok()) return g.status();
  if (!to.is_ok()) return to.status();
  // The worker's graph must be the supervisor's: plans bind tensors by the signature's numbering.
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(*g));
  if (sig.structure != req.at("structure").get<std::string>())
    return internal_error("the worker's graph has another signature than the supervisor's");
  ::signal(SIGINT, on_worker_signal);
  ::signal(SIGTERM, on_worker_signal);
  to->cancel = &g_worker_interrupted;
  if (to->build_helpers.processes > 0) {  // the graph writer does not travel in the request
    const int n = to->build_helpers.processes;
    to->build_helpers = cli_build_helpers(n);
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<TuneBackend> backend, make_cudnn_backend(*g, *to));
  if (const char* crash = std::getenv("KILN_TEST_CRASH")) {
    const std::string spec = crash;
    const size_t colon = spec.rfind(':');
    if (colon != std::string::npos)
      backend = crash_injecting_backend(std::move(backend), spec.substr(0, colon), spec.substr(colon + 1), SIGSEGV);
  }
  *reported = true;  // from here on, run_tune_worker reports its own failures
  return run_tune_worker(*backend, g->name, *to, wr, 3);
}

void add_tune_worker(CLI::App& app, Runner* run) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("tune-worker", "Internal: the worker process of kiln tune");
  sub->group("");  // hidden from --help
  sub->add_option("--request", *path, "Request file written by kiln tune")->required();
  sub->callback([run, path] { *run = [path] { return tune_worker_cmd(*path); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("tune-worker", add_tune_worker);

StatusOr<TuneResult> tune_isolated(const Graph& graph, const TuneOptions& options) {
  TuneOptions o = options;
  KILN_ASSIGN_OR_RETURN(o.pin, resolve_pin(graph, options.pin));
  KILN_ASSIGN_OR_RETURN(std::string spec, graph_to_spec_json(graph));
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(graph));
  char dir_template[] = "/tmp/kiln-tune-XXXXXX";
  if (!::mkdtemp(dir_template)) return unavailable("cannot make a folder for the tune worker's requests");
  const std::string dir = dir_template;
  const Json base = {
      {"graph", spec}, {"structure", sig.structure}, {"options", Json::parse(tune_worker_options_to_json(o))}};
  int attempt = 0;
  auto spawn = [&](const WorkerRequest& wr) -> StatusOr<WorkerProcess> {
    Json req = base;
    req["skip"] = wr.skip;
    req["serial"] = wr.serial;
    req["time_budget_s"] = wr.time_budget_s;
    const std::string path = dir + "/request" + std::to_string(attempt++) + ".json";
    {
      std::ofstream out(path);
      out << req.dump();
      if (!out.good()) return unavailable("cannot write the tune worker's request '" + path + "'");
    }
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return unavailable("cannot make a pipe for the tune worker");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3);  // the events, on fd 3 (dup2 clears close-on-exec)
    std::string self = "/proc/self/exe", sub = "tune-worker", flag = "--request";
    char* argv[] = {self.data(), sub.data(), flag.data(), const_cast<char*>(path.c_str()), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    if (rc != 0) {
      ::close(p[0]);
      return unavailable("cannot start the tune worker: " + std::string(std::strerror(rc)));
    }
    return WorkerProcess{pid, p[0]};
  };
  auto r = tune_supervised(spawn, graph.name, o);
  const std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "warning: could not remove %s\n", dir.c_str());
  return r;
}

}  // namespace kiln::cli
