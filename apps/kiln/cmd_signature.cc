// kiln signature SPEC: the structure signature and shape key plans are stored under (docs/spec.md).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"

namespace kiln::cli {
namespace {

struct SignatureCmdOptions {
  std::string spec;
  bool json = false;
  bool canonical = false;
};

Status run_signature(const SignatureCmdOptions& o) {
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_file(o.spec));
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(g));
  if (o.json) {
    nlohmann::ordered_json j;
    j["spec"] = o.spec;
    j["name"] = g.name;
    j["structure"] = sig.structure;
    j["shape_key"] = sig.shape_key;
    if (o.canonical) j["canonical"] = sig.canonical;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::ok();
  }
  std::printf("structure  %s\n", sig.structure.c_str());
  std::printf("shape_key  %s\n", sig.shape_key.empty() ? "(static)" : sig.shape_key.c_str());
  if (o.canonical) std::printf("canonical:\n%s", sig.canonical.c_str());
  return Status::ok();
}

void add_signature(CLI::App& app, Runner* run) {
  auto o = std::make_shared<SignatureCmdOptions>();
  CLI::App* sub = app.add_subcommand("signature", "Print a spec's structure signature and shape key");
  sub->add_option("spec", o->spec, "Spec file (JSON, see docs/spec.md)")->required();
  sub->add_flag("--json", o->json, "Machine-readable output");
  sub->add_flag("--canonical", o->canonical, "Also print the canonical text the signature hashes");
  sub->callback([run, o] { *run = [o] { return run_signature(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("signature", add_signature);

}  // namespace kiln::cli
