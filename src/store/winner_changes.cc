// The store's winner changes (kiln/store/winner_change.h, docs/fleet.md "Winner changes"): kept by put() when a
// tuned record replaces a tuned one of another configuration, in put's transaction.
#include "kiln/core/engine_config.h"
#include "kiln/core/log.h"
#include "store/record_codec.h"
#include "store/sql_plan_store.h"
#include "store/sql_table.h"
#include "store/tables.h"

namespace kiln {

namespace {

store::Row encode(const WinnerChange& c) {
  return store::row_of(c.structure_sig, c.shape_key, c.fingerprint_key, c.from_config, c.to_config, c.from_median_ms,
                       c.to_median_ms, c.from_tuned_by, c.to_tuned_by, c.changed_at);
}

std::string decode(const store::Row& row, WinnerChange* c) {
  store::RowCursor(row) >> c->structure_sig >> c->shape_key >> c->fingerprint_key >> c->from_config >> c->to_config >>
      c->from_median_ms >> c->to_median_ms >> c->from_tuned_by >> c->to_tuned_by >> c->changed_at;
  return "";
}

}  // namespace

// No checksum: a log of what happened, like the re-tune log; it never decides what runs.
const store::RecordCodec<WinnerChange>& store::winner_change_codec() {
  static const TableCodec t{
      "winner_changes",
      {text("structure_sig"), text("shape_key"), text("fingerprint_key"), text("from_config"), text("to_config"),
       real("from_median_ms"), real("to_median_ms"), text("from_tuned_by"), text("to_tuned_by"), integer("changed_at")},
      {"structure_sig", "shape_key", "fingerprint_key", "changed_at", "to_config"},
      nullptr};
  return make_codec(t, encode, decode);
}

std::optional<WinnerChange> SqlPlanStore::winner_change_of(const PlanRecord& old, const PlanRecord& incoming,
                                                           int64_t at) {
  if (!incoming.tuned || !old.tuned) return std::nullopt;
  const std::string from = plan_identity(old.engine_id, old.knobs);
  const std::string to = plan_identity(incoming.engine_id, incoming.knobs);
  if (from == to) return std::nullopt;
  return WinnerChange{
      incoming.structure_sig,   incoming.shape_key, incoming.fingerprint_key(), from, to, old.stats.median_ms,
      incoming.stats.median_ms, old.tuned_by,       incoming.tuned_by,          at};
}

StatusOr<std::vector<WinnerChange>> SqlPlanStore::winner_changes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WinnerChange> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "winner_changes"));
  if (!exists) return out;  // a read-only store written before the table existed
  KILN_ASSIGN_OR_RETURN(auto rows,
                        store::select_records(db_, store::winner_change_codec(), " ORDER BY changed_at", {}));
  for (auto& r : rows) {
    if (r.problem.empty()) out.push_back(std::move(r.record));
    else KILN_LOG(kWarn, "plan store " << path_ << ": a winner change skipped: " << r.problem);  // a log, not a plan
  }
  return out;
}

}  // namespace kiln
