// Small RAII helpers over the SQLite C API, private to the store layer. Every failure becomes a Status;
// nothing here throws.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/core/status.h"

namespace kiln::store {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

// Maps a SQLite result code to a Status: CORRUPT/NOTADB -> Corruption, BUSY/LOCKED/FULL/IOERR ->
// Unavailable, CANTOPEN -> NotFound, READONLY -> FailedPrecondition, anything else -> Internal.
Status sqlite_status(sqlite3* db, int rc, const std::string& what);

// Runs SQL without results.
Status exec(sqlite3* db, const char* sql);

// A prepared statement (move-only).
class Stmt {
 public:
  static StatusOr<Stmt> prepare(sqlite3* db, std::string_view sql);
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_) { o.s_ = nullptr; }
  Stmt& operator=(Stmt&&) = delete;
  Stmt(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  // Binders take 1-based indexes; text and blobs are copied (SQLITE_TRANSIENT).
  Stmt& bind(int i, std::string_view text);
  Stmt& bind_blob(int i, std::string_view bytes);
  Stmt& bind(int i, int64_t v);
  Stmt& bind_double(int i, double v);
  // Returns true for a row, false when done.
  StatusOr<bool> step();
  // Steps to completion.
  Status run();
  Status reset();

  int type(int col) const { return sqlite3_column_type(s_, col); }
  int64_t int64(int col) const { return sqlite3_column_int64(s_, col); }
  double real(int col) const { return sqlite3_column_double(s_, col); }
  std::string text(int col) const;  // text or blob bytes; "" for NULL
  sqlite3_stmt* raw() const { return s_; }

 private:
  Stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  sqlite3* db_;
  sqlite3_stmt* s_;
  Status bind_error_;
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
//   begin()       BEGIN IMMEDIATE: takes the write lock at once (a write transaction);
//   begin_read()  BEGIN (deferred): the reads that follow see one snapshot of the database and take no write
//                 lock, so it works on a read-only connection; it writes nothing, so ending it is a rollback.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {}
  ~Txn();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  Status begin();
  Status begin_read();
  Status commit();

 private:
  sqlite3* db_;
  bool open_ = false;
};

}  // namespace kiln::store
