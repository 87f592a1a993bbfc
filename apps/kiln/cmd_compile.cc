// kiln compile SPEC... --target PROFILE: ahead-of-time, deviceless compilation of heuristic plans for a
// recorded GPU into a plan store, marked untuned. Runs on a CPU-only machine.
#include <cstdio>

#include "commands.h"
#include "kiln/log.h"
#include "kiln/plan_bridge.h"
#include "kiln/retune.h"
#include "kiln/spec.h"

namespace kiln::cli {
namespace {

struct CompileOptions {
  std::vector<std::string> specs;
  std::string target;
  std::string store_path;
};

Status compile_cmd(const CompileOptions& o) {
  KILN_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(o.target));
  EnvFingerprint env = fingerprint_for_profile(profile);
  std::string store_path = o.store_path.empty() ? default_store_path() : o.store_path;
  KILN_ASSIGN_OR_RETURN(auto store, PlanStore::open(store_path));
  ValidateOptions vo;
  vo.target_sm_version = profile.sm_version;
  int failed = 0;
  for (const auto& spec : o.specs) {
    auto g = parse_spec_file(spec, vo);
    if (!g.is_ok()) return g.status();
    KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(*g));
    LowerTarget target;
    target.profile = &profile;
    auto lg = LoweredGraph::create(*g, target);
    Status st = lg.is_ok() ? lg->build_heuristic() : lg.status();
    if (!st.is_ok()) {
      // cuDNN appends its per-engine log; the first line says what failed (-v logs the rest).
      std::string msg = st.message();
      KILN_LOG(kInfo, msg);
      std::string why = msg.substr(0, msg.find('\n'));
      if (msg.find("RUNTIME_PREREQUISITE_MISSING") != std::string::npos)
        why += " [the engines cuDNN offers are runtime-compiled and need the CUDA driver library, absent here]";
      else if (msg.find("driver version is insufficient") != std::string::npos)
        why += " [this frontend node queries the device even when given a profile]";
      std::printf("%-28s FAILED  %s\n", g->name.c_str(), why.c_str());
      ++failed;
      continue;
    }
    KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_plan(sig, env, *lg));
    KILN_ASSIGN_OR_RETURN(PlanRecord stored, store->put(rec));
    KILN_RETURN_IF_ERROR(remember_graph_spec(*store, *g));  // so that `plans verify --deep` finds the graph
    std::printf("%-28s %s  %s  %zu B plan, workspace %lld B, untuned\n", g->name.c_str(), sig.structure.substr(0, 12).c_str(),
                lg->config().identity().c_str(), rec.plan_bytes.size(), static_cast<long long>(rec.workspace_bytes));
  }
  std::printf("compiled for %s (sm_%d, %d SMs) into %s\n", profile.gpu_name.c_str(), profile.sm_version,
              profile.sm_count, store_path.c_str());
  if (failed) return not_supported(std::to_string(failed) + " of " + std::to_string(o.specs.size()) + " specs did not compile");
  return Status::ok();
}

void add_compile(CLI::App& app, Runner* run) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile heuristic plans for a recorded GPU without one (deviceless)");
  sub->add_option("specs", o->specs, "Spec JSON files")->required();
  sub->add_option("--target", o->target, "Device profile JSON (e.g. profiles/h200.json)")->required();
  sub->add_option("--store", o->store_path, "Plan store (default: $KILN_STORE or ~/.cache/kiln/plans.db)");
  sub->callback([run, o] { *run = [o] { return compile_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("compile", add_compile);

}  // namespace kiln::cli
