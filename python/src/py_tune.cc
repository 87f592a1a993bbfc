// kiln._kiln.tune (docs/python.md "Tuning"): `kiln tune` for one graph, through a Planner's workshop: the graph (or
// its fused segments) tuned, the unfused alternative timed and decided on, the winner stored. In this process (the
// CLI runs the tuner in a supervised worker; a tune that crashes cuDNN takes this process with it).
#include <nanobind/stl/string.h>

#include "kiln/core/disposition.h"
#include "kiln/runtime/workshop.h"
#include "py_common.h"
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

nb::list tune(const PyPrepared& pg, double time_budget_s, bool store, bool unfused) {
  Workshop& w = pg.planner->workshop();
  TuneJob job;
  job.tune.time_budget_s = time_budget_s;
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

}  // namespace

void init_tune(nb::module_& m) {
  m.def("tune", &tune, "prepared"_a, "time_budget_s"_a = 0.0, "store"_a = true, "unfused"_a = true,
        "Tunes a prepared graph (or its fused segments) with its Planner's store; one dict per graph tuned.");
}

}  // namespace kiln::py
