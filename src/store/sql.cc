#include "store/sql.h"

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

namespace {

// A SQLite prepared statement.
class SqliteStmt final : public StmtImpl {
 public:
  SqliteStmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  ~SqliteStmt() override { sqlite3_finalize(s_); }

  void bind_text(int i, std::string_view text) override {
    note(sqlite3_bind_text(s_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
  }
  void bind_blob(int i, std::string_view bytes) override {
    static const char kEmpty = 0;  // a null pointer would bind NULL, not an empty blob
    note(sqlite3_bind_blob(s_, i, bytes.empty() ? &kEmpty : bytes.data(), static_cast<int>(bytes.size()),
                           SQLITE_TRANSIENT));
  }
  void bind_int64(int i, int64_t v) override { note(sqlite3_bind_int64(s_, i, v)); }
  void bind_double(int i, double v) override { note(sqlite3_bind_double(s_, i, v)); }
  StatusOr<bool> step() override {
    if (!bind_error_.is_ok()) return bind_error_;
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return sqlite_status(db_, rc, "executing '" + std::string(sqlite3_sql(s_)).substr(0, 60) + "'");
  }
  void reset() override {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    bind_error_ = Status::ok();
  }
  int type(int col) const override { return sqlite3_column_type(s_, col); }
  int64_t int64(int col) const override { return sqlite3_column_int64(s_, col); }
  double real(int col) const override { return sqlite3_column_double(s_, col); }
  std::string text(int col) const override {
    const void* p = sqlite3_column_type(s_, col) == SQLITE_BLOB
                        ? sqlite3_column_blob(s_, col)
                        : static_cast<const void*>(sqlite3_column_text(s_, col));
    int n = sqlite3_column_bytes(s_, col);
    if (!p || n <= 0) return std::string();
    return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
  }

 private:
  void note(int rc) {
    if (rc != SQLITE_OK && bind_error_.is_ok()) bind_error_ = sqlite_status(db_, rc, "bind");
  }
  sqlite3* db_;
  sqlite3_stmt* s_;
  Status bind_error_;
};

}  // namespace

StatusOr<std::unique_ptr<StmtImpl>> SqliteConn::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return sqlite_status(db_, rc, "preparing '" + std::string(sql.substr(0, 60)) + "'");
  }
  return std::unique_ptr<StmtImpl>(new SqliteStmt(db_, s));
}

Status SqliteConn::exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::ok();
  std::string m = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  Status s = sqlite_status(nullptr, rc, std::string("SQL '") + sql + "'");
  return Status(s.code(), std::string("SQL '") + sql + "': " + m);
}

StatusOr<std::string> SqliteConn::object_type(const std::string& name) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE"));
  st.bind(1, name);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  return row ? st.text(0) : std::string();
}

StatusOr<std::vector<std::string>> SqliteConn::table_names() {
  // Views too: a Kiln table replaced by a view is damage, not another kind of database.
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"));
  std::vector<std::string> names;
  KILN_RETURN_IF_ERROR(for_each_row(st, [&] {
    std::string n = st.text(0);
    if (n.rfind("sqlite_", 0) != 0) names.push_back(n);
    return Status::ok();
  }));
  return names;
}

StatusOr<std::vector<std::string>> SqliteConn::columns_of(const std::string& table) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT name FROM pragma_table_info(?1)"));
  st.bind(1, table);
  std::vector<std::string> out;
  KILN_RETURN_IF_ERROR(for_each_row(st, [&] { return out.push_back(st.text(0)), Status::ok(); }));
  return out;
}

StatusOr<Stmt> Stmt::prepare(Conn* db, std::string_view sql) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<StmtImpl> s, db->prepare(sql));
  return Stmt(std::move(s));
}

Status Stmt::run() {
  while (true) {
    StatusOr<bool> r = step();
    if (!r.is_ok()) return r.status();
    if (!*r) return Status::ok();
  }
}

Txn::~Txn() {
  if (open_) db_->rollback();
}

Status Txn::begin() {
  KILN_RETURN_IF_ERROR(db_->begin_write());
  open_ = true;
  return Status::ok();
}

Status Txn::begin_row_locks() {
  KILN_RETURN_IF_ERROR(db_->begin_row_locks());
  open_ = true;
  return Status::ok();
}

Status Txn::commit() {
  Status s = db_->commit();
  if (s.is_ok()) open_ = false;
  return s;
}

Status Txn::begin_read() {
  KILN_RETURN_IF_ERROR(db_->begin_read());
  open_ = true;
  return Status::ok();
}

}  // namespace kiln::store
