// PlanStore: opening, writing, looking up and maintaining the SQLite plan store. Bundles: bundle.cc.
#include "kiln/core/read_file.h"
#include "store/sqlite_plan_store.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "kiln/core/log.h"
#include "kiln/core/strings.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/schema_check.h"
#include "store/sqlite_table.h"
#include "store/sqlite_util.h"

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

std::string quarantine_table_sql() {
  return "CREATE TABLE IF NOT EXISTS quarantine(id INTEGER PRIMARY KEY AUTOINCREMENT, quarantined_at INTEGER, "
         "reason TEXT, " +
         store::record_columns() + ")";
}

// Runs a pragma that returns one row per message (quick_check, integrity_check): "ok" or the messages.
StatusOr<std::string> check_pragma(sqlite3* db, const char* pragma) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, pragma));
  std::vector<std::string> lines;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    if (lines.size() < 10) lines.push_back(st.text(0));
  }
  return join(lines, "; ");
}

// Switching to WAL needs a moment alone with the file; another process opening at the same time makes it
// report BUSY before the busy handler applies, so retry within the timeout.
Status set_wal(sqlite3* db, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    StatusOr<Stmt> st = Stmt::prepare(db, "PRAGMA journal_mode=WAL");
    Status s = st.status();
    if (st.is_ok()) {
      StatusOr<bool> row = st->step();
      s = row.status();
      if (row.is_ok()) {
        std::string mode = *row ? st->text(0) : "";
        if (mode == "wal") return Status::ok();
        return unavailable("cannot switch to WAL mode (journal mode is '" + mode + "')");
      }
    }
    if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The tables added within schema version 1 (a v1 store without them gets them on a writable open; older Kilns
// ignore them), in the order they are made.
std::vector<const store::TableCodec*> optional_tables() {
  return {&store::retune_queue_codec().table, &store::graph_spec_codec().table, &store::fusion_record_codec().table,
          &store::kernel_cache_codec().table, &store::first_use_codec().table};
}

constexpr const char* kMetaTableSql = "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)";

// Every Kiln table present is the table Kiln made (not a view, no column missing), and a store has its
// plans table: a damaged schema is Corruption here, not a SQL error at the first query (exit 10).
Status check_store_tables(sqlite3* db) {
  KILN_RETURN_IF_ERROR(store::check_table_schema(db, "plans", store::plans_table_sql("plans"), /*required=*/true));
  KILN_RETURN_IF_ERROR(store::check_table_schema(db, "quarantine", quarantine_table_sql(), false));
  for (const store::TableCodec* t : optional_tables())
    KILN_RETURN_IF_ERROR(store::check_table_schema(db, t->table, t->create_sql(), false));
  return Status::ok();
}

// What the file holds, read without writing anything: true for a Kiln store (its version and tables
// checked), false for an empty database; any other SQLite database is refused (InvalidArgument).
StatusOr<bool> check_existing_schema(sqlite3* db) {
  // Views too: a Kiln table replaced by a view is damage, not another kind of database.
  KILN_ASSIGN_OR_RETURN(Stmt tables,
                        Stmt::prepare(db, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"));
  std::vector<std::string> names;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, tables.step());
    if (!row) break;
    std::string n = tables.text(0);
    if (n.rfind("sqlite_", 0) != 0) names.push_back(n);
  }
  if (std::find(names.begin(), names.end(), "meta") == names.end()) {
    if (!names.empty())
      return invalid_argument("a SQLite database but not a Kiln plan store (tables: " + join(names, ", ") + ")");
    return false;
  }
  KILN_RETURN_IF_ERROR(store::check_table_schema(db, "meta", kMetaTableSql, true));
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, "SELECT value FROM meta WHERE key='schema_version'"));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return corruption("the meta table has no schema_version");
  std::string v = st.text(0);
  char* end = nullptr;
  long version = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') return corruption("schema_version '" + v + "' is not a number");
  if (version > kStoreSchemaVersion)
    return newer_version("written with store schema version " + std::to_string(version) +
                         ", newer than this Kiln understands (" + std::to_string(kStoreSchemaVersion) +
                         "): upgrade Kiln or use another store (--store / $KILN_STORE)");
  if (version < 1) return corruption("schema_version " + v + " is not valid");
  KILN_RETURN_IF_ERROR(check_store_tables(db));
  return true;
}

Status init_schema(sqlite3* db, bool read_only) {
  if (read_only) {
    KILN_ASSIGN_OR_RETURN(bool is_store, check_existing_schema(db));
    if (!is_store) return invalid_argument("not a Kiln plan store (empty database)");
    return Status::ok();
  }
  Txn txn(db);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(bool has_meta, check_existing_schema(db));  // again, under the write lock
  KILN_RETURN_IF_ERROR(exec(db, kMetaTableSql));
  KILN_RETURN_IF_ERROR(exec(db, store::plans_table_sql("plans").c_str()));
  KILN_RETURN_IF_ERROR(exec(db, quarantine_table_sql().c_str()));
  // Added within schema version 1 (a v1 store without them gets them here; older Kilns ignore them).
  for (const store::TableCodec* t : optional_tables()) KILN_RETURN_IF_ERROR(exec(db, t->create_sql().c_str()));
  if (!has_meta) {
    KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(db, "INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)"));
    ins.bind(1, std::string_view("schema_version")).bind(2, std::to_string(kStoreSchemaVersion));
    KILN_RETURN_IF_ERROR(ins.run());
    KILN_RETURN_IF_ERROR(ins.reset());
    ins.bind(1, std::string_view("created_at")).bind(2, std::to_string(unix_now()));
    KILN_RETURN_IF_ERROR(ins.run());
  }
  return txn.commit();
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

SqlitePlanStore::SqlitePlanStore(std::string path, sqlite3* db, bool read_only)
    : path_(std::move(path)), db_(db), read_only_(read_only) {}

SqlitePlanStore::~SqlitePlanStore() { sqlite3_close_v2(db_); }

std::vector<std::string> SqlitePlanStore::database_files() const {
  std::vector<std::string> bases = {path_};
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(path_, ec);
  if (!ec && resolved.string() != path_) bases.push_back(resolved.string());
  std::vector<std::string> out;
  for (const std::string& b : bases)
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) out.push_back(b + suffix);
  return out;
}

namespace {
// `path` as the path part of a SQLite URI: '%', '?' and '#' escaped.
std::string uri_path(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '%') out += "%25";
    else if (c == '?') out += "%3f";
    else if (c == '#') out += "%23";
    else out += c;
  }
  return out;
}

constexpr const char* kUnwritable =
    " cannot be written here (the file, or the folder it is in, is read-only to this user), and this command "
    "writes it: run it where the store can be written";
}  // namespace

bool PlanStore::is_unwritable_store(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().find(kUnwritable) != std::string::npos;
}

Status PlanStore::check_path(const std::string& path, const StoreOpenOptions& options) {
  if (path.empty()) return invalid_argument("plan store path is empty");
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
  return SqlitePlanStore::open(path, options);
}

StatusOr<std::unique_ptr<PlanStore>> SqlitePlanStore::open(const std::string& path, const StoreOpenOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!options.read_only) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::exists(parent, ec)) {
      fs::create_directories(parent, ec);
      if (ec) return unavailable("cannot create folder " + parent.string() + " for the plan store: " + ec.message());
    }
  }

  sqlite3* raw = nullptr;
  int flags =
      (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_FULLMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) return store::sqlite_status(raw, rc, "cannot open plan store " + path);
  // SQLite opens a file this user may not write read-only without a word when asked to write it: every write
  // would then fail later with "attempt to write a readonly database" (and gc counted removals it never made).
  // A store opened to write must be writable: said here, once, naming the file.
  if (!options.read_only && sqlite3_db_readonly(raw, "main") == 1)
    return invalid_argument("plan store " + path + kUnwritable);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);

  auto configure = [&]() -> Status {
    if (!options.read_only) {
      // Look before writing: switching to WAL rewrites the file's header, so a SQLite file that is not a
      // Kiln store (a bundle given as --store, say) is refused untouched.
      KILN_RETURN_IF_ERROR(check_existing_schema(raw).status());
      KILN_RETURN_IF_ERROR(set_wal(raw, options.busy_timeout_ms));
      // WAL + NORMAL: a crash of the process never loses a committed write or damages the file; a power
      // loss may lose the last commits but leaves the file consistent.
      KILN_RETURN_IF_ERROR(exec(raw, "PRAGMA synchronous=NORMAL"));
    }
    if (options.quick_check) {
      KILN_ASSIGN_OR_RETURN(std::string qc, check_pragma(raw, "PRAGMA quick_check"));
      if (qc != "ok") return corruption("damaged database file (quick_check: " + qc + ")");
    }
    return init_schema(raw, options.read_only);
  };
  Status s = configure();
  // A read-only open of a WAL store where nothing beside it can be written (a baked store in a read-only
  // folder or file): SQLite cannot make the -shm file it reads through. With no -wal left beside the file
  // (a store closed cleanly has none), nothing is missed by reading the file as immutable.
  if (!s.is_ok() && options.read_only && s.code() == StatusCode::kFailedPrecondition &&
      s.message().find("readonly") != std::string::npos) {
    const std::string wal = path + "-wal";
    if (fs::exists(wal, ec) && fs::file_size(wal, ec) > 0)
      return failed_precondition("plan store " + path + " cannot be read here: it is read-only to this user and " +
                                 wal + " holds writes not yet in the file (open it once where it can be " +
                                 "written, or copy the store)");
    db.reset();
    raw = nullptr;
    const std::string uri = "file:" + uri_path(path) + "?immutable=1";
    rc = sqlite3_open_v2(uri.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr);
    db.reset(raw);
    if (rc != SQLITE_OK) return store::sqlite_status(raw, rc, "cannot open plan store " + path + " (immutable)");
    sqlite3_extended_result_codes(raw, 1);
    s = configure();
  }
  // A store this user cannot write (the file, or the folder its -wal and -shm go in), opened to write: bad
  // input naming what to do, not SQLite's "attempt to write a readonly database" as a policy refusal (exit 6).
  if (!s.is_ok() && !options.read_only && s.code() == StatusCode::kFailedPrecondition &&
      s.message().find("readonly") != std::string::npos)
    return invalid_argument("plan store " + path + kUnwritable);
  if (!s.is_ok()) {
    if (s.code() == StatusCode::kCorruption && s.message().find("not a database") != std::string::npos)
      return corruption("plan store " + path + " is not a SQLite database (damaged or another kind of file)");
    return Status(s.code(), "plan store " + path + ": " + s.message());
  }
  return std::unique_ptr<PlanStore>(new SqlitePlanStore(path, db.release(), options.read_only));
}

StatusOr<PlanRecord> SqlitePlanStore::put(const PlanRecord& record) {
  KILN_RETURN_IF_ERROR(store::validate_for_write(record));
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  PlanRecord r = record;
  if (r.tuned_by.empty()) r.tuned_by = user_at_host();
  if (r.created_at == 0) r.created_at = unix_now();
  r.kiln_schema_version = kStoreSchemaVersion;
  r.checksum = compute_record_checksum(r);

  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(store::put_row(db_, store::plans_table(), store::encode_record(r)));
  return r;
}

namespace {
// One plans row by the text of its stored key and checksum values (?3..?6): a damaged row may hold other types.
constexpr const char* kStoredRowWhere =
    " FROM plans WHERE IFNULL(CAST(structure_sig AS TEXT),'')=?3 AND IFNULL(CAST(shape_key AS TEXT),'')=?4"
    " AND IFNULL(CAST(fingerprint_key AS TEXT),'')=?5 AND IFNULL(CAST(checksum AS TEXT),'')=?6";
}  // namespace

void SqlitePlanStore::quarantine_row(const std::string& structure_sig, const std::string& shape_key,
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
    int moved = sqlite3_changes(db_);
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

Status SqlitePlanStore::drop_corrupt_locked(const char* what, const std::string& name, const std::string& problem,
                                            const char* kept_note, const std::function<StatusOr<int64_t>()>& remove) {
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt " << what << " " << name << " (" << problem
                                  << "); read-only, left in place" << kept_note);
    return Status::ok();
  }
  KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt " << what << " " << name << ": " << problem);
  return remove().status();
}

StatusOr<LookupResult> SqlitePlanStore::get(const std::string& structure_sig, const std::string& shape_key,
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

StatusOr<LoadAllResult> SqlitePlanStore::load_all(const EnvFingerprint& current, const EnvPolicy& policy,
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

StatusOr<std::vector<PlanSummary>> SqlitePlanStore::list(const ListFilter& filter) {
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

StatusOr<PlanRecord> SqlitePlanStore::read(const std::string& structure_sig, const std::string& shape_key,
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

StatusOr<int64_t> SqlitePlanStore::remove(const ListFilter& filter, bool all) {
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
  int64_t n = sqlite3_changes(db_);
  KILN_RETURN_IF_ERROR(txn.commit());
  return n;
}

StatusOr<VerifyReport> SqlitePlanStore::verify(const VerifyOptions& options) {
  if (options.quarantine && read_only_) return failed_precondition("verify --quarantine needs a writable store");
  std::lock_guard<std::mutex> lock(mu_);
  return verify_locked(options);
}

StatusOr<VerifyReport> SqlitePlanStore::verify_locked(const VerifyOptions& options, std::vector<BadPlan>* bad_plans,
                                                      std::vector<BadKernelCache>* bad_caches) {
  VerifyReport out;
  KILN_ASSIGN_OR_RETURN(out.integrity, check_pragma(db_, "PRAGMA integrity_check"));
  struct Bad {
    int64_t rowid;
    RowRead row;
    std::string reason;
  };
  std::vector<Bad> bad;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid, " + store::record_columns() +
                                                          " FROM plans ORDER BY structure_sig, shape_key"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      const int64_t rowid = st.int64(0);
      RowRead r = store::read_record(st, 1);
      ++out.checked;
      std::string problem = store::record_problem(r);
      if (problem.empty()) {
        Status v = store::run_validator(options.validator, r.record);
        if (!v.is_ok()) problem = "validator refused the plan: " + v.message();
      }
      if (problem.empty()) {
        ++out.ok;
        continue;
      }
      out.problems.push_back({r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key, problem, rowid});
      r.record.plan_bytes.clear();
      bad.push_back({rowid, std::move(r), problem});
    }
  }
  counters_.corrupt += static_cast<int64_t>(bad.size());
  if (options.quarantine)
    for (auto& b : bad)
      quarantine_row(b.row.record.structure_sig, b.row.record.shape_key, b.row.stored_fingerprint_key,
                     b.row.record.checksum, b.reason);
  if (bad_plans)
    for (const Bad& b : bad)
      bad_plans->push_back({b.rowid, b.row.record.structure_sig, b.row.record.shape_key, b.row.stored_fingerprint_key,
                            b.row.record.checksum, b.reason});

  std::vector<BadKernelCache> caches;
  KILN_RETURN_IF_ERROR(verify_kernel_caches_locked(&out, &caches));
  counters_.corrupt += static_cast<int64_t>(caches.size());
  if (options.quarantine)
    for (size_t i = 0; i < caches.size(); ++i) {
      // A damaged cache is dropped, as get_kernel_cache drops one: its kernels are compiled again.
      const VerifyProblem& p = out.kernel_cache_problems[i];
      std::string name = store::record_name(p.structure_sig, "kernels", p.fingerprint_key);
      if (p.structure_sig.empty() || p.fingerprint_key.empty()) name += " (rowid " + std::to_string(p.rowid) + ")";
      StatusOr<int64_t> gone = drop_kernel_cache_row_locked(caches[i]);
      if (!gone.is_ok())
        KILN_LOG(kWarn, "plan store " << path_ << ": corrupt kernel cache " << name << " (" << p.reason
                                      << "); could not drop it: " << gone.status().message());
      else if (*gone > 0)
        KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt kernel cache " << name << ": " << p.reason);
    }
  if (bad_caches) bad_caches->insert(bad_caches->end(), caches.begin(), caches.end());
  return out;
}

StatusOr<GcReport> SqlitePlanStore::gc(const GcOptions& options) {
  // A dry run only reads: it works on a store opened read-only, and leaves the file as it was.
  if (read_only_ && !options.dry_run) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  GcReport out;
  out.dry_run = options.dry_run;
  // A dry run reads one snapshot: what it reports is one state of the store, whatever other processes write.
  // A real run writes in a transaction begun below, after the verify's quarantine (its own transaction).
  Txn txn(db_);
  if (options.dry_run) KILN_RETURN_IF_ERROR(txn.begin_read());
  std::vector<BadPlan> bad_plans;
  std::vector<BadKernelCache> bad_caches;
  if (options.drop_corrupt) {
    // A real run moves the corrupt plans to quarantine and drops the damaged caches here; a dry run leaves
    // them in place, and passes over them below, so that every count is the one a real run gives.
    VerifyOptions vo;
    vo.quarantine = !options.dry_run;
    KILN_ASSIGN_OR_RETURN(VerifyReport vr, verify_locked(vo, &bad_plans, &bad_caches));
    out.corrupt_removed = static_cast<int64_t>(vr.problems.size());
    out.kernel_caches_corrupt_removed = static_cast<int64_t>(vr.kernel_cache_problems.size());
    for (const VerifyProblem& p : vr.kernel_cache_problems)
      out.kernel_caches_removed.push_back({p.structure_sig, p.fingerprint_key, "", "corrupt: " + p.reason, p.rowid});
  }
  std::set<int64_t> gone_plans, gone_caches;
  if (options.dry_run) {
    for (const BadPlan& b : bad_plans) gone_plans.insert(b.rowid);
    for (const BadKernelCache& b : bad_caches) gone_caches.insert(b.rowid);
  }
  if (!options.dry_run) KILN_RETURN_IF_ERROR(txn.begin());
  GcGarbage garbage;
  KILN_RETURN_IF_ERROR(gc_find_locked(options, gone_plans, gone_caches, &garbage));
  out.stale_removed = static_cast<int64_t>(garbage.stale_plans.size());
  out.old_removed = static_cast<int64_t>(garbage.old_plans.size());
  if (options.drop_quarantine)
    out.quarantine_removed = garbage.quarantined + (options.dry_run ? static_cast<int64_t>(bad_plans.size()) : 0);
  out.graph_specs_removed = static_cast<int64_t>(garbage.graph_specs.size());
  out.fusion_records_removed = static_cast<int64_t>(garbage.fusion_records.size());
  for (const KernelCacheGarbage& k : garbage.kernel_caches) {
    ++(k.stale ? out.kernel_caches_stale_removed : out.kernel_caches_old_removed);
    out.kernel_caches_removed.push_back(k.what);
  }
  if (options.dry_run) return out;  // nothing written

  // What was found, removed in the same write transaction (nothing else wrote in between).
  auto delete_rows = [&](const char* table, const std::vector<int64_t>& rowids) -> Status {
    if (rowids.empty()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, std::string("DELETE FROM ") + table + " WHERE rowid=?1"));
    for (int64_t rowid : rowids) {
      del.bind(1, rowid);
      KILN_RETURN_IF_ERROR(del.run());
      KILN_RETURN_IF_ERROR(del.reset());
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(delete_rows("plans", garbage.stale_plans));
  KILN_RETURN_IF_ERROR(delete_rows("plans", garbage.old_plans));
  if (garbage.quarantined > 0) KILN_RETURN_IF_ERROR(exec(db_, "DELETE FROM quarantine"));
  KILN_RETURN_IF_ERROR(delete_rows("graph_specs", garbage.graph_specs));
  KILN_RETURN_IF_ERROR(delete_rows("fusion_decisions", garbage.fusion_records));
  for (const KernelCacheGarbage& k : garbage.kernel_caches)
    KILN_RETURN_IF_ERROR(drop_kernel_cache_row_locked(k.row).status());
  KILN_RETURN_IF_ERROR(txn.commit());
  return out;
}

Status SqlitePlanStore::gc_find_locked(const GcOptions& options, const std::set<int64_t>& gone_plans,
                                       const std::set<int64_t>& gone_caches, GcGarbage* out) {
  // The plan rows gone by each step, as a real run removes them in turn: corrupt, then stale, then old.
  std::set<int64_t> gone = gone_plans;
  if (options.current) {
    KILN_ASSIGN_OR_RETURN(Stmt st,
                          Stmt::prepare(db_, "SELECT rowid, fingerprint_json, kiln_schema_version FROM plans"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      const int64_t rowid = st.int64(0);
      if (gone.count(rowid)) continue;
      StatusOr<EnvFingerprint> fp = fingerprint_from_json(st.text(1));
      if (!fp.is_ok()) continue;  // corrupt, not stale: drop_corrupt's business
      bool pass = check_fingerprint(*fp, *options.current, options.policy).pass && st.int64(2) <= kStoreSchemaVersion;
      if (!pass) out->stale_plans.push_back(rowid);
    }
    gone.insert(out->stale_plans.begin(), out->stale_plans.end());
  }
  if (options.older_than) {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid FROM plans WHERE created_at < ?1"));
    st.bind(1, *options.older_than);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      if (!gone.count(st.int64(0))) out->old_plans.push_back(st.int64(0));
    }
    gone.insert(out->old_plans.begin(), out->old_plans.end());
  }
  // A table an older store lacks (a read-only dry run adds none) holds nothing to remove.
  KILN_ASSIGN_OR_RETURN(bool has_quarantine, store::table_exists(db_, "quarantine"));
  if (options.drop_quarantine && has_quarantine) {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT count(*) FROM quarantine"));
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    out->quarantined = row ? st.int64(0) : 0;
  }
  // Graph specs that no plan left and no queued re-tune refers to (matched as SQL compares the columns).
  KILN_ASSIGN_OR_RETURN(bool has_specs, store::table_exists(db_, "graph_specs"));
  if (has_specs) {
    KILN_ASSIGN_OR_RETURN(bool has_queue, store::table_exists(db_, "retune_queue"));
    KILN_ASSIGN_OR_RETURN(
        Stmt st, Stmt::prepare(db_, std::string("SELECT g.rowid, p.rowid FROM graph_specs g LEFT JOIN plans p ON "
                                                "p.structure_sig = g.structure_sig AND p.shape_key = g.shape_key") +
                                        (has_queue ? " WHERE NOT EXISTS (SELECT 1 FROM retune_queue q WHERE "
                                                     "q.structure_sig = g.structure_sig AND q.shape_key = g.shape_key)"
                                                   : "") +
                                        " ORDER BY g.rowid"));
    std::map<int64_t, bool> referred;  // graph spec rowid -> whether a plan left refers to it
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      bool& r = referred[st.int64(0)];
      r = r || (st.type(1) != SQLITE_NULL && !gone.count(st.int64(1)));
    }
    for (const auto& [rowid, r] : referred)
      if (!r) out->graph_specs.push_back(rowid);
  }
  // Fusion decisions that could not serve any more: a part's record (same environment) is gone, or the row
  // does not read back (damaged).
  KILN_ASSIGN_OR_RETURN(bool has_fusions, store::table_exists(db_, "fusion_decisions"));
  if (has_fusions) {
    KILN_ASSIGN_OR_RETURN(
        Stmt st, Stmt::prepare(db_, std::string("SELECT rowid, ") + store::fusion_record_codec().table.column_list() +
                                        " FROM fusion_decisions"));
    KILN_ASSIGN_OR_RETURN(Stmt has, Stmt::prepare(db_, "SELECT rowid FROM plans WHERE structure_sig=?1 AND "
                                                       "shape_key=?2 AND fingerprint_key=?3"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      FusionRecord fr;
      bool alive = store::fusion_record_codec().read(st, 1, &fr).empty();
      for (size_t i = 0; alive && i < fr.parts.size(); ++i) {
        has.bind(1, fr.parts[i].structure_sig).bind(2, fr.parts[i].shape_key).bind(3, st.text(3));
        bool found = false;
        while (true) {
          KILN_ASSIGN_OR_RETURN(bool part, has.step());
          if (!part) break;
          found = found || !gone.count(has.int64(0));
        }
        KILN_RETURN_IF_ERROR(has.reset());
        alive = found;
      }
      if (!alive) out->fusion_records.push_back(st.int64(0));
    }
  }
  return gc_find_kernel_caches_locked(options, gone_caches, out);
}

StatusOr<std::vector<QuarantineEntry>> SqlitePlanStore::quarantine() {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT id, structure_sig, shape_key, fingerprint_key, reason, "
                                                    "quarantined_at FROM quarantine ORDER BY id"));
  std::vector<QuarantineEntry> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back({st.int64(0), st.text(1), st.text(2), st.text(3), st.text(4), st.int64(5)});
  }
  return out;
}

StoreCounters SqlitePlanStore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void SqlitePlanStore::reset_counters() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_ = StoreCounters{};
}

}  // namespace kiln
