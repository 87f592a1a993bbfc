// kiln validate SPEC...: parses and validates specs; prints OK and a summary, or the named error.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/graph/advice.h"
#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"

namespace kiln::cli {
namespace {

struct ValidateCmdOptions {
  std::vector<std::string> specs;
  int target_sm = 0;
};

std::string summary(const Graph& g) {
  int inputs = 0;
  const GraphRoles roles(g);
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) inputs += roles.is_graph_input(t) ? 1 : 0;
  std::map<std::string, int> ops;
  std::vector<std::string> op_order;
  for (const Node& n : g.nodes) {
    std::string op = n.op == OpKind::kPointwise   ? pointwise_mode_name(n.pointwise.mode)
                     : n.op == OpKind::kReduction ? std::string("reduce_") + reduction_mode_name(n.reduction.mode)
                                                  : op_kind_name(n.op);
    if (ops[op]++ == 0) op_order.push_back(op);
  }
  std::string s = "'" + g.name + "': " + std::to_string(g.nodes.size()) + " node(s) [";
  for (size_t i = 0; i < op_order.size(); ++i)
    s += (i ? ", " : "") + op_order[i] + (ops[op_order[i]] > 1 ? " x" + std::to_string(ops[op_order[i]]) : "");
  s += "], " + std::to_string(inputs) + " input(s), " + std::to_string(g.outputs.size()) + " output(s)";
  if (!g.dynamic_dims.empty()) {
    s += ", dynamic";
    for (const auto& [sym, v] : g.dynamic_dims) s += " " + sym + "=" + std::to_string(v);
  }
  return s;
}

Status run_validate(const ValidateCmdOptions& o) {
  ValidateOptions vo;
  vo.target_sm_version = o.target_sm;
  Status first;
  int failed = 0;
  for (const std::string& path : o.specs) {
    StatusOr<Graph> g = parse_spec_file(path, vo);
    if (g.is_ok()) {
      std::printf("OK   %s: %s\n", path.c_str(), summary(*g).c_str());
      for (const Advice& a : graph_advice(*g)) std::printf("     advice: %s\n", a.message.c_str());
      continue;
    }
    ++failed;
    if (first.is_ok()) first = g.status();
    // With several specs, report each failure here; main() prints the returned status once.
    if (o.specs.size() > 1) std::fprintf(stderr, "FAIL %s\n", g.status().message().c_str());
  }
  if (failed == 0) return Status::ok();
  if (o.specs.size() == 1) return first;
  return Status(first.code(), std::to_string(failed) + " of " + std::to_string(o.specs.size()) +
                                  " specs are invalid; first: " + first.message());
}

void add_validate(CLI::App& app, Runner* run) {
  auto o = std::make_shared<ValidateCmdOptions>();
  CLI::App* sub = app.add_subcommand("validate", "Parse and validate graph specs (exit 2 on a bad spec)");
  sub->add_option("specs", o->specs, "Spec files (JSON, see docs/spec.md)")->required();
  sub->add_option("--target-sm", o->target_sm, "Check against this SM version (e.g. 90); 0 = any")
      ->check(CLI::NonNegativeNumber);
  sub->callback([run, o] { *run = [o] { return run_validate(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("validate", add_validate);

}  // namespace kiln::cli
