// kiln._kiln.Store (docs/python.md "The store"): what `kiln plans ls/verify/export/import/rm` and `kiln stats` read,
// over one open PlanStore (a SQLite file or a postgresql:// location). Records come back as dicts, without plan bytes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>

#include "kiln/core/disposition.h"
#include "kiln/core/engine_config.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"
#include "py_common.h"

namespace kiln::py {
namespace {

// An open store shared by the calls that use it: close() drops this object's hold, and a call still running keeps
// the store alive until it returns (a close while another thread's call ran freed it under that call: found by a
// hostile trial).
struct PyStore {
  struct State {
    std::mutex mu;
    std::shared_ptr<PlanStore> store;
  };
  std::shared_ptr<State> state = std::make_shared<State>();

  std::shared_ptr<PlanStore> get() const {
    std::lock_guard<std::mutex> lock(state->mu);
    if (!state->store) bad_input("the store is closed");
    return state->store;
  }
  void close() const {
    std::shared_ptr<PlanStore> last;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      last.swap(state->store);
    }
    nb::gil_scoped_release release;
    last.reset();  // closes it, unless a running call still holds it (then that call's end does)
  }
};

// `f` on the store, held for the call, with the GIL released.
template <class T, class F>
T with_store(const PyStore& s, F&& f) {
  std::shared_ptr<PlanStore> held = s.get();
  return unlocked<T>([&] { return f(*held); });
}

nb::dict summary_dict(const PlanSummary& s) {
  const PlanRecord& r = s.record;
  nb::dict d;
  d["structure"] = r.structure_sig;
  d["shape_key"] = r.shape_key;
  d["fingerprint_key"] = s.stored_fingerprint_key;
  d["config"] = plan_identity(r.engine_id, r.knobs);
  d["tuned"] = r.tuned;
  d["median_ms"] = r.stats.median_ms;
  d["verdict"] = std::string(disposition_name(r.numerics.verdict));
  d["workspace_bytes"] = r.workspace_bytes;
  d["plan_bytes"] = s.plan_size;
  d["gpu"] = r.fingerprint.gpu_name;
  d["sm"] = r.fingerprint.sm_version;
  d["cudnn"] = r.fingerprint.cudnn_version;
  d["cudnn_frontend"] = r.fingerprint.cudnn_frontend_version;
  d["tuned_by"] = r.tuned_by;
  d["created_at"] = r.created_at;
  d["problem"] = s.problem;
  return d;
}

ListFilter filter_of(const std::string& structure, const std::string& shape, const std::string& fingerprint,
                     bool tuned_only) {
  ListFilter f;
  f.structure_prefix = structure;
  f.shape_key = shape;
  f.fingerprint_key = fingerprint;
  f.tuned_only = tuned_only;
  return f;
}

PyStore open_store(const std::string& location, bool read_only, const std::optional<std::string>& mirror) {
  StoreOpenOptions o;
  o.read_only = read_only;
  text_arg(location, "location");
  if (mirror) {
    if (!is_server_location(location)) bad_input("mirror: only a server store (postgresql://...) keeps a local mirror");
    o.mirror_path = text_arg(*mirror, "mirror");
  }
  PyStore s;
  s.state->store = unlocked<std::unique_ptr<PlanStore>>([&] { return PlanStore::open(location, o); });
  return s;
}

}  // namespace

void init_store(nb::module_& m) {
  m.def("open_store", &open_store, "location"_a, "read_only"_a = false, "mirror"_a = nb::none(),
        "Opens a plan store: a SQLite file (made unless read_only) or a postgresql:// location.");
  m.def("default_store_path", &default_store_path);
  nb::class_<PyStore>(m, "Store", "A plan store (docs/store.md).")
      .def_prop_ro("location", [](const PyStore& s) { return s.get()->path(); })
      .def_prop_ro("read_only", [](const PyStore& s) { return s.get()->read_only(); })
      .def(
          "ls",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint,
             bool tuned_only) {
            ListFilter f = filter_of(structure, shape, fingerprint, tuned_only);
            std::vector<PlanSummary> rows =
                with_store<std::vector<PlanSummary>>(s, [&](PlanStore& st) { return st.list(f); });
            nb::list out;
            for (const PlanSummary& r : rows) out.append(summary_dict(r));
            return out;
          },
          "structure"_a = "", "shape"_a = "", "fingerprint"_a = "", "tuned_only"_a = false,
          "The records matching the filter (a structure prefix, a shape key, a fingerprint key), without plan bytes.")
      .def(
          "remove",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint,
             bool all) {
            ListFilter f = filter_of(structure, shape, fingerprint, false);
            return with_store<int64_t>(s, [&](PlanStore& st) { return st.remove(f, all); });
          },
          "structure"_a = "", "shape"_a = "", "fingerprint"_a = "", "all"_a = false,
          "Removes the matching records (an empty filter only with all=True); returns how many.")
      .def("verify",
           [](const PyStore& s) {
             VerifyReport r = with_store<VerifyReport>(s, [&](PlanStore& st) { return st.verify(); });
             nb::dict d;
             d["checked"] = r.checked;
             d["ok"] = r.ok;
             d["integrity"] = r.integrity;
             auto listed = [](const std::vector<VerifyProblem>& ps) {
               nb::list out;
               for (const VerifyProblem& p : ps) {
                 nb::dict q;
                 q["structure"] = p.structure_sig;
                 q["shape_key"] = p.shape_key;
                 q["fingerprint_key"] = p.fingerprint_key;
                 q["reason"] = p.reason;
                 out.append(q);
               }
               return out;
             };
             d["problems"] = listed(r.problems);
             // As `kiln plans verify --json` reports them: the kept kernel caches, and the plans in other states.
             nb::dict caches, others;
             caches["checked"] = r.kernel_caches_checked;
             caches["ok"] = r.kernel_caches_ok;
             caches["problems"] = listed(r.kernel_cache_problems);
             others["checked"] = r.rollout_checked;
             others["ok"] = r.rollout_ok;
             others["problems"] = listed(r.rollout_problems);
             d["kernel_caches"] = caches;
             d["other_states"] = others;
             return d;
           })
      .def(
          "export_bundle",
          [](const PyStore& s, const std::string& path, const std::string& structure, bool overwrite) {
            ExportOptions o;
            o.filter.structure_prefix = structure;
            o.overwrite = overwrite;
            ExportReport r =
                with_store<ExportReport>(s, [&](PlanStore& st) { return st.export_bundle(text_arg(path, "path"), o); });
            nb::dict d;
            d["records"] = r.records;
            d["graph_specs"] = r.graph_specs;
            d["fusion_records"] = r.fusion_records;
            return d;
          },
          "path"_a, "structure"_a = "", "overwrite"_a = false)
      .def(
          "import_bundle",
          [](const PyStore& s, const std::string& path) {
            ImportReport r = with_store<ImportReport>(
                s, [&](PlanStore& st) { return st.import_bundle(text_arg(path, "path"), ImportOptions{}); });
            nb::dict d;
            d["imported"] = r.imported;
            d["replaced"] = r.replaced;
            d["kept_newer"] = r.kept_newer;
            d["unchanged"] = r.unchanged;
            d["skipped_stale"] = r.skipped_stale;
            d["skipped_decided"] = r.skipped_decided;
            return d;
          },
          "path"_a, "Checks the whole bundle, then merges it in one transaction (nothing on any error).")
      .def("winner_changes",
           [](const PyStore& s) {
             std::vector<WinnerChange> rows =
                 with_store<std::vector<WinnerChange>>(s, [&](PlanStore& st) { return st.winner_changes(); });
             nb::list out;
             for (const WinnerChange& w : rows) {
               nb::dict d;
               d["structure"] = w.structure_sig;
               d["shape_key"] = w.shape_key;
               d["from_config"] = w.from_config;
               d["to_config"] = w.to_config;
               d["from_median_ms"] = w.from_median_ms;
               d["to_median_ms"] = w.to_median_ms;
               d["changed_at"] = w.changed_at;
               out.append(d);
             }
             return out;
           })
      .def(
          "candidates",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint) {
            ListFilter f = filter_of(structure, shape, fingerprint, false);
            std::vector<RolloutEntry> rows =
                with_store<std::vector<RolloutEntry>>(s, [&](PlanStore& st) { return st.rollout_entries(f); });
            nb::list out;
            for (const RolloutEntry& e : rows) {
              nb::dict d;
              d["structure"] = e.record.structure_sig;
              d["shape_key"] = e.record.shape_key;
              d["fingerprint_key"] = e.stored_fingerprint_key;
              d["config"] = e.config;
              d["state"] = e.problem.empty() ? std::string(plan_state_name(e.state)) : std::string("damaged");
              d["reason"] = e.reason;
              d["changed_at"] = e.changed_at;
              d["median_ms"] = e.record.stats.median_ms;
              d["problem"] = e.problem;
              out.append(d);
            }
            return out;
          },
          "structure"_a = "", "shape"_a = "", "fingerprint"_a = "",
          "The plans beside the active ones (candidate, shadow, retired, rejected), newest first (docs/rollout.md).")
      .def(
          "history",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint) {
            const StoredPlanKey key{structure, shape, fingerprint};
            std::vector<PlanTransition> rows =
                with_store<std::vector<PlanTransition>>(s, [&](PlanStore& st) { return st.plan_history(key); });
            nb::list out;
            for (const PlanTransition& t : rows) {
              nb::dict d;
              d["seq"] = t.seq;
              d["config"] = t.config;
              d["from"] = t.from_state;
              d["to"] = t.to_state;
              d["reason"] = t.reason;
              d["evidence"] = t.evidence;
              d["by"] = t.by;
              d["at"] = t.at;
              out.append(d);
            }
            return out;
          },
          "structure"_a, "shape"_a, "fingerprint"_a = "",
          "A key's transitions in order (every environment of the structure and shape when fingerprint is '').")
      .def(
          "transition",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint,
             const std::string& config, const std::string& to, const std::string& reason) {
            const PlanState state = value_or_raise(parse_plan_state(to));
            const StoredPlanKey key{structure, shape, fingerprint};
            std::shared_ptr<PlanStore> held = s.get();
            Status st;
            {
              nb::gil_scoped_release release;
              st = held->transition(key, config, state, reason);
            }
            check(st);
          },
          "structure"_a, "shape"_a, "fingerprint"_a, "config"_a, "to"_a, "reason"_a = "by hand (python)",
          "Moves a key's plan of `config` to state `to` ('active' promotes; 'rejected', 'shadow', 'candidate').")
      .def(
          "rollback",
          [](const PyStore& s, const std::string& structure, const std::string& shape, const std::string& fingerprint,
             const std::string& reason) {
            const StoredPlanKey key{structure, shape, fingerprint};
            PlanRecord r = with_store<PlanRecord>(s, [&](PlanStore& st) { return st.rollback(key, reason); });
            return plan_identity(r.engine_id, r.knobs);
          },
          "structure"_a, "shape"_a, "fingerprint"_a, "reason"_a = "by hand (python)",
          "Restores the key's newest retired plan (the active one is rejected); returns its configuration.")
      .def("close", [](const PyStore& s) { s.close(); });
}

}  // namespace kiln::py
