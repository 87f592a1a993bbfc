// kiln._kiln.tune (docs/python.md "Tuning"): `kiln tune` for one graph, through a Planner's workshop: the graph (or
// its fused segments) tuned, the unfused alternative timed and decided on, the winner stored. In this process (the
// CLI runs the tuner in a supervised worker; a tune that crashes cuDNN takes this process with it).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include "kiln/core/disposition.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/planner_options.h"
#include "kiln/runtime/workshop.h"
#include "kiln/spec/spec.h"
#include "kiln/tune/build_helpers.h"
#include "py_common.h"
#include "py_graph.h"
#include "py_planner.h"

namespace kiln::py {
namespace {

nb::dict tuned_dict(const TunedGraph& t) {
  nb::dict d;
  const TuneResult& r = t.result;
  d["graph"] = r.graph_name;
  d["structure"] = t.signature.structure;
  d["shape_key"] = t.signature.shape_key;
  d["skipped"] = t.skipped;
  d["candidates"] = static_cast<int64_t>(r.candidates.size());
  int64_t passed = 0;
  for (const CandidateResult& c : r.candidates) passed += c.disposition == Disposition::kPassed ? 1 : 0;
  d["passed"] = passed;
  if (r.winner) {
    const CandidateResult& w = r.candidates[*r.winner];
    d["winner"] = w.identity();
    d["median_ms"] = w.median_ms;
    d["check"] = r.winner_check;
  } else {
    d["winner"] = nb::none();
  }
  if (t.unfused) {
    nb::dict u;
    u["median_ms"] = t.unfused->chain.median_ms;
    u["disposition"] = std::string(disposition_name(t.unfused->chain.disposition));
    u["unavailable"] = t.unfused->unavailable;
    d["unfused"] = u;
  }
  if (t.fusion && t.fusion->is_ok()) d["fusion"] = t.fusion->value().explanation;
  d["stored"] = t.kept.has_value() || t.kept_fusion.has_value();
  d["store_error"] = t.store_status.is_ok() ? std::string() : t.store_status.to_string();
  d["total_ms"] = r.total_wall_ms;
  return d;
}

nb::list tune(const PyPrepared& pg, double time_budget_s, bool store, bool unfused, const std::string& helper,
              const std::vector<std::string>& helper_args, int helper_processes) {
  Workshop& w = pg.planner->workshop();
  TuneJob job;
  job.tune.time_budget_s = time_budget_s;
  if (!helper.empty() && helper_processes != 0) {  // kiln.tune's build helpers: this interpreter, kiln._build_helper
    job.tune.build_helpers.executable = helper;
    job.tune.build_helpers.args = helper_args;
    job.tune.build_helpers.processes = helper_processes < 0 ? default_build_helper_processes() : helper_processes;
    job.tune.build_helpers.write_spec = [](const Graph& g) { return graph_to_spec_json(g); };
  }
  job.store = store;
  job.unfused = unfused;
  std::vector<TunedGraph> tuned;
  Status st;
  {
    nb::gil_scoped_release release;
    StatusOr<TuneWork> work = w.work_for(*pg.graph.graph);
    if (!work.is_ok()) {
      st = work.status();
    } else {
      for (const Graph& g : work->graphs) {
        StatusOr<TunedGraph> t = w.tune(g, job);
        if (!t.is_ok()) {
          st = t.status();
          break;
        }
        tuned.push_back(std::move(t).value());
      }
    }
  }
  check(st);
  nb::list out;
  for (const TunedGraph& t : tuned) out.append(tuned_dict(t));
  return out;
}

// `kiln compile`: heuristic plans built for a recorded device profile, without a GPU, stored untuned.
nb::list compile(const PyGraph& g, const std::string& target, const std::string& store) {
  if (store.empty()) bad_input("store: empty (a SQLite file or a postgresql:// location)");
  text_arg(store, "store");
  text_arg(target, "target");
  std::vector<CompiledGraph> done;
  Status st;
  {
    nb::gil_scoped_release release;
    StatusOr<DeviceProfile> profile = load_device_profile(target);
    if (!profile.is_ok()) {
      st = profile.status();
    } else {
      StatusOr<std::unique_ptr<Planner>> p = Planner::create(PlannerOptions::offline(store).with_target(*profile));
      if (!p.is_ok()) {
        st = p.status();
      } else {
        StatusOr<CompiledGraph> c = (*p)->workshop().compile(*g.graph);
        if (c.is_ok()) done.push_back(std::move(c).value());
        else st = c.status();
      }
    }
  }
  check(st);
  nb::list out;
  for (const CompiledPart& part : done[0].parts) {
    nb::dict d;
    d["graph"] = part.graph_name;
    d["structure"] = part.signature.structure;
    d["shape_key"] = part.signature.shape_key;
    d["outcome"] = std::string(compile_outcome_name(part.outcome));
    d["why"] = part.why;
    d["config"] = part.config.identity();
    d["workspace_bytes"] = part.workspace_bytes;
    out.append(d);
  }
  return out;
}

// A build helper's loop on `fd` (kiln._build_helper): it ends when the tuner closes the socket; an error it
// answered the tuner with is raised here too.
void serve_build_helper_on(int fd) {
  Status st;
  {
    nb::gil_scoped_release release;
    st = become_build_helper(fd, "kiln._build_helper", [] { ::_exit(0); });  // the helper process, not a user's
    if (st.is_ok()) {
      HelperBuilder b =
          cudnn_helper_builder([](const std::string& spec) { return parse_spec_string(spec, "the tuner"); });
      st = serve_build_helper(fd, b);
    }
  }
  check(st);
}

}  // namespace

void init_tune(nb::module_& m) {
  m.def("tune", &tune, "prepared"_a, "time_budget_s"_a = 0.0, "store"_a = true, "unfused"_a = true,
        "helper"_a = std::string(), "helper_args"_a = std::vector<std::string>(), "helper_processes"_a = 0,
        "Tunes a prepared graph (or its fused segments) with its Planner's store; one dict per graph tuned. "
        "helper, helper_args: the command that starts a build helper (kiln._build_helper); helper_processes: "
        "how many (-1: the machine's default, 0: none).");
  m.def("serve_build_helper", &serve_build_helper_on, "fd"_a,
        "Internal: a build helper's loop on the socket `fd` (kiln._build_helper).");
  m.def("compile", &compile, "graph"_a, "target"_a, "store"_a,
        "Builds the graph's heuristic plans for a recorded device profile (no GPU needed) and stores them untuned.");
}

}  // namespace kiln::py
