#include "store/table_codec.h"

#include <cstring>

#include "kiln/core/hash.h"
#include "kiln/core/strings.h"

namespace kiln::store {

namespace {}  // namespace

const char* sql_type_name(ColumnType t) {
  switch (t) {
    case ColumnType::kText: return "TEXT";
    case ColumnType::kInteger: return "INTEGER";
    case ColumnType::kReal: return "REAL";
    case ColumnType::kBlob: return "BLOB";
  }
  return "TEXT";
}

namespace {

int sqlite_type(ColumnType t) {
  switch (t) {
    case ColumnType::kText: return SQLITE_TEXT;
    case ColumnType::kInteger: return SQLITE_INTEGER;
    case ColumnType::kReal: return SQLITE_FLOAT;
    case ColumnType::kBlob: return SQLITE_BLOB;
  }
  return SQLITE_TEXT;
}

const char* stored_type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "blob";
    case SQLITE_NULL: return "null";
  }
  return "?";
}

// Exact and platform-independent: the IEEE-754 bits.
std::string double_bits(double v, bool canonical_zero) {
  if (canonical_zero && v == 0) v = 0.0;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return hex64(bits);
}

}  // namespace

std::string TableCodec::create_sql(const char* name) const {
  std::string out = std::string("CREATE TABLE IF NOT EXISTS ") + (name ? name : table) + "(\n";
  for (const Column& c : columns) out += std::string("  ") + c.name + " " + sql_type_name(c.type) + " NOT NULL,\n";
  std::vector<std::string> keys(key.begin(), key.end());
  return out + "  PRIMARY KEY (" + join(keys, ", ") + ")\n)";
}

std::string TableCodec::column_list() const {
  std::string out;
  for (const Column& c : columns) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

std::string TableCodec::insert_sql(const char* verb, const char* name) const {
  std::string values;
  for (size_t i = 1; i <= columns.size(); ++i) values += (i == 1 ? "?" : ",?") + std::to_string(i);
  return std::string(verb) + " INTO " + (name ? name : table) + "(" + column_list() + ") VALUES (" + values + ")";
}

std::string TableCodec::select_sql(const std::string& tail) const {
  return "SELECT " + column_list() + " FROM " + table + tail;
}

std::string TableCodec::where_key(size_t n) const {
  if (n == 0 || n > key.size()) n = key.size();
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += std::string(i == 0 ? " WHERE " : " AND ") + key[i] + "=?" + std::to_string(i + 1);
  return out;
}

int TableCodec::index(const char* column) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (std::strcmp(columns[i].name, column) == 0) return static_cast<int>(i);
  return -1;
}

void TableCodec::bind(Stmt& st, int first, const Row& row) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    const int p = first + static_cast<int>(i);
    switch (columns[i].type) {
      case ColumnType::kText: st.bind(p, row[i].text); break;
      case ColumnType::kBlob: st.bind_blob(p, row[i].text); break;
      case ColumnType::kInteger: st.bind(p, row[i].integer); break;
      case ColumnType::kReal: st.bind_double(p, row[i].real); break;
    }
  }
}

Row TableCodec::read(const Stmt& st, int first, std::string* problem) const {
  Row row(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    const int c = first + static_cast<int>(i);
    const ColumnType want = columns[i].type;
    const int held = st.type(c);
    bool ok = held == sqlite_type(want);
    if (!ok && typing == RowTyping::kPlanRow && want == ColumnType::kReal) ok = held == SQLITE_INTEGER;
    if (!ok && problem->empty())
      *problem = std::string("column ") + columns[i].name +
                 (typing == RowTyping::kPlanRow ? std::string(" holds ") + stored_type_name(held)
                                                : std::string(" has the wrong type"));
    switch (want) {
      case ColumnType::kText:
      case ColumnType::kBlob: row[i].text = st.text(c); break;
      case ColumnType::kInteger: row[i].integer = st.int64(c); break;
      case ColumnType::kReal: row[i].real = st.real(c); break;
    }
  }
  return row;
}

std::string TableCodec::canonical_text(const Row& row) const {
  std::string out = std::string(checksum_tag ? checksum_tag : "") + "\n";
  for (size_t i = 0; i < columns.size(); ++i) {
    const Column& c = columns[i];
    if (!c.checksum_field) continue;
    switch (c.type) {
      case ColumnType::kText:
      case ColumnType::kBlob: put_field(out, c.checksum_field, row[i].text); break;
      case ColumnType::kInteger: put_field(out, c.checksum_field, std::to_string(row[i].integer)); break;
      case ColumnType::kReal:
        put_field(out, c.checksum_field, double_bits(row[i].real, checksum_canonical_zero));
        break;
    }
  }
  return out;
}

std::string TableCodec::checksum(const Row& row) const { return stable_hash128_hex(canonical_text(row)); }

void bind_texts(Stmt& st, std::initializer_list<std::string_view> values) {
  int i = 1;
  for (std::string_view v : values) st.bind(i++, v);
}

std::string checksum_problem(const std::string& stored, const std::string& computed) {
  if (stored == computed) return std::string();
  return "checksum mismatch (stored " + stored + ", computed " + computed + ")";
}

}  // namespace kiln::store
