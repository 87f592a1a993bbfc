#include "store/sqlite_util.h"

namespace kiln::store {

Status sqlite_status(sqlite3* db, int rc, const std::string& what) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return Status::ok();
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return corruption(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_NOMEM: return unavailable(msg);
    case SQLITE_CANTOPEN: return not_found(msg);
    case SQLITE_READONLY:
    case SQLITE_PERM: return failed_precondition(msg);
    default: return internal_error(msg);
  }
}

Status exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::ok();
  std::string m = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  Status s = sqlite_status(nullptr, rc, std::string("SQL '") + sql + "'");
  return Status(s.code(), std::string("SQL '") + sql + "': " + m);
}

StatusOr<Stmt> Stmt::prepare(sqlite3* db, std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return sqlite_status(db, rc, "preparing '" + std::string(sql.substr(0, 60)) + "'");
  }
  return Stmt(db, s);
}

Stmt& Stmt::bind(int i, std::string_view text) {
  int rc = sqlite3_bind_text(s_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_.is_ok()) bind_error_ = sqlite_status(db_, rc, "bind");
  return *this;
}

Stmt& Stmt::bind_blob(int i, std::string_view bytes) {
  static const char kEmpty = 0;  // a null pointer would bind NULL, not an empty blob
  int rc = sqlite3_bind_blob(s_, i, bytes.empty() ? &kEmpty : bytes.data(), static_cast<int>(bytes.size()),
                             SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_.is_ok()) bind_error_ = sqlite_status(db_, rc, "bind");
  return *this;
}

Stmt& Stmt::bind(int i, int64_t v) {
  int rc = sqlite3_bind_int64(s_, i, v);
  if (rc != SQLITE_OK && bind_error_.is_ok()) bind_error_ = sqlite_status(db_, rc, "bind");
  return *this;
}

Stmt& Stmt::bind_double(int i, double v) {
  int rc = sqlite3_bind_double(s_, i, v);
  if (rc != SQLITE_OK && bind_error_.is_ok()) bind_error_ = sqlite_status(db_, rc, "bind");
  return *this;
}

StatusOr<bool> Stmt::step() {
  if (!bind_error_.is_ok()) return bind_error_;
  int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_status(db_, rc, "executing '" + std::string(sqlite3_sql(s_)).substr(0, 60) + "'");
}

Status Stmt::run() {
  while (true) {
    StatusOr<bool> r = step();
    if (!r.is_ok()) return r.status();
    if (!*r) return Status::ok();
  }
}

Status Stmt::reset() {
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
  return Status::ok();
}

std::string Stmt::text(int col) const {
  const void* p = sqlite3_column_type(s_, col) == SQLITE_BLOB ? sqlite3_column_blob(s_, col)
                                                              : static_cast<const void*>(sqlite3_column_text(s_, col));
  int n = sqlite3_column_bytes(s_, col);
  if (!p || n <= 0) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
}

Txn::~Txn() {
  if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

Status Txn::begin() {
  KILN_RETURN_IF_ERROR(exec(db_, "BEGIN IMMEDIATE"));
  open_ = true;
  return Status::ok();
}

Status Txn::commit() {
  Status s = exec(db_, "COMMIT");
  if (s.is_ok()) open_ = false;
  return s;
}

Status Txn::begin_read() {
  KILN_RETURN_IF_ERROR(exec(db_, "BEGIN"));
  open_ = true;
  return Status::ok();
}

}  // namespace kiln::store
