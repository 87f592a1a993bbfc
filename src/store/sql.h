// The store's SQL connection, private to the store layer: one interface (Conn, Stmt, Txn) over SQLite (the
// embedded default: SqliteConn here) and PostgreSQL (a fleet: store/pg_conn.h). Every store query is written
// once, in SQLite's dialect (?N parameters, INSERT OR REPLACE), and a PostgreSQL connection translates it
// (store/pg_sql.h). Column types read back are SQLite's type codes (SQLITE_INTEGER, ...), whatever the
// backend. Every failure becomes a Status; nothing here throws.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::store {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

// Maps a SQLite result code to a Status: CORRUPT/NOTADB -> Corruption, BUSY/LOCKED/FULL/IOERR ->
// Unavailable, CANTOPEN -> NotFound, READONLY -> FailedPrecondition, anything else -> Internal.
Status sqlite_status(sqlite3* db, int rc, const std::string& what);

enum class SqlDialect { kSqlite, kPostgres };

// One prepared statement of a backend. Binders take 1-based indexes and copy what they are given.
class StmtImpl {
 public:
  virtual ~StmtImpl() = default;
  virtual void bind_text(int i, std::string_view text) = 0;
  virtual void bind_blob(int i, std::string_view bytes) = 0;
  virtual void bind_int64(int i, int64_t v) = 0;
  virtual void bind_double(int i, double v) = 0;
  virtual StatusOr<bool> step() = 0;    // true for a row, false when done
  virtual void reset() = 0;             // back to before the first step, bindings cleared
  virtual int type(int col) const = 0;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL
  virtual int64_t int64(int col) const = 0;
  virtual double real(int col) const = 0;
  virtual std::string text(int col) const = 0;  // text or blob bytes; "" for NULL
};

// A connection to one database. Not shared between threads without a lock (the stores hold one).
class Conn {
 public:
  virtual ~Conn() = default;
  virtual SqlDialect dialect() const = 0;
  virtual StatusOr<std::unique_ptr<StmtImpl>> prepare(std::string_view sql) = 0;
  // Runs SQL without results (several statements separated by ';' allowed).
  virtual Status exec(const char* sql) = 0;
  // The rows the last INSERT, UPDATE or DELETE changed.
  virtual int64_t changes() const = 0;
  // A write transaction that holds the database's write lock from its start (SQLite: BEGIN IMMEDIATE;
  // PostgreSQL: BEGIN and a transaction-scoped advisory lock, so that writers are serialized as on SQLite),
  // or a read snapshot (no lock; works on a read-only connection).
  virtual Status begin_write() = 0;
  virtual Status begin_read() = 0;
  // A write transaction that takes no database-wide lock (PostgreSQL: BEGIN, rows locked as read with
  // FOR UPDATE); SQLite has only the one write lock.
  virtual Status begin_row_locks() { return begin_write(); }
  virtual Status commit() = 0;
  virtual void rollback() = 0;
  // What the database calls `name` (case-insensitively): "table", "view", "index", ..., or "" when absent.
  virtual StatusOr<std::string> object_type(const std::string& name) = 0;
  // The tables and views of the database (SQLite's own and the backend's catalog left out).
  virtual StatusOr<std::vector<std::string>> table_names() = 0;
  // The columns of a table, in order.
  virtual StatusOr<std::vector<std::string>> columns_of(const std::string& table) = 0;
  // Whether the database has a table of this name, case-insensitively.
  StatusOr<bool> table_exists(const char* table) {
    KILN_ASSIGN_OR_RETURN(std::string type, object_type(table));
    return type == "table";
  }
  // Notifications between connections (PostgreSQL LISTEN/NOTIFY; none on SQLite): listen() subscribes this
  // connection to a channel (again after a reconnect), notify() sends a payload when the caller's transaction
  // commits, notifications() returns the payloads other connections sent since the last call, without waiting
  // ("*" when some may have been missed: the connection was made again), less those sent by the sessions in `skip`
  // (session_id() of other connections whose writes the caller knows of).
  virtual Status listen(const char* channel) { return Status::ok(); }
  virtual Status notify(const char* channel, const std::string& payload) { return Status::ok(); }
  virtual StatusOr<std::vector<std::string>> notifications(const std::set<int>& skip = {}) {
    (void)skip;
    return std::vector<std::string>();
  }
  // The server session this connection is now (PostgreSQL's backend process id); 0 where there is none (SQLite,
  // not connected).
  virtual int session_id() { return 0; }
  // The SQLite handle, or null for another backend (file-level checks: pragmas, sqlite_master).
  virtual sqlite3* sqlite_handle() const { return nullptr; }
};

// A SQLite connection: owning its handle, or borrowing one (a bundle file opened by the caller).
class SqliteConn final : public Conn {
 public:
  explicit SqliteConn(DbPtr db) : owned_(std::move(db)), db_(owned_.get()) {}
  explicit SqliteConn(sqlite3* borrowed) : db_(borrowed) {}
  SqlDialect dialect() const override { return SqlDialect::kSqlite; }
  StatusOr<std::unique_ptr<StmtImpl>> prepare(std::string_view sql) override;
  Status exec(const char* sql) override;
  int64_t changes() const override { return sqlite3_changes(db_); }
  Status begin_write() override { return exec("BEGIN IMMEDIATE"); }
  Status begin_read() override { return exec("BEGIN"); }
  Status commit() override { return exec("COMMIT"); }
  void rollback() override { sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr); }
  StatusOr<std::string> object_type(const std::string& name) override;
  StatusOr<std::vector<std::string>> table_names() override;
  StatusOr<std::vector<std::string>> columns_of(const std::string& table) override;
  sqlite3* sqlite_handle() const override { return db_; }

 private:
  DbPtr owned_;
  sqlite3* db_;
};

// Runs SQL without results.
inline Status exec(Conn* db, const char* sql) { return db->exec(sql); }

// A prepared statement (move-only), the same for every backend.
class Stmt {
 public:
  static StatusOr<Stmt> prepare(Conn* db, std::string_view sql);
  Stmt(Stmt&& o) noexcept = default;
  Stmt& operator=(Stmt&&) = delete;
  Stmt(const Stmt&) = delete;

  Stmt& bind(int i, std::string_view text) { return s_->bind_text(i, text), *this; }
  Stmt& bind_blob(int i, std::string_view bytes) { return s_->bind_blob(i, bytes), *this; }
  Stmt& bind(int i, int64_t v) { return s_->bind_int64(i, v), *this; }
  Stmt& bind_double(int i, double v) { return s_->bind_double(i, v), *this; }
  // Returns true for a row, false when done.
  StatusOr<bool> step() { return s_->step(); }
  // Steps to completion.
  Status run();
  Status reset() { return s_->reset(), Status::ok(); }

  int type(int col) const { return s_->type(col); }
  int64_t int64(int col) const { return s_->int64(col); }
  double real(int col) const { return s_->real(col); }
  std::string text(int col) const { return s_->text(col); }

 private:
  explicit Stmt(std::unique_ptr<StmtImpl> s) : s_(std::move(s)) {}
  std::unique_ptr<StmtImpl> s_;
};

// Steps `st` through its rows, calling `each()` on every one; stops at the first error (its own or each's).
template <class Each>
Status for_each_row(Stmt& st, Each&& each) {
  while (true) {
    StatusOr<bool> row = st.step();
    if (!row.is_ok()) return row.status();
    if (!*row) return Status::ok();
    KILN_RETURN_IF_ERROR(each());
  }
}

// A transaction, rolled back on destruction unless commit() succeeded.
//   begin()       a write transaction (Conn::begin_write: the write lock at once);
//   begin_read()  a read snapshot: the reads that follow see one state of the database and take no write
//                 lock, so it works on a read-only connection; it writes nothing, so ending it is a rollback.
class Txn {
 public:
  explicit Txn(Conn* db) : db_(db) {}
  ~Txn();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  Status begin();
  Status begin_read();
  Status begin_row_locks();  // Conn::begin_row_locks
  Status commit();

 private:
  Conn* db_;
  bool open_ = false;
};

}  // namespace kiln::store
