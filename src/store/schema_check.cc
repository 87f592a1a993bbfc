#include "store/schema_check.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "store/sql.h"

namespace kiln::store {
namespace {

std::string lowercase(const std::string& s) {
  std::string out;
  for (char ch : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// The columns `create_sql` makes, found by running it on an empty in-memory database (once per text).
StatusOr<std::vector<std::string>> expected_columns(const std::string& table, const std::string& create_sql) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(create_sql);
  if (it != cache.end()) return it->second;
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(":memory:", &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  DbPtr mem(raw);
  if (rc != SQLITE_OK) return sqlite_status(raw, rc, "opening an in-memory database");
  SqliteConn conn(raw);
  KILN_RETURN_IF_ERROR(conn.exec(create_sql.c_str()));
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> cols, conn.columns_of(table));
  if (cols.empty()) return internal_error("CREATE text for table '" + table + "' makes no such table");
  cache[create_sql] = cols;
  return cols;
}

// Kiln reads its rows by SQLite's own rowid: a WITHOUT ROWID table, or a column that takes the rowid's name
// (and so its place in every query), is damage, not a SQL error or a wrong row at the first query.
Status check_sqlite_rowid(Conn* db, const std::string& table, const std::vector<std::string>& have_list,
                          const std::vector<std::string>& want) {
  for (const std::string& c : have_list) {
    const std::string lower = lowercase(c);
    if ((lower == "rowid" || lower == "_rowid_" || lower == "oid") &&
        std::find(want.begin(), want.end(), c) == want.end())
      return corruption("table '" + table + "' has a column named '" + c + "' (damaged schema)");
  }
  if (!Stmt::prepare(db, "SELECT rowid FROM \"" + table + "\" LIMIT 0").is_ok())
    return corruption("table '" + table + "' is WITHOUT ROWID, and Kiln reads its rows by rowid (damaged schema)");
  return Status::ok();
}

}  // namespace

Status check_table_schema(Conn* db, const std::string& table, const std::string& create_sql, bool required) {
  KILN_ASSIGN_OR_RETURN(std::string type, db->object_type(table));
  if (type.empty()) {
    if (required) return corruption("no '" + table + "' table (damaged schema)");
    return Status::ok();
  }
  if (type != "table")
    return corruption("'" + table + "' is " + (type == "index" ? "an " : "a ") + type +
                      ", not a table (damaged schema)");
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> want, expected_columns(table, create_sql));
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> have_list, db->columns_of(table));
  // SQLite's column names are case-insensitive: a table made with STRUCTURE_SIG has the column structure_sig.
  std::set<std::string> have;
  for (const std::string& c : have_list) have.insert(lowercase(c));
  // Kiln reads its rows by rowid: SQLite's own, or on PostgreSQL the BIGSERIAL column of that name it made.
  if (db->dialect() == SqlDialect::kPostgres) {
    if (!have.count("rowid")) return corruption("table '" + table + "' lacks column 'rowid' (damaged schema)");
  } else {
    KILN_RETURN_IF_ERROR(check_sqlite_rowid(db, table, have_list, want));
  }
  std::vector<std::string> missing;
  for (const std::string& c : want)
    if (!have.count(lowercase(c))) missing.push_back(c);
  if (missing.empty()) return Status::ok();
  std::string list;
  for (const std::string& c : missing) list += (list.empty() ? "'" : ", '") + c + "'";
  return corruption("table '" + table + "' lacks column" + (missing.size() == 1 ? " " : "s ") + list +
                    " (damaged schema)");
}

}  // namespace kiln::store
