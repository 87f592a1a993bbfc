// Database: one SQLite file (or PostgreSQL database: open_postgres) opened as every Kiln store (and nothing
// else) is: its open, its transactions, its integrity check and its schema version. What tables it holds is the caller's (a Schema). Private to the store
// layer; the tables themselves are described in store/table_codec.h.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "store/sql.h"

namespace kiln {
struct StoreOpenOptions;  // kiln/store/plan_store.h
}  // namespace kiln

namespace kiln::store {

// One step of a schema's history: what makes a database of version `from` one of version `from` + 1 (an ALTER
// TABLE, a table rebuilt), run in the opening's write transaction on both backends.
struct Migration {
  int from = 0;
  const char* what = "";  // for the log and errors: "winner_changes gains a reason column"
  std::function<Status(Conn*)> apply;
};

// The tables of a database kind and its version. The version is kept in a `meta` table (key, value); a file
// without one is empty (a new store) or another kind of database, refused.
struct Schema {
  int version = 0;   // written into a new file; a file of a newer version is NewerVersion
  const char* what;  // "plan store": what error messages call the file
  // Every table of this schema present in the file is the one Kiln made (read only): Corruption otherwise.
  std::function<Status(Conn*)> check_tables;
  // CREATE TABLE IF NOT EXISTS for each table, in the caller's transaction.
  std::function<Status(Conn*)> create_tables;
  // The steps from older versions (docs/store.md "Migrations"). A writable open of a file of version v runs the
  // steps from v on, one after the other, then sets meta.schema_version to where they end, all in one
  // transaction (a failing step leaves the file as it was). A version with no step from it is as readable as
  // the current one (its tables are the same), and stays as it is. A read-only open of a file that has steps
  // to run is FailedPrecondition, naming both versions.
  std::vector<Migration> migrations;
};

class Database {
 public:
  // Opens (creating it and its folders unless read_only) the file at `path`: extended result codes, the busy
  // timeout; writable: the schema looked at before anything is written, then WAL and synchronous=NORMAL; a
  // quick_check when asked; then the schema version checked (newer: NewerVersion; not a number: Corruption)
  // and, writable, the tables created under the write lock. A read-only open that cannot make its -shm reads
  // the file as immutable when no -wal holds writes. Errors name the file.
  static StatusOr<Database> open(const std::string& path, const StoreOpenOptions& options, const Schema& schema);
  // Connects to the PostgreSQL database of a libpq connection string (store/pg_conn.h), checks its schema
  // as open() does and, unless read_only, creates the tables (under an advisory lock). Errors name `display`
  // (the connection string without its password).
  static StatusOr<Database> open_postgres(const std::string& conninfo, const std::string& display,
                                          const StoreOpenOptions& options, const Schema& schema);
  // True for open()'s refusal of a file this user cannot write, opened to write.
  static bool is_unwritable(const Status& s);
  // The error of a read-only open of a database that holds no tables yet (a new store, not a damaged one).
  static bool is_empty(const Status& s);

  Conn* handle() const { return db_.get(); }
  // A write transaction (Txn::begin) or a read snapshot (Txn::begin_read) on this file.
  Txn transaction() const { return Txn(db_.get()); }
  // SQLite: PRAGMA integrity_check, "ok" or SQLite's messages (the first ten, "; "-joined). PostgreSQL: "ok"
  // when the server answers (its pages are the server's to check; every row's checksum is verify's).
  StatusOr<std::string> integrity_check() const;

  // A database already connected and checked (store/pg_database.cc).
  explicit Database(std::unique_ptr<Conn> db) : db_(std::move(db)) {}

 private:
  std::unique_ptr<Conn> db_;
};

}  // namespace kiln::store
