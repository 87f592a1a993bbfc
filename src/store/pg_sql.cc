#include "store/pg_sql.h"

#include <cctype>
#include <vector>

namespace kiln::store {

namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The text with ?N made $N, quoted text ('...') and names ("...") left as they are.
std::string dollar_params(std::string_view sql) {
  std::string out;
  out.reserve(sql.size());
  char quote = 0;
  for (char c : sql) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '?') {
      c = '$';
    }
    out += c;
  }
  return out;
}

// Replaces the whole word `from` (case-sensitive, outside quotes) by `to`, in s[begin, end).
void replace_word(std::string& s, size_t begin, size_t& end, std::string_view from, std::string_view to) {
  char quote = 0;
  for (size_t i = begin; i < end; ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      continue;
    }
    if (s.compare(i, from.size(), from) != 0) continue;
    if (i > 0 && word_char(s[i - 1])) continue;
    if (i + from.size() < s.size() && word_char(s[i + from.size()])) continue;
    s.replace(i, from.size(), to);
    end = end + to.size() - from.size();
    i += to.size() - 1;
  }
}

// The end of the parenthesized list that opens at s[open] (the index of its ')'), or npos.
size_t closing(const std::string& s, size_t open) {
  int depth = 0;
  char quote = 0;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')' && --depth == 0) {
      return i;
    }
  }
  return std::string::npos;
}

void translate_creates(std::string& s) {
  static constexpr std::string_view kCreate = "CREATE TABLE IF NOT EXISTS ";
  for (size_t at = s.find(kCreate); at != std::string::npos; at = s.find(kCreate, at + 1)) {
    const size_t open = s.find('(', at);
    if (open == std::string::npos) return;
    size_t end = closing(s, open);
    if (end == std::string::npos) return;
    s.insert(open + 1, "rowid BIGSERIAL, ");
    end += 17;
    replace_word(s, open, end, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY");
    replace_word(s, open, end, "INTEGER", "BIGINT");
    replace_word(s, open, end, "REAL", "DOUBLE PRECISION");
    replace_word(s, open, end, "BLOB", "BYTEA");
    replace_word(s, open, end, "TEXT", "TEXT COLLATE \"C\"");
  }
}

// INSERT OR REPLACE / INSERT OR IGNORE at the start of a statement.
void translate_insert(std::string& s) {
  static constexpr std::string_view kReplace = "INSERT OR REPLACE INTO ";
  static constexpr std::string_view kIgnore = "INSERT OR IGNORE INTO ";
  const bool replace = s.compare(0, kReplace.size(), kReplace) == 0;
  const bool ignore = s.compare(0, kIgnore.size(), kIgnore) == 0;
  if (!replace && !ignore) return;
  const size_t name_at = replace ? kReplace.size() : kIgnore.size();
  s.replace(0, name_at, "INSERT INTO ");
  if (ignore) {
    s += " ON CONFLICT DO NOTHING";
    return;
  }
  const size_t open = s.find('(', 12);
  const size_t close = open == std::string::npos ? open : closing(s, open);
  if (close == std::string::npos) return;  // not a column list: left for the server to refuse
  const std::string table = s.substr(12, open - 12);
  std::vector<std::string> cols;
  std::string col;
  for (size_t i = open + 1; i <= close; ++i) {
    const char c = s[i];
    if (c == ',' || c == ')') {
      if (!col.empty()) cols.push_back(col);
      col.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      col += c;
    }
  }
  std::string set;
  for (const std::string& c : cols) set += (set.empty() ? "" : ", ") + c + " = EXCLUDED." + c;
  s += " ON CONFLICT ON CONSTRAINT " + table + "_pkey DO UPDATE SET " + set;
}

}  // namespace

std::string postgres_sql(std::string_view sqlite_sql) {
  std::string s = dollar_params(sqlite_sql);
  translate_creates(s);
  translate_insert(s);
  return s;
}

}  // namespace kiln::store
