// The store's graph specs (docs/store.md "Graph specs"): the graph behind a (structure, shape) as spec JSON,
// so that its plans can be re-run and checked without the original file.
#include "kiln/core/log.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_plan_store.h"
#include "store/sql_table.h"

namespace kiln {

namespace {

std::string spec_name(const std::string& sig, const std::string& shape) { return sig.substr(0, 12) + "/" + shape; }

const store::TableCodec& graph_specs_table() {
  static const store::TableCodec t{
      "graph_specs",
      {store::text("structure_sig"), store::text("shape_key"), store::text("graph_name"), store::text("spec_json"),
       store::integer("created_at"), store::text("checksum", store::kUnchecked)},
      {"structure_sig", "shape_key"},
      "kiln-graph-spec/v1"};
  return t;
}

store::Row encode(const GraphSpecEntry& e) {
  return store::row_of(e.structure_sig, e.shape_key, e.graph_name, e.spec_json, e.created_at, e.checksum);
}

std::string decode(const store::Row& row, GraphSpecEntry* e) {
  store::RowCursor(row) >> e->structure_sig >> e->shape_key >> e->graph_name >> e->spec_json >> e->created_at >>
      e->checksum;
  return store::checksum_problem(e->checksum, graph_specs_table().checksum(row));
}

std::string row_name(const store::Row& row) { return spec_name(row[0].text, row[1].text); }

}  // namespace

const store::RecordCodec<GraphSpecEntry>& store::graph_spec_codec() {
  return make_codec(graph_specs_table(), encode, decode);
}

std::string compute_graph_spec_checksum(const GraphSpecEntry& e) { return store::graph_spec_codec().checksum(e); }

StatusOr<GraphSpecEntry> SqlPlanStore::put_graph_spec(const std::string& structure_sig, const std::string& shape_key,
                                                      const std::string& graph_name, const std::string& spec_json) {
  if (structure_sig.empty()) return invalid_argument("graph spec: empty structure signature");
  if (spec_json.empty()) return invalid_argument("graph spec " + spec_name(structure_sig, shape_key) + ": empty spec");
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  GraphSpecEntry e{structure_sig, shape_key, graph_name, spec_json, store::unix_now(), ""};
  e.checksum = compute_graph_spec_checksum(e);
  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(store::put_row(db_, graph_specs_table(), encode(e)));
  return e;
}

StatusOr<std::optional<GraphSpecEntry>> SqlPlanStore::get_graph_spec(const std::string& structure_sig,
                                                                     const std::string& shape_key) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "graph_specs"));
  if (!exists) return std::optional<GraphSpecEntry>();
  KILN_ASSIGN_OR_RETURN(auto rows, store::select_records(db_, store::graph_spec_codec(),
                                                         graph_specs_table().where_key(), {structure_sig, shape_key}));
  if (rows.empty()) return std::optional<GraphSpecEntry>();
  if (rows[0].problem.empty()) return std::optional<GraphSpecEntry>(std::move(rows[0].record));
  // A graph spec can be written again by whoever has the graph: a damaged one is dropped, not quarantined.
  KILN_RETURN_IF_ERROR(drop_corrupt_locked("graph spec", spec_name(structure_sig, shape_key), rows[0].problem, "", [&] {
    return store::delete_by_key(db_, graph_specs_table(), {structure_sig, shape_key});
  }));
  return std::optional<GraphSpecEntry>();
}

StatusOr<std::vector<GraphSpecEntry>> SqlPlanStore::list_graph_specs() {
  std::lock_guard<std::mutex> lock(mu_);
  return store::list_sound(db_, path_, store::graph_spec_codec(), "ORDER BY structure_sig, shape_key", "graph spec",
                           row_name);
}

}  // namespace kiln
