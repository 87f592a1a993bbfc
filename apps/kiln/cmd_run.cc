// kiln run SPEC: build the graph (store -> heuristics, or a pinned engine configuration), run it once on
// seeded or given inputs, and with --verify check the outputs against a reference.
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"

namespace kiln::cli {
namespace {

struct RunCliOptions {
  std::string spec;
  RunOptions run;
  std::string pin;
  bool pin_given = false;
  std::string reference;  // empty: not given (auto)
  std::string on_mismatch = mismatch_policy_name(MismatchPolicy::kHeuristicsAndQueue);
  bool use_store = false;
};

Status run_cmd(RunCliOptions& o) {
  if (!o.reference.empty()) {
    KILN_ASSIGN_OR_RETURN(o.run.reference, parse_reference_choice(o.reference));
    o.run.verify = true;  // naming a reference asks for verification
  }
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file(o.spec));
  if (o.pin_given) {  // an empty --pin is a mistake, not "no pin"
    KILN_ASSIGN_OR_RETURN(o.run.pin, EngineConfig::parse(o.pin));
  }
  if (o.use_store && o.run.store_path.empty()) o.run.store_path = default_store_path();
  {
    auto p = parse_mismatch_policy(o.on_mismatch);
    if (!p.is_ok()) return p.status().with_context("--on-mismatch");
    o.run.policy.on_mismatch = *p;
  }
  KILN_ASSIGN_OR_RETURN(RunReport rep, run_graph(g, o.run));
  const std::string plan =
      rep.segments.empty() ? rep.config.identity() : std::to_string(rep.segments.size()) + " fused segments";
  std::printf("%s: plan %s from %s (workspace %lld B, %.1f ms to obtain), ran in %.3f ms\n", g.name.c_str(),
              plan.c_str(), plan_source_name(rep.plan_source), static_cast<long long>(rep.workspace_bytes),
              rep.obtain_ms, rep.run_ms);
  for (auto& s : rep.segments) std::printf("  segment %s\n", s.c_str());
  for (auto& r : rep.reasons) std::printf("  %s\n", r.c_str());
  if (!o.run.verify) return Status::ok();
  for (const auto& c : rep.checks) {
    if (c.report)
      std::printf("verify against the %s reference:\n%s\n", reference_kind_name(c.kind), c.report->summary().c_str());
    else
      std::printf("%s reference: %s: %s\n", reference_kind_name(c.kind), disposition_name(c.verdict),
                  c.message.c_str());
  }
  const Disposition v = rep.verdict();
  if (v == Disposition::kNotSupported) return not_supported("no reference could check '" + g.name + "'");
  if (v != Disposition::kPassed) {
    std::string which;
    for (const auto& c : rep.checks)
      if (c.verdict == v) which += std::string(which.empty() ? "" : " and ") + reference_kind_name(c.kind);
    return check_failed(std::string("outputs of '") + g.name + "' are " + disposition_name(v) + " against the " +
                        which + " reference");
  }
  return Status::ok();
}

void add_run(CLI::App& app, Runner* run) {
  auto o = std::make_shared<RunCliOptions>();
  CLI::App* sub = app.add_subcommand("run", "Build a spec's graph, run it once, optionally verify it");
  sub->add_option("spec", o->spec, "Spec JSON file")->required();
  sub->add_flag("--verify", o->run.verify, "Check outputs against the host (small) or device reference");
  sub->add_option("--reference", o->reference,
                  "Reference to verify against (implies --verify): auto (host if within its MAC cap, else device), "
                  "host, device, or both (each reported; a failure of either exits 1)");
  sub->add_option("--host-max-macs", o->run.host_max_macs,
                  "Cost cap of the host reference in multiply-accumulates (default 2e9); above it auto uses the "
                  "device reference, host refuses (exit 5) and both reports the host as NotSupported")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !(d > 0))
              return "expected a positive number of multiply-accumulates (e.g. 1e10), got '" + v + "'";
            return std::string();
          },
          "POSITIVE"));
  add_seed_option(sub, &o->run.seed, "Seed of the random inputs");
  sub->add_option("--inputs", o->run.inputs_dir, "Folder of <tensor>.bin raw inputs instead of random ones");
  sub->add_option("--save-outputs", o->run.save_outputs_dir,
                  "Folder to write <tensor>.bin outputs into (existing files are refused before the run)");
  sub->add_flag("--force", o->run.overwrite_outputs, "With --save-outputs: write over existing <tensor>.bin files");
  sub->add_option_function<std::string>(
      "--pin",
      [o](const std::string& v) {
        o->pin = v;
        o->pin_given = true;
      },
      "Engine configuration to build instead of the heuristics' (e.g. eng12_k2=1)");
  sub->add_option("--store", o->run.store_path, "Plan store to load the plan from (default: none)")
      ->check(non_empty_path());
  sub->add_flag("--use-store", o->use_store, "Use the default plan store ($KILN_STORE or ~/.cache/kiln/plans.db)");
  sub->add_option("--on-mismatch", o->on_mismatch,
                  "What a store miss, stale or corrupt record does: heuristics-and-queue (run cuDNN's heuristic "
                  "choice, queue a re-tune), retune (tune now, store, run the winner) or fail (exit 6)")
      ->capture_default_str();
  sub->add_option("--retune-budget", o->run.retune.time_budget_s,
                  "With --on-mismatch retune: seconds for the whole tuning")
      ->capture_default_str();
  sub->add_flag("--allow-tf32", o->run.check.allow_tf32, "fp32 outputs may come from TF32 tensor cores");
  sub->callback([run, o] { *run = [o] { return run_cmd(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("run", add_run);

}  // namespace kiln::cli
