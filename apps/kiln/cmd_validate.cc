// kiln validate SPEC...: parses and validates specs; prints OK and a summary, or the named error. With
// --normalized OUT (one spec): also writes the graph it validated as a normalized-graph document
// (docs/normalized-graph.md), OUT "-" for stdout (the OK line then goes to stderr).
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/core/printable.h"
#include "kiln/core/atomic_file.h"
#include "kiln/graph/advice.h"
#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/normalized_graph.h"

namespace kiln::cli {
namespace {

struct ValidateCmdOptions {
  std::vector<std::string> specs;
  int target_sm = 0;
  std::string normalized;  // --normalized: a file, or "-" for stdout
  bool force = false;
};

std::string summary(const Graph& g) {
  int inputs = 0;
  const GraphRoles roles(g);
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) inputs += roles.is_graph_input(t) ? 1 : 0;
  std::map<std::string, int> ops;
  std::vector<std::string> op_order;
  for (const Node& n : g.nodes) {
    const std::string op = node_op_name(n);
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

// Where --normalized writes a file: never over an existing one unasked, never over the spec itself.
FileWriteOptions normalized_destination(const ValidateCmdOptions& o) {
  FileWriteOptions fo;
  fo.overwrite = o.force;
  fo.what = "normalized graph";
  fo.create_folders = false;  // a mistyped folder is refused, not made
  fo.protected_paths = o.specs;
  fo.protected_what = "the spec this command reads";
  return fo;
}

Status run_validate(const ValidateCmdOptions& o) {
  if (!o.normalized.empty() && o.specs.size() != 1)
    return invalid_argument("--normalized writes one spec's graph; got " + std::to_string(o.specs.size()) + " specs");
  ValidateOptions vo;
  vo.target_sm_version = o.target_sm;
  Status first, bad_input;
  int failed = 0;
  FILE* report = o.normalized == "-" ? stderr : stdout;  // stdout is the document's
  for (const std::string& path : o.specs) {
    StatusOr<Graph> g = parse_spec_file(path, vo);
    if (g.is_ok()) {
      std::string doc;  // the document, and a refused destination, before the OK line
      if (!o.normalized.empty()) {
        KILN_ASSIGN_OR_RETURN(doc, normalized_graph_json(*g));
        if (o.normalized != "-") KILN_RETURN_IF_ERROR(check_destination(o.normalized, normalized_destination(o)));
      }
      std::fprintf(report, "OK   %s: %s\n", printable(path).c_str(), printable(summary(*g)).c_str());
      for (const Advice& a : graph_advice(*g)) std::fprintf(report, "     advice: %s\n", printable(a.message).c_str());
      if (o.normalized == "-" && (std::printf("%s\n", doc.c_str()) < 0 || std::fflush(stdout) != 0))
        return unavailable("cannot write the normalized graph to standard output");
      if (!o.normalized.empty() && o.normalized != "-")
        return write_file_atomically(o.normalized, doc + "\n", normalized_destination(o));
      continue;
    }
    ++failed;
    if (first.is_ok()) first = g.status();
    // A spec the author must fix outranks one Kiln cannot run yet: the exit code is 2 if any spec is bad input, in
    // whatever order the files came (found by a hostile trial).
    const StatusCode code = g.status().code();
    if (bad_input.is_ok() && (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound))
      bad_input = g.status();
    // With several specs, report each failure here; main() prints the returned status once.
    if (o.specs.size() > 1) std::fprintf(stderr, "FAIL %s\n", printable(g.status().message()).c_str());
  }
  if (failed == 0) return Status::ok();
  if (o.specs.size() == 1) return first;
  const Status& worst = bad_input.is_ok() ? first : bad_input;
  return Status(worst.code(), std::to_string(failed) + " of " + std::to_string(o.specs.size()) +
                                  " specs failed (invalid or not supported); first" +
                                  (bad_input.is_ok() ? "" : " invalid") + ": " + worst.message());
}

void add_validate(CLI::App& app, Runner* run) {
  auto o = std::make_shared<ValidateCmdOptions>();
  CLI::App* sub = app.add_subcommand("validate", "Parse and validate graph specs (exit 2 on a bad spec)");
  sub->add_option("specs", o->specs, "Spec files (JSON, see docs/spec.md)")->required();
  sub->add_option("--target-sm", o->target_sm,
                  "Check against this SM version, major * 10 + minor (90 for SM 9.0); 0 = any")
      ->check(sm_version_option());
  CLI::Option* normalized =
      sub->add_option("--normalized", o->normalized,
                      "Also write the validated graph as a normalized-graph JSON document (docs/normalized-graph.md) "
                      "to this file, or - for stdout; one spec only");
  normalized->check(CLI::Validator(
      [](std::string& v) { return v.empty() ? std::string("names no file (give a path, or - for stdout)") : ""; },
      "PATH"));
  sub->add_flag("--force", o->force, "With --normalized: write over an existing file")->needs(normalized);
  sub->callback([run, o] { *run = [o] { return run_validate(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("validate", add_validate);

}  // namespace kiln::cli
