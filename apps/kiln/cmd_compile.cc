// kiln compile SPEC... --target PROFILE: ahead-of-time, deviceless compilation of heuristic plans for a
// recorded GPU into a plan store, marked untuned. Runs on a CPU-only machine.
//
// Every spec is read and validated first: one bad spec compiles none (exit 2) unless --keep-going. A spec's
// "pin" is built exactly, as `kiln run --pin` builds it: an engine configuration cuDNN does not offer fails
// that graph (exit 5), never falls back to the heuristics.
#include <cstdio>

#include "commands.h"
#include "kiln/limits.h"
#include "kiln/log.h"
#include "kiln/plan_bridge.h"
#include "kiln/plan_words.h"
#include "kiln/retune.h"
#include "kiln/segments.h"
#include "kiln/spec.h"

namespace kiln::cli {
namespace {

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

// Why a graph did not compile, in one line of Kiln's words (kiln/plan_words.h); -v logs cuDNN's own text.
std::string failure_line(const Status& st, const std::string& graph_name) {
  KILN_LOG(kInfo, st.message());
  const std::string msg = plan_failure_in_words(st, graph_name).message();
  return msg.substr(0, msg.find('\n'));
}

// What became of one graph (or one segment of a graph past cuDNN's operation limit).
enum class Outcome { kCompiled, kNeedsGpu, kFailed };

// Compiles one graph into the store, built exactly as `pin` says when given, else from the heuristics, and
// prints its line. `why` says what went wrong for kNeedsGpu and kFailed.
StatusOr<Outcome> compile_one(const Graph& g, const std::optional<EngineConfig>& pin, const DeviceProfile& profile,
                              const EnvFingerprint& env, PlanStore& store, std::string* why) {
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(g));
  LowerTarget target;
  target.profile = &profile;
  auto lg = LoweredGraph::create(g, target);
  Status st = lg.status();
  if (st.is_ok()) {
    if (pin)
      st = lg->build_config(*pin).with_context("the spec's \"pin\" " + pin->identity() + " for graph '" + g.name +
                                               "' cannot be built");
    else
      st = lg->build_heuristic();
  }
  if (!st.is_ok()) {
    // Without a CUDA driver some graphs cannot be compiled at all: a result to report, not a failure. The
    // toolkit's driver stub does not help: cuDNN then offers the runtime-compiled engines, NVRTC compiles
    // them, and loading the module (cuLibraryLoadData) fails with CUDA_ERROR_STUB_LIBRARY.
    const std::string& msg = st.message();
    const char* gpu_reason = nullptr;
    if (msg.find("RUNTIME_PREREQUISITE_MISSING") != std::string::npos)
      gpu_reason = "the engines cuDNN could build it with are runtime-compiled, and runtime compilation needs the "
                   "CUDA driver (libcuda.so.1), absent here";
    else if (msg.find("driver version is insufficient") != std::string::npos ||
             msg.find("driver is a stub library") != std::string::npos)
      gpu_reason = "cuDNN Frontend queries the CUDA device while building this graph, even for a recorded profile";
    if (gpu_reason && !pin) {
      KILN_LOG(kInfo, msg);
      std::printf("%-28s needs a GPU: %s\n", g.name.c_str(), gpu_reason);
      *why = gpu_reason;
      return Outcome::kNeedsGpu;
    }
    *why = failure_line(st, g.name);
    std::printf("%-28s FAILED  %s\n", g.name.c_str(), why->c_str());
    return Outcome::kFailed;
  }
  for (const std::string& w : lg->workarounds())
    std::printf("%-28s note: known cuDNN defect worked around (%s)\n", g.name.c_str(), w.c_str());
  KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_plan(sig, env, *lg));
  KILN_ASSIGN_OR_RETURN(PlanRecord stored, store.put(rec));
  KILN_RETURN_IF_ERROR(remember_graph_spec(store, g));  // so that `plans verify --deep` finds the graph
  std::printf("%-28s %s  %s%s  %zu B plan, workspace %lld B, untuned\n", g.name.c_str(),
              sig.structure.substr(0, 12).c_str(), lg->config().identity().c_str(), pin ? " (pinned)" : "",
              rec.plan_bytes.size(), static_cast<long long>(rec.workspace_bytes));
  return Outcome::kCompiled;
}

Status compile_cmd(const CompileOptions& o) {
  KILN_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(o.target));
  EnvFingerprint env = fingerprint_for_profile(profile);
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
      std::printf("%-28s INVALID  %s\n", spec.c_str(), pin.status().message().c_str());
      invalid.push_back(spec);
      continue;
    }
    good.push_back({spec, std::move(g).value(), std::move(pin).value(), Status::ok()});
  }
  const std::string n_specs = std::to_string(o.specs.size()) + " spec" + (o.specs.size() == 1 ? "" : "s");
  if (!invalid.empty() && !o.keep_going) {
    if (invalid.size() == 1 && o.specs.size() == 1) return invalid_argument(invalid[0] + " is not a valid spec (above)");
    return invalid_argument(std::to_string(invalid.size()) + " of " + n_specs +
                            " are not valid (above): nothing was compiled (--keep-going compiles the valid ones)");
  }

  std::string store_path = o.store_path.empty() ? default_store_path() : o.store_path;
  KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(store_path));
  std::vector<std::string> failed, need_gpu;
  for (const CheckedSpec& c : good) {
    if (!c.unsupported.is_ok()) {
      std::printf("%-28s FAILED  %s\n", c.path.c_str(), c.unsupported.message().c_str());
      failed.push_back(c.unsupported.message());
      continue;
    }
    // A graph past cuDNN's operations per graph is compiled as the segments `kiln run` runs it as, each
    // stored under its own signature; a pin names one configuration for one graph, so it cannot apply.
    std::vector<Graph> work;
    if (exceeds_cudnn_operation_limit(c.graph)) {
      if (c.pin) {
        std::string why = "graph '" + c.graph.name + "' has a \"pin\" but runs as segments (" +
                          check_cudnn_limits(c.graph).message() + "): a pin cannot apply";
        std::printf("%-28s FAILED  %s\n", c.graph.name.c_str(), why.c_str());
        failed.push_back(why);
        continue;
      }
      KILN_ASSIGN_OR_RETURN(std::vector<GraphPart> parts, graph_segments(c.graph));
      std::printf("%-28s %s; compiling its %zu segments\n", c.graph.name.c_str(),
                  check_cudnn_limits(c.graph).message().c_str(), parts.size());
      for (GraphPart& p : parts) work.push_back(std::move(p.graph));
    } else {
      work.push_back(c.graph);
    }
    Outcome worst = Outcome::kCompiled;
    std::string why;
    for (const Graph& w : work) {
      std::string part_why;
      KILN_ASSIGN_OR_RETURN(Outcome out, compile_one(w, c.pin, profile, env, *store, &part_why));
      if (out > worst) {
        worst = out;
        why = part_why;
      }
    }
    if (worst == Outcome::kNeedsGpu) need_gpu.push_back(c.graph.name);
    if (worst == Outcome::kFailed) failed.push_back(why);
  }
  std::printf("compiled %zu of %s for %s (sm_%d, %d SMs) into %s\n", good.size() - failed.size() - need_gpu.size(),
              n_specs.c_str(), profile.gpu_name.c_str(), profile.sm_version, profile.sm_count, store_path.c_str());
  if (!invalid.empty())
    return invalid_argument(std::to_string(invalid.size()) + " of " + n_specs + " are not valid (above) and were skipped" +
                            (failed.empty() ? "" : "; " + std::to_string(failed.size()) + " did not compile"));
  if (failed.size() == 1) return not_supported(failed[0]);
  if (!failed.empty()) return not_supported(std::to_string(failed.size()) + " of " + n_specs + " did not compile (above)");
  if (!need_gpu.empty()) {
    std::string names;
    for (const auto& n : need_gpu) names += (names.empty() ? "" : ", ") + n;
    return unavailable(std::to_string(need_gpu.size()) + " of " + n_specs + (need_gpu.size() == 1 ? " needs" : " need") +
                       " a GPU to compile (" + names +
                       "): `kiln tune --use-store` bakes them on the GPU machine");
  }
  return Status::ok();
}

void add_compile(CLI::App& app, Runner* run) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile heuristic plans for a recorded GPU without one (deviceless)");
  sub->add_option("specs", o->specs, "Spec JSON files (all are checked before any is compiled)")->required();
  sub->add_option("--target", o->target, "Device profile JSON (e.g. profiles/h200.json)")->required();
  sub->add_option("--store", o->store_path, "Plan store (default: $KILN_STORE or ~/.cache/kiln/plans.db)");
  sub->add_flag("--keep-going", o->keep_going,
                "Compile the valid specs even when others are not valid (exit 2 still reports them)");
  sub->callback([run, o] { *run = [o] { return compile_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("compile", add_compile);

}  // namespace kiln::cli
