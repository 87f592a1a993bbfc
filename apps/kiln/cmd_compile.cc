// kiln compile SPEC... --target PROFILE: ahead-of-time, deviceless compilation of heuristic plans for a
// recorded GPU into a plan store, marked untuned. Runs on a CPU-only machine.
//
// Every spec is read and validated first: one bad spec compiles none (exit 2) unless --keep-going. A spec's
// "pin" is built exactly, as `kiln run --pin` builds it: an engine configuration cuDNN does not offer fails
// that graph (exit 5), never falls back to the heuristics.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "kiln/core/printable.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/workshop.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/spec/spec.h"
#include "kiln/store/store_path.h"

namespace kiln::cli {
namespace {

// Ctrl-C or SIGTERM stops compile between graphs: what was compiled is in the store and was printed, and the
// command exits 130 (kExitInterrupted). A second signal ends the process at once.
std::atomic<bool> g_compile_interrupted{false};
extern "C" void on_compile_interrupt(int sig) {
  g_compile_interrupted = true;
  std::signal(sig, SIG_DFL);
}

// The handlers for one compile run; the defaults come back when it ends.
struct CompileSignals {
  CompileSignals() {
    g_compile_interrupted = false;
    std::signal(SIGINT, on_compile_interrupt);
    std::signal(SIGTERM, on_compile_interrupt);
  }
  ~CompileSignals() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  CompileSignals(const CompileSignals&) = delete;
  CompileSignals& operator=(const CompileSignals&) = delete;
};

struct CompileOptions {
  std::vector<std::string> specs;
  std::string target;
  std::string store_path;
  bool keep_going = false;
};

// A spec that parsed and validated, with the configuration its "pin" names (if any); or one that is valid
// but needs more than the target offers (NotSupported: reported as a graph that did not compile).
struct CheckedSpec {
  std::string path;
  Graph graph;
  std::optional<EngineConfig> pin;
  Status unsupported;
};

// Prints what became of one graph (each of its segments when it was cut) and returns its outcome.
CompileOutcome print_compiled(const Graph& g, const std::optional<EngineConfig>& pin, const CompiledGraph& c) {
  if (!c.segmented.empty() && !c.parts.empty())
    std::printf("%-28s %s; compiling its %zu segments\n", printable(g.name).c_str(), printable(c.segmented).c_str(),
                c.parts.size());
  if (c.parts.empty()) std::printf("%-28s FAILED  %s\n", printable(g.name).c_str(), printable(c.why).c_str());
  for (const CompiledPart& p : c.parts) {
    const std::string shown = printable(p.graph_name);
    const char* name = shown.c_str();
    if (p.outcome == CompileOutcome::kNeedsGpu) {
      std::printf("%-28s needs a GPU: %s\n", name, printable(p.why).c_str());
      continue;
    }
    if (p.outcome == CompileOutcome::kFailed) {
      std::printf("%-28s FAILED  %s\n", name, printable(p.why).c_str());
      continue;
    }
    for (const std::string& w : p.workarounds)
      std::printf("%-28s note: known cuDNN defect worked around (%s)\n", name, printable(w).c_str());
    for (const std::string& w : p.warnings) std::fprintf(stderr, "warning: %s\n", printable(w).c_str());
    std::printf("%-28s %s  %s%s  %zu B plan, workspace %lld B, untuned\n", name,
                p.signature.structure.substr(0, 12).c_str(), p.config.identity().c_str(), pin ? " (pinned)" : "",
                p.plan_bytes, static_cast<long long>(p.workspace_bytes));
  }
  return c.outcome;
}

Status compile_cmd(const CompileOptions& o) {
  KILN_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(o.target));
  ValidateOptions vo;
  vo.target_sm_version = profile.sm_version;

  // Every spec is checked before any is compiled.
  std::vector<CheckedSpec> good;
  std::vector<std::string> invalid;
  for (const auto& spec : o.specs) {
    StatusOr<Graph> g = parse_spec_file(spec, vo);
    if (!g.is_ok() && g.status().code() == StatusCode::kNotSupported) {
      good.push_back({spec, Graph(), std::nullopt, g.status()});
      continue;
    }
    StatusOr<std::optional<EngineConfig>> pin = g.is_ok() ? resolve_pin(*g, std::nullopt) : g.status();
    if (!pin.is_ok()) {
      std::printf("%-28s INVALID  %s\n", printable(spec).c_str(), printable(pin.status().message()).c_str());
      invalid.push_back(spec);
      continue;
    }
    good.push_back({spec, std::move(g).value(), std::move(pin).value(), Status::ok()});
  }
  const std::string n_specs = std::to_string(o.specs.size()) + " spec" + (o.specs.size() == 1 ? "" : "s");
  if (!invalid.empty() && !o.keep_going) {
    if (invalid.size() == 1 && o.specs.size() == 1)
      return invalid_argument(invalid[0] + " is not a valid spec (above)");
    return invalid_argument(std::to_string(invalid.size()) + " of " + n_specs +
                            " are not valid (above): nothing was compiled (--keep-going compiles the valid ones)");
  }

  std::string store_path = o.store_path.empty() ? default_store_path() : o.store_path;
  PlannerOptions po = PlannerOptions::offline(store_path).with_target(profile);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(po));
  std::vector<std::string> failed, need_gpu;
  const CompileSignals signals;
  // Test hook KILN_TEST_TERM_AFTER=N: the process sends itself SIGTERM once N graphs are done.
  const char* term_after = std::getenv("KILN_TEST_TERM_AFTER");
  const size_t term_at = term_after ? static_cast<size_t>(std::strtoul(term_after, nullptr, 10)) : 0;
  size_t attempted = 0;
  for (const CheckedSpec& c : good) {
    if (term_at > 0 && attempted == term_at) std::raise(SIGTERM);
    if (g_compile_interrupted) break;
    ++attempted;
    if (!c.unsupported.is_ok()) {
      std::printf("%-28s FAILED  %s\n", printable(c.path).c_str(), printable(c.unsupported.message()).c_str());
      failed.push_back(c.unsupported.message());
      continue;
    }
    KILN_ASSIGN_OR_RETURN(CompiledGraph compiled, planner->workshop().compile(c.graph, c.pin));
    CompileOutcome out = print_compiled(c.graph, c.pin, compiled);
    if (out == CompileOutcome::kNeedsGpu) need_gpu.push_back(c.graph.name);
    if (out == CompileOutcome::kFailed) failed.push_back(compiled.why);
  }
  const size_t compiled = attempted - failed.size() - need_gpu.size();
  std::printf("compiled %zu of %s for %s (sm_%d, %d SMs) into %s\n", compiled, n_specs.c_str(),
              printable(profile.gpu_name).c_str(), profile.sm_version, profile.sm_count,
              printable(shown_location(store_path)).c_str());
  if (g_compile_interrupted)
    return cancelled("interrupted: the " + std::to_string(compiled) +
                     " compiled above are in the store; the rest were not compiled");
  if (!invalid.empty())
    return invalid_argument(std::to_string(invalid.size()) + " of " + n_specs +
                            " are not valid (above) and were skipped" +
                            (failed.empty() ? "" : "; " + std::to_string(failed.size()) + " did not compile"));
  if (failed.size() == 1) return not_supported(failed[0]);
  if (!failed.empty())
    return not_supported(std::to_string(failed.size()) + " of " + n_specs + " did not compile (above)");
  if (!need_gpu.empty()) {
    std::string names;
    for (const auto& n : need_gpu) names += (names.empty() ? "" : ", ") + n;
    return unavailable(std::to_string(need_gpu.size()) + " of " + n_specs +
                       (need_gpu.size() == 1 ? " needs" : " need") + " a GPU to compile (" + names +
                       "): `kiln tune --use-store` bakes them on the GPU machine");
  }
  return Status::ok();
}

void add_compile(CLI::App& app, Runner* run) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile heuristic plans for a recorded GPU without one (deviceless)");
  sub->add_option("specs", o->specs, "Spec JSON files (all are checked before any is compiled)")->required();
  sub->add_option("--target", o->target, "Device profile JSON (e.g. profiles/h200.json)")->required();
  sub->add_option("--store", o->store_path, "Plan store (default: $KILN_STORE or ~/.cache/kiln/plans.db)")
      ->check(non_empty_path());
  sub->add_flag("--keep-going", o->keep_going,
                "Compile the valid specs even when others are not valid (exit 2 still reports them)");
  sub->callback([run, o] { *run = [o] { return compile_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("compile", add_compile);

}  // namespace kiln::cli
