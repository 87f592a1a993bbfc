#include "store/database.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "kiln/core/log.h"
#include "kiln/core/strings.h"
#include "kiln/store/plan_store.h"
#include "store/record_codec.h"
#include "store/pg_conn.h"
#include "store/schema_check.h"

namespace kiln::store {

namespace {

// Runs a pragma that returns one row per message (quick_check, integrity_check): "ok" or the messages.
StatusOr<std::string> check_pragma(Conn* db, const char* pragma) {
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
Status set_wal(Conn* db, int timeout_ms) {
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

constexpr const char* kMetaTableSql = "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)";

// The schema version in the meta table: NewerVersion past `schema.version`, Corruption when missing or not a
// positive number.
StatusOr<int> read_schema_version(Conn* db, const Schema& schema) {
  KILN_RETURN_IF_ERROR(check_table_schema(db, "meta", kMetaTableSql, true));
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, "SELECT value FROM meta WHERE key='schema_version'"));
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return corruption("the meta table has no schema_version");
  std::string v = st.text(0);
  char* end = nullptr;
  long version = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') return corruption("schema_version '" + v + "' is not a number");
  if (version > schema.version)
    return newer_version("written with store schema version " + std::to_string(version) +
                         ", newer than this Kiln understands (" + std::to_string(schema.version) +
                         "): upgrade Kiln or use another store (--store / $KILN_STORE)");
  if (version < 1) return corruption("schema_version " + v + " is not valid");
  return static_cast<int>(version);
}

// The migration from `version`, or null.
const Migration* migration_from(const Schema& schema, int version) {
  for (const Migration& m : schema.migrations)
    if (m.from == version) return &m;
  return nullptr;
}

// The file's version; a read-only open of a file with steps to run is refused.
StatusOr<int> check_schema_version(Conn* db, const Schema& schema, bool read_only) {
  KILN_ASSIGN_OR_RETURN(int version, read_schema_version(db, schema));
  if (read_only && version < schema.version && migration_from(schema, version))
    return failed_precondition(
        "written with store schema version " + std::to_string(version) + ", which this Kiln (" +
        std::to_string(schema.version) + ") migrates on its first writing open (\"" +
        migration_from(schema, version)->what +
        "\"): a Kiln command that writes to it (kiln tune --store, kiln worker, kiln plans import) "
        "migrates it; until then an older Kiln reads it");
  return version;
}

// In the caller's write transaction: the steps from the file's version on, then the version they reach.
Status run_migrations(Conn* db, const Schema& schema) {
  KILN_ASSIGN_OR_RETURN(int version, read_schema_version(db, schema));
  const int from = version;
  for (const Migration* m = migration_from(schema, version); m && version < schema.version;
       m = migration_from(schema, version)) {
    Status st = m->apply(db);
    if (!st.is_ok())
      return st.with_context("migrating the " + std::string(schema.what) + " from schema version " +
                             std::to_string(version) + " (" + m->what + ")");
    ++version;
  }
  if (version == from) return Status::ok();
  KILN_ASSIGN_OR_RETURN(Stmt up, Stmt::prepare(db, "UPDATE meta SET value=?1 WHERE key='schema_version'"));
  up.bind(1, std::to_string(version));
  KILN_RETURN_IF_ERROR(up.run());
  KILN_LOG(kInfo, schema.what << " migrated from schema version " << from << " to " << version);
  return Status::ok();
}

// What the file holds, read without writing anything: true for a file of this schema (its version and tables
// checked), false for an empty database; any other SQLite database is refused (InvalidArgument).
StatusOr<bool> check_existing_schema(Conn* db, const Schema& schema, bool read_only) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> names, db->table_names());
  if (std::find(names.begin(), names.end(), "meta") == names.end()) {
    if (!names.empty())
      return invalid_argument(std::string(db->dialect() == SqlDialect::kSqlite ? "a SQLite" : "a PostgreSQL") +
                              " database but not a Kiln " + schema.what + " (tables: " + join(names, ", ") + ")");
    return false;
  }
  KILN_ASSIGN_OR_RETURN(int version, check_schema_version(db, schema, read_only));
  // Tables a migration is yet to change are checked after it (init_schema).
  if (read_only || !migration_from(schema, version)) KILN_RETURN_IF_ERROR(schema.check_tables(db));
  return true;
}

// A read-only open of a database with no tables (an empty file, a PostgreSQL schema nobody wrote yet).
constexpr const char* kEmptyDatabase = " (empty database: the first command that writes to it makes it a store)";

// Checks the schema (read-only), or checks and creates it under the write lock, writing the version into a
// new file.
Status init_schema(Conn* db, bool read_only, const Schema& schema) {
  if (read_only) {
    KILN_ASSIGN_OR_RETURN(bool is_kiln, check_existing_schema(db, schema, /*read_only=*/true));
    if (!is_kiln) return invalid_argument(std::string("not a Kiln ") + schema.what + kEmptyDatabase);
    return Status::ok();
  }
  Txn txn(db);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(bool has_meta, check_existing_schema(db, schema, false));  // again, under the write lock
  if (has_meta) {
    KILN_RETURN_IF_ERROR(run_migrations(db, schema));
    KILN_RETURN_IF_ERROR(schema.check_tables(db));
  }
  KILN_RETURN_IF_ERROR(exec(db, kMetaTableSql));
  KILN_RETURN_IF_ERROR(schema.create_tables(db));
  if (!has_meta) {
    KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(db, "INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)"));
    ins.bind(1, std::string_view("schema_version")).bind(2, std::to_string(schema.version));
    KILN_RETURN_IF_ERROR(ins.run());
    KILN_RETURN_IF_ERROR(ins.reset());
    ins.bind(1, std::string_view("created_at")).bind(2, std::to_string(unix_now()));
    KILN_RETURN_IF_ERROR(ins.run());
  }
  return txn.commit();
}

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

// The connection's settings, its checks and its schema, on a file just opened.
Status configure(Conn* db, const StoreOpenOptions& options, const Schema& schema) {
  if (!options.read_only) {
    // Look before writing: switching to WAL rewrites the file's header, so a SQLite file that is not a
    // Kiln store (a bundle given as --store, say) is refused untouched.
    KILN_RETURN_IF_ERROR(check_existing_schema(db, schema, options.read_only).status());
    KILN_RETURN_IF_ERROR(set_wal(db, options.busy_timeout_ms));
    // WAL + NORMAL: a crash of the process never loses a committed write or damages the file; a power
    // loss may lose the last commits but leaves the file consistent.
    KILN_RETURN_IF_ERROR(exec(db, "PRAGMA synchronous=NORMAL"));
  }
  if (options.quick_check) {
    KILN_ASSIGN_OR_RETURN(std::string qc, check_pragma(db, "PRAGMA quick_check"));
    if (qc != "ok") return corruption("damaged database file (quick_check: " + qc + ")");
  }
  return init_schema(db, options.read_only, schema);
}

bool is_readonly_refusal(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition && s.message().find("readonly") != std::string::npos;
}

}  // namespace

bool Database::is_empty(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().find(kEmptyDatabase) != std::string::npos;
}

bool Database::is_unwritable(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().find(kUnwritable) != std::string::npos;
}

StatusOr<Database> Database::open(const std::string& path, const StoreOpenOptions& options, const Schema& schema) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string what = schema.what;
  if (!options.read_only) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::exists(parent, ec)) {
      fs::create_directories(parent, ec);
      if (ec) return unavailable("cannot create folder " + parent.string() + " for the " + what + ": " + ec.message());
    }
  }
  sqlite3* raw = nullptr;
  int flags =
      (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_FULLMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  auto db = std::make_unique<SqliteConn>(DbPtr(raw));
  if (rc != SQLITE_OK) return sqlite_status(raw, rc, "cannot open " + what + " " + path);
  // SQLite opens a file this user may not write read-only without a word when asked to write it: every write
  // would then fail later with "attempt to write a readonly database" (and gc counted removals it never made).
  // A store opened to write must be writable: said here, once, naming the file.
  if (!options.read_only && sqlite3_db_readonly(raw, "main") == 1)
    return invalid_argument(what + " " + path + kUnwritable);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  Status s = configure(db.get(), options, schema);
  // A read-only open of a WAL store where nothing beside it can be written (a baked store in a read-only
  // folder or file): SQLite cannot make the -shm file it reads through. With no -wal left beside the file
  // (a store closed cleanly has none), nothing is missed by reading the file as immutable.
  if (options.read_only && is_readonly_refusal(s)) {
    const std::string wal = path + "-wal";
    if (fs::exists(wal, ec) && fs::file_size(wal, ec) > 0)
      return failed_precondition(what + " " + path + " cannot be read here: it is read-only to this user and " + wal +
                                 " holds writes not yet in the file (open it once where it can be " +
                                 "written, or copy the store)");
    db.reset();
    raw = nullptr;
    const std::string uri = "file:" + uri_path(path) + "?immutable=1";
    rc = sqlite3_open_v2(uri.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr);
    db = std::make_unique<SqliteConn>(DbPtr(raw));
    if (rc != SQLITE_OK) return sqlite_status(raw, rc, "cannot open " + what + " " + path + " (immutable)");
    sqlite3_extended_result_codes(raw, 1);
    s = configure(db.get(), options, schema);
  }
  // A store this user cannot write (the file, or the folder its -wal and -shm go in), opened to write: bad
  // input naming what to do, not SQLite's "attempt to write a readonly database" as a policy refusal (exit 6).
  if (!options.read_only && is_readonly_refusal(s)) return invalid_argument(what + " " + path + kUnwritable);
  if (!s.is_ok()) {
    if (s.code() == StatusCode::kCorruption && s.message().find("not a database") != std::string::npos)
      return corruption(what + " " + path + " is not a SQLite database (damaged or another kind of file)");
    return Status(s.code(), what + " " + path + ": " + s.message());
  }
  return Database(std::move(db));
}

StatusOr<Database> Database::open_postgres(const std::string& conninfo, const std::string& display,
                                           const StoreOpenOptions& options, const Schema& schema) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PgConn> conn, PgConn::connect(conninfo, display, options.read_only));
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> schema_name, [&]() -> StatusOr<std::vector<std::string>> {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(conn.get(), "SELECT coalesce(current_schema(), '')"));
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    return std::vector<std::string>{row ? st.text(0) : std::string()};
  }());
  if (schema_name[0].empty())
    return invalid_argument(schema.what + std::string(" ") + display +
                            ": no schema to keep the tables in (the search_path names none that exists)");
  Status s = init_schema(conn.get(), options.read_only, schema);
  if (!s.is_ok()) return Status(s.code(), std::string(schema.what) + " " + display + ": " + s.message());
  return Database(std::unique_ptr<Conn>(std::move(conn)));
}

StatusOr<std::string> Database::integrity_check() const {
  if (db_->dialect() == SqlDialect::kSqlite) return check_pragma(db_.get(), "PRAGMA integrity_check");
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_.get(), "SELECT 1"));
  KILN_RETURN_IF_ERROR(st.run());
  return std::string("ok");
}

}  // namespace kiln::store
