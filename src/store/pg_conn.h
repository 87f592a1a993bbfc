// A PostgreSQL connection behind the store's Conn (store/sql.h): libpq (loaded at run time: store/libpq.h),
// every statement translated from the store's one dialect (store/pg_sql.h) and prepared once per connection
// (named server-side statements, by text and parameter types). A connection lost (a server restart, a network
// cut) is an Unavailable error for the call that met it, and the next call outside a transaction connects
// again. Private to the store layer.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "store/libpq.h"
#include "store/sql.h"

namespace kiln::store {

// Whether a store location is a PostgreSQL one: a postgresql:// or postgres:// URI, or a libpq key=value
// connection string (starting with host=, hostaddr=, dbname=, service=, user= or port=).
bool is_postgres_location(const std::string& location);
// The location as messages show it: a URI's password ("user:secret@") and a password=... pair replaced by ***.
std::string redact_location(const std::string& location);

class PgConn final : public Conn {
 public:
  // Connects; Unavailable (naming `display`) when the server cannot be reached, FailedPrecondition without
  // libpq. `read_only`: every transaction of the session is READ ONLY (the server refuses writes).
  static StatusOr<std::unique_ptr<PgConn>> connect(const std::string& conninfo, const std::string& display,
                                                   bool read_only);
  ~PgConn() override;

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }
  StatusOr<std::unique_ptr<StmtImpl>> prepare(std::string_view sql) override;
  Status exec(const char* sql) override;
  int64_t changes() const override { return changes_; }
  Status begin_write() override;
  Status begin_read() override;
  Status begin_row_locks() override;
  Status commit() override;
  void rollback() override;
  StatusOr<std::string> object_type(const std::string& name) override;
  StatusOr<std::vector<std::string>> table_names() override;
  StatusOr<std::vector<std::string>> columns_of(const std::string& table) override;
  Status listen(const char* channel) override;
  Status notify(const char* channel, const std::string& payload) override;
  StatusOr<std::vector<std::string>> notifications(const std::set<int>& skip = {}) override;
  int session_id() override;

  // Runs a translated statement with its parameters (text, or binary where formats[i] is 1); the result on
  // success (the caller clears it). For PgStmt.
  StatusOr<pq::PGresult*> run(const std::string& sql, const std::vector<unsigned>& types,
                              const std::vector<std::string>& values, const std::vector<int>& formats,
                              const std::vector<bool>& nulls);
  const pq::Api& api() const { return *api_; }
  pq::PGconn* raw() const { return conn_; }
  const std::string& display() const { return display_; }

 private:
  PgConn(const pq::Api* api, pq::PGconn* conn, std::string display, bool read_only)
      : api_(api), conn_(conn), display_(std::move(display)), read_only_(read_only) {}
  // Connects again when the connection was lost and no transaction is open; Unavailable when it cannot.
  Status ensure_connected();
  Status session_settings();
  // The Status of a failed result (and clears it): by SQLSTATE, naming `what`.
  Status result_error(pq::PGresult* res, const std::string& what);
  Status simple(const char* sql);  // a statement without parameters or rows
  Status begin(const char* sql);   // a transaction's BEGIN, once more on a new connection when the old one died

  const pq::Api* api_;
  pq::PGconn* conn_;
  std::string display_;
  bool read_only_;
  bool in_txn_ = false;
  int64_t changes_ = 0;
  std::map<std::string, std::string> prepared_;  // text + parameter types -> server-side statement name
  std::vector<std::string> channels_;            // listened to: again on every new session
  bool missed_notices_ = false;                  // a new session began since notifications() last asked
};

}  // namespace kiln::store
