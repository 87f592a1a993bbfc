// PlanStore: opening, writing, looking up and maintaining the SQLite plan store. Bundles: bundle.cc.
#include "store/sql_plan_store.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "kiln/core/log.h"
#include "kiln/core/read_file.h"
#include "kiln/core/strings.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/mirrored_store.h"
#include "store/pg_conn.h"
#include "store/schema_check.h"
#include "store/sql_table.h"
#include "store/sql.h"

namespace kiln {

namespace store {

std::string user_at_host() {
  const char* u = std::getenv("USER");
  std::string user = u ? u : "";
  if (user.empty())
    if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_name) user = pw->pw_name;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  return (user.empty() ? "unknown" : user) + "@" + (host[0] ? host : "unknown");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace store

using store::Conn;
using store::DbPtr;
using store::exec;
using store::RowRead;
using store::Stmt;
using store::Txn;
using store::unix_now;
using store::user_at_host;

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_dir() {
  std::string h = env_or_empty("HOME");
  if (!h.empty()) return h;
  if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return std::string();
}

// SQLite's quarantine columns are untyped (as every store was made); PostgreSQL needs each column's type.
std::string quarantine_table_sql(store::SqlDialect dialect) {
  std::string columns = store::record_columns();
  if (dialect == store::SqlDialect::kPostgres) {
    columns.clear();
    for (const store::Column& c : store::plans_table().columns)
      columns += (columns.empty() ? "" : ", ") + std::string(c.name) + " " + store::sql_type_name(c.type);
  }
  return "CREATE TABLE IF NOT EXISTS quarantine(id INTEGER PRIMARY KEY AUTOINCREMENT, quarantined_at INTEGER, "
         "reason TEXT, " +
         columns + ")";
}

// The tables added within schema version 1 (a v1 store without them gets them on a writable open; older Kilns
// ignore them), in the order they are made.
std::vector<const store::TableCodec*> optional_tables() {
  return {&store::retune_queue_codec().table, &store::graph_spec_codec().table,    &store::fusion_record_codec().table,
          &store::kernel_cache_codec().table, &store::first_use_codec().table,     &store::retune_leases_table(),
          &store::retune_log_table(),         &store::winner_change_codec().table, &store::plan_rollout_table(),
          &store::plan_history_codec().table};
}

// Every Kiln table present is the table Kiln made (not a view, no column missing), and a store has its
// plans table: a damaged schema is Corruption when the file is opened, not a SQL error at the first query.
Status check_store_tables(Conn* db) {
  KILN_RETURN_IF_ERROR(store::check_table_schema(db, "plans", store::plans_table_sql("plans"), /*required=*/true));
  KILN_RETURN_IF_ERROR(store::check_table_schema(db, "quarantine", quarantine_table_sql(db->dialect()), false));
  for (const store::TableCodec* t : optional_tables())
    KILN_RETURN_IF_ERROR(store::check_table_schema(db, t->table, t->create_sql(), false));
  return Status::ok();
}

Status create_store_tables(Conn* db) {
  KILN_RETURN_IF_ERROR(exec(db, store::plans_table_sql("plans").c_str()));
  KILN_RETURN_IF_ERROR(exec(db, quarantine_table_sql(db->dialect()).c_str()));
  for (const store::TableCodec* t : optional_tables()) KILN_RETURN_IF_ERROR(exec(db, t->create_sql().c_str()));
  return Status::ok();
}

// Which of several records passing the policy to run: the exact environment first, then tuned plans,
// then the newest.
bool preferred(const RowRead& a, const RowRead& b, const std::string& current_key) {
  bool ea = a.stored_fingerprint_key == current_key, eb = b.stored_fingerprint_key == current_key;
  if (ea != eb) return ea;
  if (a.record.tuned != b.record.tuned) return a.record.tuned;
  return a.record.created_at > b.record.created_at;
}

// Evaluates the rows of one (structure, shape) against the environment.
struct Evaluation {
  std::optional<RowRead> hit;
  std::optional<RowRead> stale;  // the closest stale record
  FingerprintCheck stale_check;
  int64_t stale_count = 0;
  std::vector<std::pair<RowRead, std::string>> corrupt;
};

Evaluation evaluate(std::vector<RowRead> rows, const EnvFingerprint& current, const EnvPolicy& policy,
                    const PlanValidator& validator) {
  Evaluation ev;
  std::string current_key = fingerprint_key(current);
  std::vector<RowRead> passing;
  for (RowRead& row : rows) {
    std::string problem = store::record_problem(row);
    if (!problem.empty()) {
      ev.corrupt.emplace_back(std::move(row), problem);
      continue;
    }
    FingerprintCheck c = check_fingerprint(row.record.fingerprint, current, policy);
    if (row.record.kiln_schema_version > kStoreSchemaVersion) {
      c.pass = false;
      c.reasons.push_back("kiln_schema_version: recorded " + std::to_string(row.record.kiln_schema_version) +
                          ", current " + std::to_string(kStoreSchemaVersion) + " (record from a newer Kiln)");
    }
    if (row.record.kiln_schema_version < kMinRunnableRecordVersion) {
      c.pass = false;
      c.reasons.push_back("kiln_schema_version: recorded " + std::to_string(row.record.kiln_schema_version) +
                          ", runnable from " + std::to_string(kMinRunnableRecordVersion) +
                          " (its plan binds tensors by declaration order, not the signature's canonical order)");
    }
    if (c.pass) {
      passing.push_back(std::move(row));
      continue;
    }
    ++ev.stale_count;
    bool closer =
        !ev.stale || c.reasons.size() < ev.stale_check.reasons.size() ||
        (c.reasons.size() == ev.stale_check.reasons.size() && row.record.created_at > ev.stale->record.created_at);
    if (closer) {
      ev.stale = std::move(row);
      ev.stale_check = std::move(c);
    }
  }
  std::sort(passing.begin(), passing.end(),
            [&](const RowRead& a, const RowRead& b) { return preferred(a, b, current_key); });
  for (RowRead& row : passing) {
    Status v = store::run_validator(validator, row.record);
    if (v.is_ok()) {
      ev.hit = std::move(row);
      break;
    }
    ev.corrupt.emplace_back(std::move(row), "validator refused the plan: " + v.message());
  }
  return ev;
}

}  // namespace

std::string default_store_path() {
  std::string p = env_or_empty("KILN_STORE");
  if (!p.empty()) return p;
  std::string xdg = env_or_empty("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/kiln/plans.db";
  std::string home = home_dir();
  if (!home.empty()) return home + "/.cache/kiln/plans.db";
  return "kiln-plans.db";
}

SqlPlanStore::SqlPlanStore(std::string path, store::Database db, bool read_only)
    : path_(std::move(path)), database_(std::move(db)), db_(database_.handle()), read_only_(read_only) {}

SqlPlanStore::~SqlPlanStore() = default;

std::vector<std::string> SqlPlanStore::database_files() const {
  if (db_->dialect() != store::SqlDialect::kSqlite) return {};
  std::vector<std::string> bases = {path_};
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(path_, ec);
  if (!ec && resolved.string() != path_) bases.push_back(resolved.string());
  std::vector<std::string> out;
  for (const std::string& b : bases)
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) out.push_back(b + suffix);
  return out;
}

bool PlanStore::is_unwritable_store(const Status& s) { return store::Database::is_unwritable(s); }

Status PlanStore::check_path(const std::string& path, const StoreOpenOptions& options) {
  if (path.empty()) return invalid_argument("plan store path is empty");
  if (store::is_postgres_location(path)) return Status::ok();  // a server, not a file: open() connects
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_ASSIGN_OR_RETURN(bool exists, path_exists(path, "plan store"));  // a link loop is not "missing"
  if (options.read_only && !exists) return not_found("plan store " + path + " does not exist");
  if (fs::is_directory(path, ec)) return invalid_argument("plan store " + path + " is a folder, not a file");
  // A FIFO would block the open, a device would get a journal beside it: only regular files are stores.
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    return invalid_argument("plan store " + path + " is not a regular file (a pipe, socket or device)");
  return Status::ok();
}

StatusOr<std::unique_ptr<PlanStore>> PlanStore::open(const std::string& path, const StoreOpenOptions& options) {
  KILN_RETURN_IF_ERROR(check_path(path, options));
  if (!options.mirror_path.empty() && store::is_postgres_location(path)) return MirroredPlanStore::open(path, options);
  return SqlPlanStore::open(path, options);
}

StatusOr<std::unique_ptr<PlanStore>> SqlPlanStore::open(const std::string& path, const StoreOpenOptions& options) {
  // No migrations yet: version 1 files have version 2's tables (docs/store.md "Schema", "Migrations").
  const store::Schema schema{kStoreSchemaVersion, "plan store", check_store_tables, create_store_tables, {}};
  if (store::is_postgres_location(path)) {
    const std::string shown = store::redact_location(path);
    KILN_ASSIGN_OR_RETURN(store::Database db, store::Database::open_postgres(path, shown, options, schema));
    return std::unique_ptr<PlanStore>(new SqlPlanStore(shown, std::move(db), options.read_only));
  }
  KILN_ASSIGN_OR_RETURN(store::Database db, store::Database::open(path, options, schema));
  return std::unique_ptr<PlanStore>(new SqlPlanStore(path, std::move(db), options.read_only));
}

StatusOr<PlanRecord> SqlPlanStore::put(const PlanRecord& record) {
  KILN_RETURN_IF_ERROR(store::validate_for_write(record));
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  const PlanRecord r = store::stamped_for_write(record);

  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  // The immediate policy's transition: active at once, the plan it replaces retired (docs/rollout.md).
  KILN_RETURN_IF_ERROR(activate_locked(r, Activation{}));
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::string> SqlPlanStore::schema_channel_locked() {
  if (!schema_channel_.empty()) return schema_channel_;
  KILN_ASSIGN_OR_RETURN(store::Stmt st, store::Stmt::prepare(db_, "SELECT COALESCE(current_schema(), '')"));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  const std::string schema = row ? st.text(0) : std::string();
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a channel name is an identifier, the schema's name may not be
  for (unsigned char ch : schema) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  schema_channel_ = std::string(kPlanChannel) + "_" + hex;
  return schema_channel_;
}

Status SqlPlanStore::notify_locked(const std::string& structure_sig, const std::string& shape_key,
                                   const std::string& fingerprint_key) {
  const std::string payload = structure_sig + "\n" + shape_key + "\n" + fingerprint_key;
  KILN_RETURN_IF_ERROR(db_->notify(kPlanChannel, payload));  // what processes of earlier versions listen on
  if (db_->dialect() != store::SqlDialect::kPostgres) return Status::ok();
  KILN_ASSIGN_OR_RETURN(std::string channel, schema_channel_locked());
  return db_->notify(channel.c_str(), payload);
}

StatusOr<std::vector<StoredPlanKey>> SqlPlanStore::changed_plans() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StoredPlanKey> out;
  if (db_->dialect() != store::SqlDialect::kPostgres) return changed_in_history_locked();
  if (!listening_) {
    KILN_ASSIGN_OR_RETURN(std::string channel, schema_channel_locked());
    KILN_RETURN_IF_ERROR(db_->listen(channel.c_str()));
    listening_ = true;
    return out;
  }
  std::set<int> ours;  // the sessions of the writers this store was told of (treat_writes_as_own)
  {
    std::shared_ptr<OwnHistory> own = own_;
    std::lock_guard<std::mutex> lock(own->mu);
    const int64_t now = unix_now();
    for (auto it = own->sessions.begin(); it != own->sessions.end();) {
      if (now - it->second > kOwnSessionS) {
        it = own->sessions.erase(it);
      } else {
        ours.insert(it->first);
        ++it;
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> notes, db_->notifications(ours));
  for (const std::string& n : notes) {
    if (n == "*") {
      out.push_back({"*", "", ""});
      continue;
    }
    const size_t a = n.find('\n'), b = a == std::string::npos ? a : n.find('\n', a + 1);
    if (b == std::string::npos) continue;  // not Kiln's notice
    out.push_back({n.substr(0, a), n.substr(a + 1, b - a - 1), n.substr(b + 1)});
  }
  return out;
}

std::string history_row_id(const std::string& structure_sig, const std::string& shape_key,
                           const std::string& fingerprint_key, int64_t seq) {
  return structure_sig + '\n' + shape_key + '\n' + fingerprint_key + '\n' + std::to_string(seq);
}

// SQLite has no NOTIFY: every transition of a key (a plan made active, a promotion, a rollback, a plan put in shadow,
// a verdict) writes a plan_history row, and its rows are never deleted, so the rows past the last one seen are the
// keys changed since. Rows this object (or a writer it was told of) wrote are its own Planner's, skipped. The row
// count checks the rest: where it is not what the rows read explain, notices may have been missed ("*").
StatusOr<std::vector<StoredPlanKey>> SqlPlanStore::changed_in_history_locked() {
  std::vector<StoredPlanKey> out;
  auto count_rows = [&](int64_t* max_rowid, int64_t* rows) -> Status {
    KILN_ASSIGN_OR_RETURN(store::Stmt st,
                          store::Stmt::prepare(db_, "SELECT COALESCE(MAX(rowid), 0), COUNT(*) FROM plan_history"));
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    *max_rowid = row && st.type(0) == SQLITE_INTEGER ? st.int64(0) : 0;
    *rows = row && st.type(1) == SQLITE_INTEGER ? st.int64(1) : 0;
    return Status::ok();
  };
  if (history_seen_ < 0) {
    KILN_RETURN_IF_ERROR(count_rows(&history_seen_, &history_rows_));
    return out;
  }
  KILN_ASSIGN_OR_RETURN(store::Stmt st,
                        store::Stmt::prepare(db_, "SELECT rowid, COALESCE(CAST(structure_sig AS TEXT),''), "
                                                  "COALESCE(CAST(shape_key AS TEXT),''), "
                                                  "COALESCE(CAST(fingerprint_key AS TEXT),''), seq FROM plan_history "
                                                  "WHERE rowid > ?1 ORDER BY rowid LIMIT 10000"));
  st.bind(1, history_seen_);
  std::set<std::string> seen;
  int64_t read = 0;
  std::shared_ptr<OwnHistory> own = own_;
  std::lock_guard<std::mutex> own_lock(own->mu);
  for (;;) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    ++read;
    const int64_t id = st.int64(0);
    history_seen_ = std::max(history_seen_, id);
    StoredPlanKey k{st.text(1), st.text(2), st.text(3)};
    const int64_t seq = st.type(4) == SQLITE_INTEGER ? st.int64(4) : -1;
    auto mine = own->rows.find(id);
    if (mine != own->rows.end() &&
        mine->second == history_row_id(k.structure_sig, k.shape_key, k.fingerprint_key, seq)) {
      own->rows.erase(mine);
      continue;
    }
    if (seen.insert(k.structure_sig + '\n' + k.shape_key + '\n' + k.fingerprint_key).second)
      out.push_back(std::move(k));
  }
  // Rows of ours at or below the last one read cannot come again.
  own->rows.erase(own->rows.begin(), own->rows.upper_bound(history_seen_));
  if (read == 10000) {  // more to read: the count is checked once they are
    history_rows_ += read;
    return out;
  }
  int64_t max_rowid = 0, rows = 0;
  KILN_RETURN_IF_ERROR(count_rows(&max_rowid, &rows));
  if (rows != history_rows_ + read || max_rowid < history_seen_) {
    out.push_back({"*", "", ""});
    history_seen_ = max_rowid;
  }
  history_rows_ = rows;
  return out;
}

void SqlPlanStore::note_own_session_locked() {
  const int session = db_->session_id();
  if (session == 0) return;
  std::shared_ptr<OwnHistory> own = own_;
  std::lock_guard<std::mutex> lock(own->mu);
  own->sessions[session] = unix_now();
}

void SqlPlanStore::treat_writes_as_own(PlanStore& writer) {
  auto* w = dynamic_cast<SqlPlanStore*>(&writer);
  if (w == nullptr || w == this) return;
  std::shared_ptr<OwnHistory> own = own_;
  std::lock_guard<std::mutex> lock(w->mu_);
  w->own_ = own;
}

namespace {
// One plans row by the text of its stored key and checksum values (?3..?6): a damaged row may hold other types.
constexpr const char* kStoredRowWhere =
    " FROM plans WHERE COALESCE(CAST(structure_sig AS TEXT),'')=?3 AND COALESCE(CAST(shape_key AS TEXT),'')=?4"
    " AND COALESCE(CAST(fingerprint_key AS TEXT),'')=?5 AND COALESCE(CAST(checksum AS TEXT),'')=?6";
}  // namespace

void SqlPlanStore::quarantine_row(const std::string& structure_sig, const std::string& shape_key,
                                  const std::string& fingerprint_key, const std::string& stored_checksum,
                                  const std::string& reason) {
  std::string name = store::record_name(structure_sig, shape_key, fingerprint_key);
  if (read_only_) {
    KILN_LOG(kWarn,
             "plan store " << path_ << ": corrupt record " << name << " (" << reason << "); read-only, left in place");
    return;
  }
  const char* where = kStoredRowWhere;
  auto move = [&]() -> StatusOr<int> {
    Txn txn(db_);
    KILN_RETURN_IF_ERROR(txn.begin());
    KILN_ASSIGN_OR_RETURN(
        Stmt ins, Stmt::prepare(db_, "INSERT INTO quarantine(quarantined_at, reason, " + store::record_columns() +
                                         ") SELECT ?1, ?2, " + store::record_columns() + where));
    ins.bind(1, unix_now())
        .bind(2, reason)
        .bind(3, structure_sig)
        .bind(4, shape_key)
        .bind(5, fingerprint_key)
        .bind(6, stored_checksum);
    KILN_RETURN_IF_ERROR(ins.run());
    int moved = db_->changes();
    KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, std::string("DELETE") + where));
    del.bind(3, structure_sig).bind(4, shape_key).bind(5, fingerprint_key).bind(6, stored_checksum);
    KILN_RETURN_IF_ERROR(del.run());
    KILN_RETURN_IF_ERROR(txn.commit());
    return moved;
  };
  StatusOr<int> moved = move();
  if (!moved.is_ok()) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt record " << name << " (" << reason
                                  << "); could not quarantine it: " << moved.status().message());
    return;
  }
  if (*moved > 0) {
    counters_.quarantined += *moved;
    KILN_LOG(kWarn, "plan store " << path_ << ": quarantined corrupt record " << name << ": " << reason);
  }
}

Status SqlPlanStore::drop_corrupt_locked(const char* what, const std::string& name, const std::string& problem,
                                         const char* kept_note, const std::function<StatusOr<int64_t>()>& remove) {
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt " << what << " " << name << " (" << problem
                                  << "); read-only, left in place" << kept_note);
    return Status::ok();
  }
  KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt " << what << " " << name << ": " << problem);
  return remove().status();
}

StatusOr<LookupResult> SqlPlanStore::get(const std::string& structure_sig, const std::string& shape_key,
                                         const EnvFingerprint& current, const EnvPolicy& policy,
                                         const PlanValidator& validator) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RowRead> rows;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT " + store::record_columns() +
                                                          " FROM plans WHERE structure_sig=?1 AND shape_key=?2"));
    st.bind(1, structure_sig).bind(2, shape_key);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      rows.push_back(store::read_record(st, 0));
    }
  }
  Evaluation ev = evaluate(std::move(rows), current, policy, validator);
  for (auto& [row, reason] : ev.corrupt)
    quarantine_row(row.record.structure_sig, shape_key, row.stored_fingerprint_key, row.record.checksum, reason);
  counters_.corrupt += static_cast<int64_t>(ev.corrupt.size());

  LookupResult out;
  if (ev.hit) {
    ++counters_.hits;
    out.outcome = LookupOutcome::kHit;
    out.record = std::move(ev.hit->record);
    return out;
  }
  ++counters_.misses;
  if (ev.stale) {
    ++counters_.stale;
    for (FingerprintField f : ev.stale_check.failed_fields) ++counters_.stale_by_field[fingerprint_field_name(f)];
    if (ev.stale_check.failed_fields.empty()) ++counters_.stale_by_field["kiln_schema_version"];
    std::string name = store::record_name(structure_sig, shape_key, ev.stale->stored_fingerprint_key);
    KILN_LOG(kInfo, "plan store: stale record " << name << ": " << join(ev.stale_check.reasons, "; "));
    if (policy.on_mismatch == MismatchPolicy::kFail)
      return failed_precondition("stored plan " + name + " was built for another environment (policy: fail): " +
                                 join(ev.stale_check.reasons, "; "));
    out.outcome = LookupOutcome::kStale;
    out.record = std::move(ev.stale->record);
    out.record->plan_bytes.clear();
    out.reasons = std::move(ev.stale_check.reasons);
    out.action = policy.on_mismatch;
    return out;
  }
  if (!ev.corrupt.empty()) {
    out.outcome = LookupOutcome::kCorrupt;
    for (auto& [row, reason] : ev.corrupt) out.reasons.push_back(reason);
    return out;
  }
  out.outcome = LookupOutcome::kMiss;
  return out;
}

StatusOr<LoadAllResult> SqlPlanStore::load_all(const EnvFingerprint& current, const EnvPolicy& policy,
                                               const PlanValidator& validator) {
  std::lock_guard<std::mutex> lock(mu_);
  LoadAllResult out;
  std::vector<std::pair<RowRead, std::string>> corrupt;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT " + store::record_columns() +
                                                          " FROM plans ORDER BY structure_sig, shape_key"));
    std::vector<RowRead> group;
    auto flush = [&]() {
      if (group.empty()) return;
      Evaluation ev = evaluate(std::move(group), current, policy, validator);
      group.clear();
      if (ev.hit) out.records.push_back(std::move(ev.hit->record));
      out.stale += ev.stale_count;
      for (auto& c : ev.corrupt) corrupt.push_back(std::move(c));
    };
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      RowRead r = store::read_record(st, 0);
      if (!group.empty() && (group.front().record.structure_sig != r.record.structure_sig ||
                             group.front().record.shape_key != r.record.shape_key))
        flush();
      group.push_back(std::move(r));
    }
    flush();
  }
  for (auto& [row, reason] : corrupt)
    quarantine_row(row.record.structure_sig, row.record.shape_key, row.stored_fingerprint_key, row.record.checksum,
                   reason);
  out.corrupt = static_cast<int64_t>(corrupt.size());
  counters_.corrupt += out.corrupt;
  return out;
}

StatusOr<std::vector<PlanSummary>> SqlPlanStore::list(const ListFilter& filter) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(Stmt st,
                        Stmt::prepare(db_, "SELECT " + store::record_columns() + " FROM plans" + store::kFilterWhere +
                                               " ORDER BY structure_sig, shape_key, fingerprint_key"));
  store::bind_filter(st, filter);
  std::vector<PlanSummary> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    // Read with the plan bytes so that the checksum is checked as verify checks it; the bytes are not kept.
    RowRead r = store::read_record(st, 0);
    std::string problem = store::record_problem(r);
    r.record.plan_bytes.clear();
    r.record.plan_bytes.shrink_to_fit();
    out.push_back(
        PlanSummary{std::move(r.record), r.plan_size, std::move(r.stored_fingerprint_key), std::move(problem)});
  }
  return out;
}

StatusOr<PlanRecord> SqlPlanStore::read(const std::string& structure_sig, const std::string& shape_key,
                                        const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT " + store::record_columns() +
                                                        " FROM plans WHERE structure_sig=?1 AND shape_key=?2 AND "
                                                        "fingerprint_key=?3"));
  st.bind(1, structure_sig).bind(2, shape_key).bind(3, fingerprint_key);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  std::string name = store::record_name(structure_sig, shape_key, fingerprint_key);
  if (!row) return not_found("no plan record " + name);
  RowRead r = store::read_record(st, 0);
  if (!r.problem.empty()) return corruption("plan record " + name + ": " + r.problem);
  return std::move(r.record);
}

StatusOr<int64_t> SqlPlanStore::remove(const ListFilter& filter, bool all) {
  bool empty = filter.structure_prefix.empty() && filter.shape_key.empty() && filter.fingerprint_key.empty() &&
               !filter.tuned_only;
  if (empty && !all) return invalid_argument("remove: give a filter, or ask for all records explicitly");
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("DELETE FROM plans") + store::kFilterWhere));
  store::bind_filter(st, filter);
  KILN_RETURN_IF_ERROR(st.run());
  int64_t n = db_->changes();
  // The same keys' other plans (candidate, shadow, retired, rejected: docs/rollout.md) go with them, so that no
  // rollback or promotion brings back what was removed. Their history stays: it says what was served.
  KILN_ASSIGN_OR_RETURN(Stmt rollout,
                        Stmt::prepare(db_, std::string("DELETE FROM plan_rollout") + store::kFilterWhere));
  store::bind_filter(rollout, filter);
  KILN_RETURN_IF_ERROR(rollout.run());
  n += db_->changes();
  KILN_RETURN_IF_ERROR(txn.commit());
  return n;
}

StoreCounters SqlPlanStore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void SqlPlanStore::reset_counters() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_ = StoreCounters{};
}

}  // namespace kiln
