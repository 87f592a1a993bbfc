// PlanStore's graph specs (docs/store.md "Graph specs"): the graph behind a (structure, shape) as spec JSON,
// so that its plans can be re-run and checked without the original file.
#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::Stmt;
using store::Txn;

using store::put_field;

namespace {

std::string spec_name(const std::string& sig, const std::string& shape) { return sig.substr(0, 12) + "/" + shape; }

}  // namespace

std::string compute_graph_spec_checksum(const GraphSpecEntry& e) {
  std::string canon = "kiln-graph-spec/v1\n";
  put_field(canon, "structure_sig", e.structure_sig);
  put_field(canon, "shape_key", e.shape_key);
  put_field(canon, "graph_name", e.graph_name);
  put_field(canon, "spec_json", e.spec_json);
  put_field(canon, "created_at", std::to_string(e.created_at));
  return stable_hash128_hex(canon);
}

namespace store {

std::string graph_specs_table_sql(const char* table) {
  return std::string("CREATE TABLE IF NOT EXISTS ") + table +
         "(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  shape_key TEXT NOT NULL,\n"
         "  graph_name TEXT NOT NULL,\n"
         "  spec_json TEXT NOT NULL,\n"
         "  created_at INTEGER NOT NULL,\n"
         "  checksum TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, shape_key)\n"
         ")";
}

void bind_graph_spec(Stmt& st, int i, const GraphSpecEntry& e) {
  st.bind(i + 0, e.structure_sig)
      .bind(i + 1, e.shape_key)
      .bind(i + 2, e.graph_name)
      .bind(i + 3, e.spec_json)
      .bind(i + 4, e.created_at)
      .bind(i + 5, e.checksum);
}

std::string read_graph_spec(const Stmt& st, int i, GraphSpecEntry* e) {
  const char* names[] = {"structure_sig", "shape_key", "graph_name", "spec_json", "created_at", "checksum"};
  for (int c = 0; c < 6; ++c) {
    int want = c == 4 ? SQLITE_INTEGER : SQLITE_TEXT;
    if (st.type(i + c) != want) return std::string("column ") + names[c] + " has the wrong type";
  }
  e->structure_sig = st.text(i + 0);
  e->shape_key = st.text(i + 1);
  e->graph_name = st.text(i + 2);
  e->spec_json = st.text(i + 3);
  e->created_at = st.int64(i + 4);
  e->checksum = st.text(i + 5);
  std::string sum = compute_graph_spec_checksum(*e);
  if (sum != e->checksum) return "checksum mismatch (stored " + e->checksum + ", computed " + sum + ")";
  return std::string();
}

}  // namespace store

StatusOr<GraphSpecEntry> PlanStore::put_graph_spec(const std::string& structure_sig, const std::string& shape_key,
                                                   const std::string& graph_name, const std::string& spec_json) {
  if (structure_sig.empty()) return invalid_argument("graph spec: empty structure signature");
  if (spec_json.empty()) return invalid_argument("graph spec " + spec_name(structure_sig, shape_key) + ": empty spec");
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  GraphSpecEntry e{structure_sig, shape_key, graph_name, spec_json, store::unix_now(), ""};
  e.checksum = compute_graph_spec_checksum(e);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO graph_specs(") +
                                                        store::kGraphSpecColumns + ") VALUES (?1,?2,?3,?4,?5,?6)"));
  store::bind_graph_spec(st, 1, e);
  KILN_RETURN_IF_ERROR(st.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return e;
}

StatusOr<std::optional<GraphSpecEntry>> PlanStore::get_graph_spec(const std::string& structure_sig,
                                                                  const std::string& shape_key) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "graph_specs"));
  if (!exists) return std::optional<GraphSpecEntry>();
  std::string problem;
  GraphSpecEntry e;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + store::kGraphSpecColumns +
                                                          " FROM graph_specs WHERE structure_sig=?1 AND shape_key=?2"));
    st.bind(1, structure_sig).bind(2, shape_key);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<GraphSpecEntry>();
    problem = store::read_graph_spec(st, 0, &e);
  }
  if (problem.empty()) return std::optional<GraphSpecEntry>(std::move(e));
  // A graph spec can be written again by whoever has the graph: a damaged one is dropped, not quarantined.
  std::string name = spec_name(structure_sig, shape_key);
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt graph spec " << name << " (" << problem
                                  << "); read-only, left in place");
    return std::optional<GraphSpecEntry>();
  }
  KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt graph spec " << name << ": " << problem);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt del,
                        Stmt::prepare(db_, "DELETE FROM graph_specs WHERE structure_sig=?1 AND shape_key=?2"));
  del.bind(1, structure_sig).bind(2, shape_key);
  KILN_RETURN_IF_ERROR(del.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return std::optional<GraphSpecEntry>();
}

StatusOr<std::vector<GraphSpecEntry>> PlanStore::list_graph_specs() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GraphSpecEntry> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "graph_specs"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + store::kGraphSpecColumns +
                                                        " FROM graph_specs ORDER BY structure_sig, shape_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    GraphSpecEntry e;
    std::string problem = store::read_graph_spec(st, 0, &e);
    if (!problem.empty()) {
      KILN_LOG(kWarn, "plan store " << path_ << ": skipped corrupt graph spec " << spec_name(st.text(0), st.text(1))
                                    << ": " << problem);
      continue;
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln
