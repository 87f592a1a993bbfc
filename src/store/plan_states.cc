// Plan states and their history in the store (kiln/store/plan_rollout.h, docs/rollout.md): the non-active plans of a
// key in `plan_rollout` (whole records, beside their state), every transition in `plan_history`, and activation, the
// one way a plan becomes the key's `plans` row (put, a bundle import, a promotion, a rollback).
#include <limits>

#include "kiln/core/engine_config.h"
#include "kiln/core/log.h"
#include "store/record_codec.h"
#include "store/sql_plan_store.h"
#include "store/sql_table.h"
#include "store/tables.h"

namespace kiln {

using store::unix_now;
using store::user_at_host;

namespace {

store::Row encode(const PlanTransition& t) {
  return store::row_of(t.structure_sig, t.shape_key, t.fingerprint_key, t.seq, t.config, t.from_state, t.to_state,
                       t.reason, t.evidence, t.by, t.at);
}

std::string decode(const store::Row& row, PlanTransition* t) {
  store::RowCursor(row) >> t->structure_sig >> t->shape_key >> t->fingerprint_key >> t->seq >> t->config >>
      t->from_state >> t->to_state >> t->reason >> t->evidence >> t->by >> t->at;
  return "";
}

std::string config_of(const PlanRecord& r) { return plan_identity(r.engine_id, r.knobs); }

std::string name_of(const StoredPlanKey& k) {
  return store::record_name(k.structure_sig, k.shape_key, k.fingerprint_key);
}

constexpr const char* kRolloutKeyWhere = " WHERE structure_sig=?1 AND shape_key=?2 AND fingerprint_key=?3";

// A rollout row read from column 0, in plan_rollout_table()'s order (its state, reason, time, configuration and
// history number, then the record's columns).
RolloutEntry read_entry(const store::Stmt& st) {
  RolloutEntry e;
  // The row's own columns, of their types: a damaged number or state is named, never read as 0 or "" (found by a
  // hostile trial: seq 'x', -5 or NULL, changed_at 'yesterday', a blob reason all passed verify).
  std::string bookkeeping;
  if (st.type(0) != SQLITE_TEXT) bookkeeping = "its state column is not text";
  else if (st.type(1) != SQLITE_TEXT) bookkeeping = "its reason column is not text";
  else if (st.type(2) != SQLITE_INTEGER) bookkeeping = "its changed_at column is not an integer";
  else if (st.type(3) != SQLITE_TEXT) bookkeeping = "its config column is not text";
  else if (st.type(4) != SQLITE_INTEGER || st.int64(4) < 1) bookkeeping = "its history number (seq) is damaged";
  const std::string state = st.text(0);
  e.reason = st.text(1);
  e.changed_at = st.int64(2);
  e.config = st.text(3);
  e.seq = st.int64(4);
  store::RowRead r = store::read_record(st, 5);
  e.stored_fingerprint_key = r.stored_fingerprint_key;
  e.problem = r.problem.empty() ? store::record_problem(r) : r.problem;
  e.record = std::move(r.record);
  StatusOr<PlanState> s = parse_plan_state(state);
  if (s.is_ok()) e.state = *s;
  else if (e.problem.empty()) e.problem = "state '" + state + "' is not a plan state";
  if (e.problem.empty() && (e.state == PlanState::kActive || config_of(e.record) != e.config))
    e.problem = "its state or configuration column disagrees with its record";
  if (e.problem.empty()) e.problem = bookkeeping;
  return e;
}

}  // namespace

// No checksum: a log of what happened; it never decides what runs.
const store::RecordCodec<PlanTransition>& store::plan_history_codec() {
  static const TableCodec t{
      "plan_history",
      {text("structure_sig"), text("shape_key"), text("fingerprint_key"), integer("seq"), text("config"),
       text("from_state"), text("to_state"), text("reason"), text("evidence"), text("by_whom"), integer("at")},
      {"structure_sig", "shape_key", "fingerprint_key", "seq"},
      nullptr};
  return make_codec(t, encode, decode);
}

// The plans table's columns after the rollout's own; the record keeps its checksum column (checked when read).
const store::TableCodec& store::plan_rollout_table() {
  static const TableCodec t = [] {
    TableCodec c{"plan_rollout",
                 {text("state"), text("reason"), integer("changed_at"), text("config"), integer("seq")},
                 {"structure_sig", "shape_key", "fingerprint_key", "config"},
                 nullptr};
    for (const Column& col : plans_table().columns) c.columns.push_back(col);
    return c;
  }();
  return t;
}

StatusOr<int64_t> SqlPlanStore::history_locked(const StoredPlanKey& key, const std::string& config,
                                               const std::string& from, PlanState to, const std::string& reason,
                                               const std::string& evidence) {
  // The key's next number: its history's order (and its rollout rows'), whatever the clock says.
  KILN_ASSIGN_OR_RETURN(store::Stmt st, store::Stmt::prepare(db_, std::string("SELECT COALESCE(MAX(seq), 0) FROM "
                                                                              "plan_history") +
                                                                      kRolloutKeyWhere));
  st.bind(1, key.structure_sig).bind(2, key.shape_key).bind(3, key.fingerprint_key);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  // A damaged number (text, or at the end of its range) would wrap or collide with a row it then replaced (found by
  // a hostile trial): the history is refused as damaged, never renumbered.
  if (row && st.type(0) != SQLITE_INTEGER)
    return corruption("plan store " + path_ + ": " + name_of(key) + ": its history's numbers are damaged");
  const int64_t last = row ? st.int64(0) : 0;
  KILN_RETURN_IF_ERROR(st.reset());
  if (last < 0 || last >= std::numeric_limits<int64_t>::max() - 1)
    return corruption("plan store " + path_ + ": " + name_of(key) + ": its history's numbers are damaged (" +
                      std::to_string(last) + ")");
  const int64_t seq = last + 1;
  const PlanTransition t{
      key.structure_sig, key.shape_key,  key.fingerprint_key, seq, config, from, plan_state_name(to), reason,
      evidence,          user_at_host(), unix_now()};
  // A plain INSERT: a history row never replaces another.
  KILN_ASSIGN_OR_RETURN(store::Stmt ins,
                        store::Stmt::prepare(db_, store::plan_history_codec().table.insert_sql("INSERT")));
  store::plan_history_codec().bind(ins, 1, t);
  KILN_RETURN_IF_ERROR(ins.run());
  // Ours, for changed_plans() to skip (this object's, or a reader's it was shared with). Recorded whatever the
  // watcher's state: a watcher that starts between this insert and its commit must still know the row is ours.
  if (db_->dialect() == store::SqlDialect::kSqlite) {
    KILN_ASSIGN_OR_RETURN(store::Stmt id, store::Stmt::prepare(db_, "SELECT last_insert_rowid()"));
    KILN_ASSIGN_OR_RETURN(bool got, id.step());
    std::shared_ptr<OwnHistory> own = own_;
    std::lock_guard<std::mutex> lock(own->mu);
    if (got) own->rows[id.int64(0)] = history_row_id(key.structure_sig, key.shape_key, key.fingerprint_key, seq);
    // A process that writes history and never watches (a tuner) keeps a bounded record.
    while (own->rows.size() > 100000) own->rows.erase(own->rows.begin());
  }
  return seq;
}

Status SqlPlanStore::put_rollout_locked(const PlanRecord& r, PlanState state, const std::string& reason, int64_t seq) {
  store::Row row = store::row_of(std::string(plan_state_name(state)), reason, unix_now(), config_of(r), seq);
  for (store::Value& v : store::encode_record(r)) row.push_back(std::move(v));
  return store::insert_row(db_, store::plan_rollout_table(), row);
}

StatusOr<std::optional<store::RowRead>> SqlPlanStore::active_row_locked(const StoredPlanKey& key) {
  KILN_ASSIGN_OR_RETURN(store::Stmt st, store::Stmt::prepare(db_, "SELECT " + store::record_columns() + " FROM plans" +
                                                                      kRolloutKeyWhere));
  st.bind(1, key.structure_sig).bind(2, key.shape_key).bind(3, key.fingerprint_key);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<store::RowRead>();
  store::RowRead r = store::read_record(st, 0);
  if (r.problem.empty()) r.problem = store::record_problem(r);
  KILN_RETURN_IF_ERROR(st.reset());
  return std::optional<store::RowRead>(std::move(r));
}

// The row's state is not covered by the record's checksum: it must be what the history row it names says (found by
// a hostile trial: a rejected plan's state edited to 'retired' was rolled back to, one edited to 'candidate'
// promoted). A row whose history disagrees, or is missing, is damaged: never activated, named by verify.
StatusOr<std::string> SqlPlanStore::history_mismatch_locked(const RolloutEntry& e) {
  if (!e.problem.empty()) return e.problem;
  KILN_ASSIGN_OR_RETURN(store::Stmt st, store::Stmt::prepare(db_, std::string("SELECT config, to_state FROM "
                                                                              "plan_history") +
                                                                      kRolloutKeyWhere + " AND seq=?4"));
  st.bind(1, e.record.structure_sig).bind(2, e.record.shape_key).bind(3, e.stored_fingerprint_key).bind(4, e.seq);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  std::string problem;
  if (!row) {
    problem = "its history has no row " + std::to_string(e.seq) + " (the one that put it in this state)";
  } else if (st.text(0) != e.config || st.text(1) != plan_state_name(e.state)) {
    problem = std::string("its state (") + plan_state_name(e.state) + ") is not what its history row " +
              std::to_string(e.seq) + " says (" + st.text(0) + " to " + st.text(1) + ")";
  }
  KILN_RETURN_IF_ERROR(st.reset());
  return problem;
}

StatusOr<std::optional<RolloutEntry>> SqlPlanStore::rollout_row_locked(const StoredPlanKey& key,
                                                                       const std::string& config) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "plan_rollout"));
  if (!exists) return std::optional<RolloutEntry>();
  KILN_ASSIGN_OR_RETURN(store::Stmt st,
                        store::Stmt::prepare(db_, store::plan_rollout_table().select_sql(std::string(kRolloutKeyWhere) +
                                                                                         " AND config=?4")));
  st.bind(1, key.structure_sig).bind(2, key.shape_key).bind(3, key.fingerprint_key).bind(4, config);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<RolloutEntry>();
  RolloutEntry e = read_entry(st);
  KILN_RETURN_IF_ERROR(st.reset());
  KILN_ASSIGN_OR_RETURN(e.problem, history_mismatch_locked(e));
  return std::optional<RolloutEntry>(std::move(e));
}

Status SqlPlanStore::activate_locked(const PlanRecord& r, const Activation& how) {
  const StoredPlanKey key{r.structure_sig, r.shape_key, r.fingerprint_key()};
  KILN_ASSIGN_OR_RETURN(std::optional<store::RowRead> old, active_row_locked(key));
  const std::string to = config_of(r);
  std::optional<WinnerChange> change;
  // A record that enters the store changed the winner when it was made; one activated from another state, now.
  if (old && old->problem.empty())
    change = winner_change_of(old->record, r, how.from_state.empty() ? r.created_at : unix_now());
  KILN_RETURN_IF_ERROR(store::insert_row(db_, store::plans_table(), store::encode_record(r)));
  if (change)  // in this transaction: a winner change is kept exactly when its record is
    KILN_RETURN_IF_ERROR(
        store::insert_row(db_, store::winner_change_codec().table, store::winner_change_codec().encode(*change)));
  // The plan it replaces is kept whole (retired, or rejected by a rollback), unless it is the same configuration
  // stored again or a damaged row (quarantined by the reads that meet it, never restored).
  const bool replaced = old && old->problem.empty() && config_of(old->record) != to;
  if (replaced) {
    const PlanState old_to = how.old_becomes;
    const std::string why = how.old_reason.empty() ? "replaced by " + to + " (" + how.reason + ")" : how.old_reason;
    KILN_ASSIGN_OR_RETURN(int64_t seq, history_locked(key, config_of(old->record), "active", old_to, why, ""));
    KILN_RETURN_IF_ERROR(put_rollout_locked(old->record, old_to, why, seq));
  }
  KILN_ASSIGN_OR_RETURN(int64_t gone,
                        store::delete_by_key_in_txn(db_, store::plan_rollout_table(),
                                                    {key.structure_sig, key.shape_key, key.fingerprint_key, to}));
  (void)gone;  // the plan left its earlier state (candidate, shadow, retired) for active
  if (replaced || !old || !old->problem.empty() || !how.from_state.empty()) {
    KILN_ASSIGN_OR_RETURN(int64_t seq,
                          history_locked(key, to, how.from_state, PlanState::kActive, how.reason, how.evidence));
    (void)seq;
  }
  // Other processes serving from this store hear of it when the write commits (PostgreSQL NOTIFY; on SQLite the
  // history rows above are what they read).
  if (how.notify) {
    note_own_session_locked();
    KILN_RETURN_IF_ERROR(notify_locked(key.structure_sig, key.shape_key, key.fingerprint_key));
  }
  return Status::ok();
}

StatusOr<PlanRecord> SqlPlanStore::put_candidate(const PlanRecord& record, const std::string& reason) {
  KILN_RETURN_IF_ERROR(store::validate_for_write(record));
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  const PlanRecord r = store::stamped_for_write(record);
  const StoredPlanKey key{r.structure_sig, r.shape_key, r.fingerprint_key()};
  const std::string config = config_of(r);
  std::lock_guard<std::mutex> lock(mu_);
  store::Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(std::optional<store::RowRead> active, active_row_locked(key));
  if (active && active->problem.empty() && config_of(active->record) == config)
    return failed_precondition("plan store " + path_ + ": " + name_of(key) + " already serves " + config +
                               ": nothing to roll out");
  KILN_ASSIGN_OR_RETURN(std::optional<RolloutEntry> before, rollout_row_locked(key, config));
  const std::string from = before && before->problem.empty() ? plan_state_name(before->state) : "";
  KILN_ASSIGN_OR_RETURN(int64_t seq, history_locked(key, config, from, PlanState::kCandidate, reason, ""));
  KILN_RETURN_IF_ERROR(put_rollout_locked(r, PlanState::kCandidate, reason, seq));
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::vector<RolloutEntry>> SqlPlanStore::rollout_entries(const ListFilter& filter) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RolloutEntry> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "plan_rollout"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(
      store::Stmt st,
      store::Stmt::prepare(db_, store::plan_rollout_table().select_sql(std::string(store::kFilterWhere) +
                                                                       " ORDER BY changed_at DESC, seq DESC")));
  store::bind_filter(st, filter);
  KILN_RETURN_IF_ERROR(store::for_each_row(st, [&] {
    out.push_back(read_entry(st));
    out.back().record.plan_bytes.clear();
    return Status::ok();
  }));
  return out;
}

Status SqlPlanStore::verify_rollout_locked(VerifyReport* out) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "plan_rollout"));
  if (!exists) return Status::ok();
  KILN_ASSIGN_OR_RETURN(
      store::Stmt st,
      store::Stmt::prepare(db_, store::plan_rollout_table().select_sql(" ORDER BY structure_sig, shape_key, seq")));
  std::vector<std::pair<RolloutEntry, std::string>> rows;  // each row, and its state column as written
  KILN_RETURN_IF_ERROR(store::for_each_row(st, [&] {
    RolloutEntry e = read_entry(st);
    e.record.plan_bytes.clear();
    rows.emplace_back(std::move(e), st.type(0) == SQLITE_TEXT ? st.text(0) : std::string("no state"));
    return Status::ok();
  }));
  for (auto& [e, state] : rows) {
    KILN_ASSIGN_OR_RETURN(e.problem, history_mismatch_locked(e));
    ++out->rollout_checked;
    if (e.problem.empty()) {
      ++out->rollout_ok;
      continue;
    }
    out->rollout_problems.push_back(
        {e.record.structure_sig, e.record.shape_key, e.stored_fingerprint_key,
         (e.config.empty() ? std::string("?") : e.config) + " (" + state + "): " + e.problem});
  }
  return Status::ok();
}

StatusOr<RolloutEntry> SqlPlanStore::rollout_entry(const StoredPlanKey& key, const std::string& config) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(std::optional<RolloutEntry> e, rollout_row_locked(key, config));
  if (!e)
    return not_found("plan store " + path_ + ": " + name_of(key) + " has no plan " + config + " beside its active one");
  return *e;
}

Status SqlPlanStore::transition(const StoredPlanKey& key, const std::string& config, PlanState to,
                                const std::string& reason, const std::string& evidence) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  store::Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(std::optional<RolloutEntry> e, rollout_row_locked(key, config));
  if (!e) {
    KILN_ASSIGN_OR_RETURN(std::optional<store::RowRead> active, active_row_locked(key));
    if (active && active->problem.empty() && config_of(active->record) == config)
      return failed_precondition("plan store " + path_ + ": " + name_of(key) + ": " + config +
                                 " is active; it leaves that state only when another plan is activated or by a "
                                 "rollback");
    return not_found("plan store " + path_ + ": " + name_of(key) + " has no plan " + config);
  }
  if (!e->problem.empty())
    return corruption("plan store " + path_ + ": " + name_of(key) + ": the row of " + config + " is damaged (" +
                      e->problem + ")");
  if (!plan_transition_allowed(e->state, to))
    return failed_precondition("plan store " + path_ + ": " + name_of(key) + ": " + config + " cannot go from " +
                               plan_state_name(e->state) + " to " + plan_state_name(to));
  if (to == PlanState::kActive) {
    Activation how;
    how.from_state = plan_state_name(e->state);
    how.reason = reason;
    how.evidence = evidence;
    KILN_RETURN_IF_ERROR(activate_locked(e->record, how));
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t seq, history_locked(key, config, plan_state_name(e->state), to, reason, evidence));
    KILN_ASSIGN_OR_RETURN(store::Stmt up, store::Stmt::prepare(db_, std::string("UPDATE plan_rollout SET state=?5, "
                                                                                "reason=?6, changed_at=?7, seq=?8") +
                                                                        kRolloutKeyWhere + " AND config=?4"));
    up.bind(1, key.structure_sig).bind(2, key.shape_key).bind(3, key.fingerprint_key).bind(4, config);
    up.bind(5, std::string(plan_state_name(to))).bind(6, reason).bind(7, unix_now()).bind(8, seq);
    KILN_RETURN_IF_ERROR(up.run());
    // A plan entering shadow (or leaving it) changes what a Planner serving the key runs: serving processes hear of
    // it as of an activation (PostgreSQL NOTIFY at commit; on SQLite the history row just written).
    note_own_session_locked();
    KILN_RETURN_IF_ERROR(notify_locked(key.structure_sig, key.shape_key, key.fingerprint_key));
  }
  return txn.commit();
}

StatusOr<PlanRecord> SqlPlanStore::rollback(const StoredPlanKey& key, const std::string& reason,
                                            const std::string& if_active) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  store::Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(std::optional<store::RowRead> active, active_row_locked(key));
  if (!active) return not_found("plan store " + path_ + ": " + name_of(key) + " has no active plan to roll back");
  if (!if_active.empty() && (!active->problem.empty() || config_of(active->record) != if_active))
    return failed_precondition("plan store " + path_ + ": " + name_of(key) + ": the active plan is no longer " +
                               if_active + ": not rolled back");
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "plan_rollout"));
  std::optional<RolloutEntry> back;
  if (exists) {
    KILN_ASSIGN_OR_RETURN(
        store::Stmt st,
        store::Stmt::prepare(db_, store::plan_rollout_table().select_sql(std::string(kRolloutKeyWhere) +
                                                                         " AND state='retired' ORDER BY seq DESC")));
    st.bind(1, key.structure_sig).bind(2, key.shape_key).bind(3, key.fingerprint_key);
    // The newest retired plan, whole: a damaged one is named, never passed over for an older one (the plan the
    // active one replaced is the one to go back to; found by a hostile trial).
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (row) back = read_entry(st);
    KILN_RETURN_IF_ERROR(st.reset());
    if (back) {
      KILN_ASSIGN_OR_RETURN(back->problem, history_mismatch_locked(*back));
    }
    if (back && !back->problem.empty())
      return corruption("plan store " + path_ + ": " + name_of(key) + ": the newest retired plan's row (" +
                        back->config + ") is damaged (" + back->problem + "): not rolled back");
  }
  if (!back)
    return failed_precondition(
        "plan store " + path_ + ": " + name_of(key) +
        " has no retired plan to go back to (only plans replaced since Kiln kept states can be)");
  Activation how;
  how.from_state = "retired";
  how.reason = "rollback: " + reason;
  how.old_becomes = PlanState::kRejected;
  how.old_reason = "rolled back: " + reason;
  KILN_RETURN_IF_ERROR(activate_locked(back->record, how));
  KILN_RETURN_IF_ERROR(txn.commit());
  return back->record;
}

StatusOr<std::vector<PlanTransition>> SqlPlanStore::plan_history(const StoredPlanKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PlanTransition> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "plan_history"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(auto rows, store::select_records(db_, store::plan_history_codec(),
                                                         " WHERE structure_sig=?1 AND shape_key=?2 AND (?3='' OR "
                                                         "fingerprint_key=?3) ORDER BY fingerprint_key, seq",
                                                         {key.structure_sig, key.shape_key, key.fingerprint_key}));
  for (auto& r : rows) {
    if (r.problem.empty()) out.push_back(std::move(r.record));
    else KILN_LOG(kWarn, "plan store " << path_ << ": a history row skipped: " << r.problem);
  }
  return out;
}

}  // namespace kiln
