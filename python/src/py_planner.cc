// kiln._kiln.Planner, PreparedGraph and Plan (docs/python.md "Serving"): thin over kiln::Planner. Every call that
// can block (create, obtain, preload, promotions, execute) runs with the GIL released.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <limits>

#include "kiln/runtime/planner_options.h"
#include "kiln/store/store_path.h"
#include "py_common.h"
#include "py_planner.h"
#include "py_tensors.h"

namespace kiln::py {

PyPrepared prepare(const PyPlanner& p, const PyGraph& g) {
  PyPrepared out;
  out.planner = p.planner;
  out.prepared = value_or_raise(p.planner->prepare(*g.graph));
  out.graph = g;
  return out;
}

Obtained obtain(Planner& planner, const PreparedGraph& pg, const std::map<std::string, int64_t>& shape) {
  return unlocked<Obtained>([&] { return planner.obtain(pg, shape); });
}

namespace {

template <class E, size_t N>
E by_name(const EnumName<E> (&names)[N], const std::string& what, const std::string& text) {
  std::string known;
  for (const auto& n : names) {
    if (text == n.name) return n.value;
    known += (known.empty() ? "" : ", ") + std::string(n.name);
  }
  bad_input(what + ": unknown value '" + text + "' (known: " + known + ")");
}

constexpr EnumName<NewShapes> kNewShapes[] = {{NewShapes::kStopgap, "stopgap"}, {NewShapes::kBuildNow, "build_now"}};
constexpr EnumName<PromoteBy> kPromoteBy[] = {{PromoteBy::kBuild, "build"}, {PromoteBy::kTune, "tune"}};
constexpr EnumName<FirstUse> kFirstUse[] = {{FirstUse::kVerify, "verify"}, {FirstUse::kOff, "off"}};

PyPlanner make_planner(const std::optional<std::string>& store, const std::string& preset,
                       const std::optional<bool>& writable, const std::optional<std::string>& policy,
                       const std::optional<std::string>& buckets, const std::optional<std::string>& new_shapes,
                       const std::optional<bool>& promote, const std::string& promote_by,
                       const std::optional<std::string>& first_use, const std::optional<std::string>& mirror,
                       int handles, nb::handle shadow_every, const std::vector<const PyGraph*>& preload,
                       bool preload_warm) {
  const std::string path = text_arg(store.value_or(""), "store");
  PlannerOptions o;
  if (preset == "serving") {
    o = PlannerOptions::serving(path);
  } else if (preset == "tools") {
    o = PlannerOptions::tools(path);
  } else if (preset == "offline") {
    o = PlannerOptions::offline(path);
  } else {
    bad_input("preset: unknown value '" + preset + "' (known: serving, tools, offline)");
  }
  if (writable) o.with_store(path, *writable);
  if (policy) {
    EnvPolicy p = o.policy;
    p.on_mismatch = value_or_raise(parse_mismatch_policy(*policy));
    o.with_policy(p);
  }
  if (buckets) o.with_buckets(value_or_raise(BucketPolicy::parse(*buckets)));
  if (new_shapes) o.with_new_shapes(by_name(kNewShapes, "new_shapes", *new_shapes));
  const PromoteBy by = by_name(kPromoteBy, "promote_by", promote_by);
  if (promote || by != o.promote_by) o.with_promotion(promote.value_or(o.promote), by);
  if (first_use) o.with_first_use(by_name(kFirstUse, "first_use", *first_use));
  if (mirror) {
    if (!is_server_location(path)) bad_input("mirror: only a server store (postgresql://...) keeps a local mirror");
    o.with_mirror(text_arg(*mirror, "mirror"));
  }
  if (handles < 0) bad_input("handles: " + std::to_string(handles) + ", at least 1 (0: the preset's)");
  if (handles > 0) o.with_handles(handles);
  if (!shadow_every.is_none()) {
    // An int, not a bool, a float or a string nanobind would convert (found by a hostile trial).
    if (!PyLong_Check(shadow_every.ptr()) || PyBool_Check(shadow_every.ptr()))
      throw nb::type_error(
          ("shadow_every: an int expected, got a " + nb::cast<std::string>(nb::type_name(shadow_every.type())))
              .c_str());
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(shadow_every.ptr(), &overflow);
    if (overflow != 0 || n < 0 || n > std::numeric_limits<int>::max())
      bad_input("shadow_every: " + nb::cast<std::string>(nb::str(shadow_every)) + ", 0 to " +
                std::to_string(std::numeric_limits<int>::max()) + " (0: shadow plans are not run)");
    o.shadow.sample_every = static_cast<int>(n);
  }
  std::vector<Graph> graphs;
  for (const PyGraph* g : preload) {
    if (g == nullptr) bad_input("preload[" + std::to_string(graphs.size()) + "]: None is not a graph");
    graphs.push_back(*g->graph);
  }
  if (!graphs.empty()) o.with_preload(std::move(graphs), preload_warm);
  std::unique_ptr<Planner> made = unlocked<std::unique_ptr<Planner>>([&] { return Planner::create(o); });
  // A Planner's destructor joins its threads (create()'s loads, promotions, the store watch): never with the GIL
  // held, which would stop every other Python thread meanwhile.
  return PyPlanner{std::shared_ptr<Planner>(made.release(), [](Planner* p) {
    if (PyGILState_Check()) {
      nb::gil_scoped_release release;
      delete p;
    } else {
      delete p;
    }
  })};
}

nb::dict preload_dict(const PreloadReport& rep) {
  nb::dict d;
  d["loaded"] = rep.loaded;
  d["warmed"] = rep.warmed;
  d["failed"] = rep.failed;
  d["last_failure"] = rep.last_failure;
  d["ms"] = rep.ms;
  return d;
}

nb::dict stats_dict(const PlannerStats& s) {
  nb::dict d, served;
  for (int i = 0; i < kPlanSourceCount; ++i) served[plan_source_name(static_cast<PlanSource>(i))] = s.served[i];
  d["served"] = served;
  d["builds"] = s.builds;
  d["failures"] = s.failures;
  d["cached"] = s.cached;
  d["stopgaps"] = s.stopgaps;
  d["promotions"] = s.promotions;
  d["promotion_failures"] = s.promotion_failures;
  d["first_use_checks"] = s.first_use_checks;
  d["first_use_refused"] = s.first_use_refused;
  d["shadow_trials"] = s.shadow_trials;
  d["shadow_samples"] = s.shadow_samples;
  d["shadow_disagreements"] = s.shadow_disagreements;
  d["shadow_promotions"] = s.shadow_promotions;
  d["shadow_rejections"] = s.shadow_rejections;
  d["shadow_unrecorded"] = s.shadow_unrecorded;
  d["first_use_rollbacks"] = s.first_use_rollbacks;
  d["graph_captures"] = s.graph_captures;
  d["graph_replays"] = s.graph_replays;
  d["text"] = s.text();
  return d;
}

// plan(workspace=None, stream=None, **tensors): every tensor read and checked, then the plan on the stream.
void call_plan(const PyPlan& p, nb::handle workspace, nb::handle stream, nb::kwargs tensors) {
  const ExecutablePlan& plan = *p.obtained.plan;
  const Graph& g = plan.graph();
  TensorBindings bindings;
  for (auto [key, value] : tensors) {
    std::string name = nb::cast<std::string>(key);
    int t = g.find_tensor(name);
    if (t < 0) {
      std::string known;
      BoundNames b = bound_names(g);
      for (int i : b.inputs) known += (known.empty() ? "" : ", ") + g.tensors[i].name;
      for (int i : b.outputs) known += ", " + g.tensors[i].name;
      bad_input("tensor '" + name + "': graph '" + g.name + "' has no such tensor (it binds " + known + ")");
    }
    bindings[name] = checked_binding(read_tensor(value, name), g, t);
  }
  cudaStream_t s = read_stream(stream);
  void* ws = read_workspace(workspace, plan.workspace_bytes());
  // Checked before a workspace is allocated for a call that cannot run (execute checks them again in any case).
  if (ws == nullptr && plan.workspace_bytes() > 0) check(plan.check_bindings(bindings));
  Status st;
  {
    nb::gil_scoped_release release;
    if (ws == nullptr && plan.workspace_bytes() > 0) {
      StreamScratch scratch(s, plan.workspace_bytes());
      st = plan.execute(s, bindings, scratch.get());
    } else {
      st = plan.execute(s, bindings, ws);
    }
  }
  check(st);
}

// The C++ Planner's own per-call cost, for the Python overhead benchmark (bench/python/overhead.py): `n` calls of
// obtain() (a memory hit) and execute() on fixed bindings, timed in C++ with the GIL released; seconds in all.
// The bindings of `tensors` (name=tensor keywords) for `g`, checked.
TensorBindings fixed_bindings(const Graph& g, nb::kwargs tensors) {
  TensorBindings bindings;
  for (auto [key, value] : tensors) {
    std::string name = nb::cast<std::string>(key);
    int t = g.find_tensor(name);
    if (t < 0) bad_input("tensor '" + name + "': no such tensor");
    bindings[name] = checked_binding(read_tensor(value, name), g, t);
  }
  return bindings;
}

double time_cpp_calls(const PyPrepared& pg, const std::map<std::string, int64_t>& shape, nb::handle stream, int64_t n,
                      nb::kwargs tensors) {
  Obtained first = obtain(*pg.planner, pg.prepared, shape);
  const TensorBindings bindings = fixed_bindings(first.plan->graph(), tensors);
  cudaStream_t s = read_stream(stream);
  Status st;
  std::chrono::steady_clock::duration took{};
  {
    nb::gil_scoped_release release;
    StreamScratch ws(s, first.plan->workspace_bytes());
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n && st.is_ok(); ++i) {
      StatusOr<Obtained> o = pg.planner->obtain(pg.prepared, shape);
      st = o.is_ok() ? o->plan->execute(s, bindings, ws.get()) : o.status();
    }
    took = std::chrono::steady_clock::now() - t0;
  }
  check(st);
  return std::chrono::duration<double>(took).count();
}

// The C++ baseline's pieces, for the same benchmark's parts: seconds for `n` calls of each, looped in C++ with the
// GIL released: "obtain" obtain() (a memory hit), "obtain_held" obtain_held() (the torch op's lookup), "execute"
// execute() of the plan obtained once.
nb::dict time_cpp_parts(const PyPrepared& pg, const std::map<std::string, int64_t>& shape, nb::handle stream, int64_t n,
                        nb::kwargs tensors) {
  Obtained first = obtain(*pg.planner, pg.prepared, shape);
  const TensorBindings bindings = fixed_bindings(first.plan->graph(), tensors);
  cudaStream_t s = read_stream(stream);
  using clock = std::chrono::steady_clock;
  double took[3] = {};
  Status st;
  {
    nb::gil_scoped_release release;
    StreamScratch ws(s, first.plan->workspace_bytes());
    auto t0 = clock::now();
    for (int64_t i = 0; i < n && st.is_ok(); ++i) st = pg.planner->obtain(pg.prepared, shape).status();
    took[0] = std::chrono::duration<double>(clock::now() - t0).count();
    t0 = clock::now();
    for (int64_t i = 0; i < n && st.is_ok(); ++i) {
      if (!pg.planner->obtain_held(pg.prepared, shape)) st = internal_error("obtain_held missed a plan obtain() holds");
    }
    took[1] = std::chrono::duration<double>(clock::now() - t0).count();
    t0 = clock::now();
    for (int64_t i = 0; i < n && st.is_ok(); ++i) st = first.plan->execute(s, bindings, ws.get());
    took[2] = std::chrono::duration<double>(clock::now() - t0).count();
  }
  check(st);
  nb::dict out;
  out["obtain"] = took[0];
  out["obtain_held"] = took[1];
  out["execute"] = took[2];
  return out;
}

}  // namespace

void init_planner(nb::module_& m) {
  nb::class_<PyPlanner>(m, "Planner", "kiln::Planner: plans for graphs at shapes, from the cheapest source.")
      .def(nb::new_(&make_planner), "store"_a = nb::none(), "preset"_a = "serving", "writable"_a = nb::none(),
           "policy"_a = nb::none(), "buckets"_a = nb::none(), "new_shapes"_a = nb::none(), "promote"_a = nb::none(),
           "promote_by"_a = "build", "first_use"_a = nb::none(), "mirror"_a = nb::none(), "handles"_a = 0,
           nb::arg("shadow_every").none() = nb::none(), "preload"_a = std::vector<const PyGraph*>{},
           "preload_warm"_a = true)
      .def("prepare", &prepare, "graph"_a, "Validates the graph and computes its signature once.")
      .def(
          "obtain",
          [](const PyPlanner& p, const PyPrepared& pg, const std::map<std::string, int64_t>& shape) {
            if (pg.planner != p.planner) bad_input("obtain: the graph was prepared by another Planner");
            return PyPlan{p.planner, obtain(*p.planner, pg.prepared, shape)};
          },
          "graph"_a, "shape"_a = std::map<std::string, int64_t>{})
      .def(
          "preload",
          [](const PyPlanner& p, const PyPrepared& pg, bool warm) {
            return preload_dict(unlocked<PreloadReport>([&] { return p.planner->preload(pg.prepared, warm); }));
          },
          "graph"_a, "warm"_a = false)
      .def(
          "wait_for_preload",
          [](const PyPlanner& p) {
            return preload_dict(unlocked<PreloadReport>([&] { return p.planner->wait_for_preload(); }));
          },
          "What create()'s loads of the graphs given as preload= loaded, once they are done.")
      .def("wait_for_promotions",
           [](const PyPlanner& p) {
             nb::gil_scoped_release release;
             p.planner->wait_for_promotions();
           })
      .def("stats", [](const PyPlanner& p) { return stats_dict(p.planner->stats()); });

  m.def("_time_cpp_calls", &time_cpp_calls, "prepared"_a, "shape"_a, nb::arg("stream").none(), "n"_a, "tensors"_a,
        "Seconds for n C++ calls of obtain() and execute() (the Python overhead benchmark's baseline).");
  m.def("_time_cpp_parts", &time_cpp_parts, "prepared"_a, "shape"_a, nb::arg("stream").none(), "n"_a, "tensors"_a,
        "Seconds for n C++ calls of obtain(), obtain_held() and execute() each (the benchmark's parts).");

  nb::class_<PyPrepared>(m, "PreparedGraph", "A graph a Planner validated and signed once.")
      .def_prop_ro("graph", [](const PyPrepared& p) { return p.graph; });

  nb::class_<PyPlan>(m, "Plan", "A plan ready to execute on the caller's CUDA tensors.")
      .def_prop_ro(
          "source", [](const PyPlan& p) { return std::string(plan_source_name(p.obtained.source)); },
          "Where this call got it: memory, store, split, padded, dynamic, bucket, heuristics, tuned, ...")
      .def_prop_ro("built_from",
                   [](const PyPlan& p) { return std::string(plan_source_name(p.obtained.plan->built_from())); })
      .def_prop_ro(
          "why", [](const PyPlan& p) { return p.obtained.why; }, "The sources that missed before it, and why.")
      .def_prop_ro(
          "config", [](const PyPlan& p) { return p.obtained.plan->identity(); },
          "What runs: the engine configuration ('eng12_k2=1'), or a chain ('unfused[...]').")
      .def_prop_ro("workspace_bytes", [](const PyPlan& p) { return p.obtained.plan->workspace_bytes(); })
      .def_prop_ro("obtain_ms", [](const PyPlan& p) { return p.obtained.obtain_ms; })
      .def_prop_ro("notes", [](const PyPlan& p) { return p.obtained.plan->notes(); })
      .def_prop_ro("graph",
                   [](const PyPlan& p) {
                     PyGraph g;
                     g.graph = std::make_shared<const Graph>(p.obtained.plan->graph());
                     g.signature = p.obtained.plan->signature();
                     return g;
                   })
      .def("__call__", &call_plan, nb::arg("workspace").none() = nb::none(), nb::arg("stream").none() = nb::none(),
           "tensors"_a,
           "Runs the plan on the given tensors (every input and output by name) on `stream`; a workspace the "
           "caller does not pass is allocated stream-ordered for the call.")
      .def("__repr__", [](const PyPlan& p) {
        return "kiln.Plan(" + p.obtained.plan->identity() + ", source=" + plan_source_name(p.obtained.source) +
               ", workspace_bytes=" + std::to_string(p.obtained.plan->workspace_bytes()) + ")";
      });
}

}  // namespace kiln::py
