// One codec for the rows of every store table. A table is described once, as data (its columns in order,
// their types, its key, and which columns its checksum covers); the SQL text (CREATE, INSERT, SELECT, DELETE by
// key), the binding of a row, its reading back with type checks, and the checksum are derived from that
// description here, for every record kind alike. A record kind adds only its encode (record -> Row) and
// decode (Row -> record, with the checks of its own fields). Private to the store layer.
//
// A Row is backend-neutral values: a PostgreSQL implementation of the same tables binds and reads the same
// Rows, and keeps the same checksums.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/sql.h"

namespace kiln::store {

enum class ColumnType { kText, kInteger, kReal, kBlob };
// A column the checksum does not cover (derived from others, or the checksum itself).
inline constexpr const char* kUnchecked = nullptr;

// The column type as a CREATE TABLE writes it (SQLite's words: TEXT, INTEGER, REAL, BLOB).
const char* sql_type_name(ColumnType t);

struct Column {
  const char* name;
  ColumnType type;
  // The field's name in the checksum's canonical text; kUnchecked (nullptr): not covered.
  const char* checksum_field;
};

// Columns of each type, for the column tables: text("shape_key") is covered by the checksum under its own
// name, text("fingerprint_json", "fingerprint") under another, text("checksum", kUnchecked) not at all.
inline Column text(const char* name, const char* field) { return {name, ColumnType::kText, field}; }
inline Column text(const char* name) { return text(name, name); }
inline Column integer(const char* name, const char* field) { return {name, ColumnType::kInteger, field}; }
inline Column integer(const char* name) { return integer(name, name); }
inline Column real(const char* name) { return {name, ColumnType::kReal, name}; }
inline Column blob(const char* name) { return {name, ColumnType::kBlob, name}; }

// One column's value: text and blob bytes in `text`, numbers in `integer` or `real` (by the column's type).
// Made from what the record holds: a string, an int64_t or a double.
struct Value {
  Value() = default;
  Value(std::string s) : text(std::move(s)) {}  // NOLINT: a row is written as a list of values
  Value(const char* s) : text(s) {}             // NOLINT
  Value(int64_t v) : integer(v) {}              // NOLINT
  Value(double v) : real(v) {}                  // NOLINT
  std::string text;
  int64_t integer = 0;
  double real = 0;
};
using Row = std::vector<Value>;

// A row from a record's fields, in column order: row_of(r.structure_sig, r.created_at, ...).
template <class... Fields>
Row row_of(Fields&&... fields) {
  return Row{Value(std::forward<Fields>(fields))...};
}

// Reads a row's values, in column order, into a record's fields: RowCursor(row) >> r.structure_sig >> ...
// (text and blob columns into strings, integers into int64_t, reals into double).
class RowCursor {
 public:
  explicit RowCursor(const Row& row) : row_(row) {}
  RowCursor& operator>>(std::string& v) { return v = row_[i_++].text, *this; }
  RowCursor& operator>>(int64_t& v) { return v = row_[i_++].integer, *this; }
  RowCursor& operator>>(double& v) { return v = row_[i_++].real, *this; }

 private:
  const Row& row_;
  size_t i_ = 0;
};

// How a row read back must be typed. kExact: each column holds its declared type ("column X has the wrong
// type"). kPlanRow (the plans table since its first version): a REAL column may hold an INTEGER, and a
// mistyped column is named with what it holds ("column X holds text").
enum class RowTyping { kExact, kPlanRow };

struct TableCodec {
  const char* table;             // its name in a store
  std::vector<Column> columns;   // in the table's order
  std::vector<const char*> key;  // the primary key's columns, in order
  const char* checksum_tag;      // first line of the checksum's canonical text; nullptr: no checksum
  RowTyping typing = RowTyping::kExact;
  bool checksum_canonical_zero = false;  // the checksum writes -0.0 as 0.0 (SQLite keeps both as 0)

  // "CREATE TABLE IF NOT EXISTS <name>(...)", one column a line, as every Kiln store was written.
  std::string create_sql(const char* name = nullptr) const;
  std::string column_list() const;  // "a, b, c"
  // "<verb> INTO <name>(<columns>) VALUES (?1,...,?n)".
  std::string insert_sql(const char* verb = "INSERT OR REPLACE", const char* name = nullptr) const;
  // "SELECT <columns> FROM <table><tail>".
  std::string select_sql(const std::string& tail = "") const;
  // " WHERE k1=?1 AND k2=?2 ..." over the first `n` key columns (all when n is 0).
  std::string where_key(size_t n = 0) const;
  int index(const char* column) const;  // -1 when absent

  // Binds `row` to the parameters first..first+n-1.
  void bind(Stmt& st, int first, const Row& row) const;
  // Reads the columns from column `first`, each as its declared type; the first column whose stored type is
  // wrong is named in *problem (left as it is when already set).
  Row read(const Stmt& st, int first, std::string* problem) const;
  // The checksum's canonical text, and its XXH3-128 hex, over the covered columns of a row.
  std::string canonical_text(const Row& row) const;
  std::string checksum(const Row& row) const;
};

// Appends "name=<length>:<value>\n" to a checksum's canonical text: every table's checksum is XXH3-128 over
// such fields, each length-prefixed so that no two field lists give one text.
inline void put_field(std::string& out, const char* name, std::string_view value) {
  out += name;
  out += '=';
  out += std::to_string(value.size());
  out += ':';
  out.append(value.data(), value.size());
  out += '\n';
}

// Binds `values` to ?1..?n (the key columns' values of a where_key clause).
void bind_texts(Stmt& st, std::initializer_list<std::string_view> values);

// "checksum mismatch (stored X, computed Y)", or "" when they agree.
std::string checksum_problem(const std::string& stored, const std::string& computed);

}  // namespace kiln::store
