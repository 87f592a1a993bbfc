#include "store/pg_conn.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <cctype>
#include <regex>
#include <vector>

#include "kiln/core/hash.h"
#include "store/pg_sql.h"

namespace kiln::store {

namespace {

// The scheme of a URI location, matched whatever its case, after leading blanks.
const std::regex& uri_scheme() {
  static const std::regex kScheme(R"(^\s*(postgres(ql)?)://)", std::regex::icase);
  return kScheme;
}

}  // namespace

bool is_postgres_location(const std::string& location) {
  if (std::regex_search(location, uri_scheme())) return true;
  // A libpq key=value string starting with any of libpq's connection keywords (a file path rarely does).
  static const std::regex kKeyValue(
      R"(^\s*(host|hostaddr|port|dbname|user|password|passfile|options|application_name|fallback_application_name|)"
      R"(connect_timeout|client_encoding|service|sslmode|sslcert|sslkey|sslrootcert|sslcrl|sslpassword|requiressl|)"
      R"(gssencmode|krbsrvname|target_session_attrs|channel_binding|require_auth|load_balance_hosts|keepalives\w*|)"
      R"(tcp_user_timeout)\s*=)",
      std::regex::icase);
  return std::regex_search(location, kKeyValue);
}

std::string redact_location(const std::string& location) {
  // The URI's password runs to the last '@' (an unencoded '/' or '@' in it stays hidden); a key=value password
  // to the next unescaped blank ("Se\ CrEt" is one value to libpq).
  static const std::regex kUriPassword(R"(^(\s*postgres(ql)?://[^:/@?]*):.*@)", std::regex::icase);
  // A quote never closed runs to the end (libpq refuses the string; its text must not show).
  static const std::regex kPair(R"((password\s*=\s*)('([^'\\]|\\.)*'|'.*$|(\\.|[^\s\\])+))", std::regex::icase);
  std::string out = std::regex_replace(location, kUriPassword, "$1:***@");
  return std::regex_replace(out, kPair, "$1***");
}

namespace {

// How long a connection attempt and a lock wait may take (seconds) before the call fails Unavailable.
constexpr int kConnectTimeoutS = 10;
constexpr int kLockTimeoutS = 10;

// The location with libpq's connect_timeout (kConnectTimeoutS) unless it or $PGCONNECT_TIMEOUT sets one: a
// server that accepts the connection and never answers must not hang a command.
// Leading blanks go and a URI's scheme is lowercased (libpq knows only "postgresql://" and "postgres://").
std::string with_connect_timeout(const std::string& location) {
  std::string conninfo = location.substr(std::min(location.size(), location.find_first_not_of(" \t\n")));
  std::smatch m;
  const bool uri = std::regex_search(conninfo, m, uri_scheme());
  if (uri) conninfo = (m[2].matched ? "postgresql://" : "postgres://") + conninfo.substr(m[0].length());
  if (conninfo.find("connect_timeout") != std::string::npos || std::getenv("PGCONNECT_TIMEOUT")) return conninfo;
  const std::string t = "connect_timeout=" + std::to_string(kConnectTimeoutS);
  if (uri) return conninfo + (conninfo.find('?') == std::string::npos ? "?" : "&") + t;
  return conninfo + " " + t;
}

// A URI whose user:password part holds an unencoded '/' or '@': libpq would split it elsewhere than meant, and
// its error message would quote a piece of the password (as a port or a host name). Refused before libpq sees it.
Status check_uri_userinfo(const std::string& location, const std::string& display) {
  std::smatch m;
  if (!std::regex_search(location, m, uri_scheme())) return Status::ok();
  const std::string rest = location.substr(m[0].length());
  const std::string head = rest.substr(0, rest.find('?'));  // a query parameter may hold '@' of its own
  const size_t at = head.rfind('@');
  if (at == std::string::npos) return Status::ok();
  const std::string userinfo = head.substr(0, at);
  if (userinfo.find('/') == std::string::npos && userinfo.find('@') == std::string::npos) return Status::ok();
  return invalid_argument("PostgreSQL store " + display +
                          ": the URI's user:password part holds an unencoded '/' or '@'; percent-encode them (%2F, "
                          "%40) or use the key=value form (password='...')");
}

// What libpq would refuse in a URI's host list, checked without it (so that a malformed location is bad input on a
// machine without libpq too, not "libpq missing"): each host:port has a port of digits, and a bracketed IPv6 host
// closes its bracket. Names nothing of the password.
Status check_uri_hosts(const std::string& location, const std::string& display) {
  std::smatch m;
  if (!std::regex_search(location, m, uri_scheme())) return Status::ok();
  std::string rest = location.substr(m[0].length());
  rest = rest.substr(0, rest.find_first_of("?"));
  const size_t at = rest.rfind('@');
  std::string hosts = at == std::string::npos ? rest : rest.substr(at + 1);
  hosts = hosts.substr(0, hosts.find('/'));
  auto bad = [&](const std::string& why) {
    return invalid_argument("PostgreSQL store " + display + " is not a location libpq can read: " + why);
  };
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t end = hosts.find(',', start);
    if (end == std::string::npos) end = hosts.size();
    std::string h = hosts.substr(start, end - start);
    std::string port;
    if (!h.empty() && h[0] == '[') {
      const size_t close = h.find(']');
      if (close == std::string::npos) return bad("a bracketed IPv6 host is not closed");
      if (close + 1 < h.size()) {
        if (h[close + 1] != ':') return bad("unexpected text after a bracketed IPv6 host");
        port = h.substr(close + 2);
      }
    } else if (const size_t colon = h.find(':'); colon != std::string::npos) {
      port = h.substr(colon + 1);
    }
    if (!port.empty() && port.find_first_not_of("0123456789") != std::string::npos)
      return bad("a port is not a number");
    start = end + 1;
  }
  return Status::ok();
}

// The secrets a location holds: a URI's password (as written and percent-decoded) and every password= or
// sslpassword= value (quoted or not). Best effort on a string libpq cannot parse.
std::vector<std::string> secrets_of(const std::string& location) {
  std::vector<std::string> out;
  std::smatch m;
  if (std::regex_search(location, m, uri_scheme())) {
    const std::string rest = location.substr(m[0].length());
    const size_t at = rest.rfind('@');
    const size_t colon = at == std::string::npos ? at : rest.find(':');
    if (colon != std::string::npos && colon < at) {
      const std::string raw = rest.substr(colon + 1, at - colon - 1);
      out.push_back(raw);
      std::string decoded;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
          decoded += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          decoded += raw[i];
        }
      }
      out.push_back(decoded);
    }
  }
  static const std::regex kPair(R"(password\s*=\s*('(([^'\\]|\\.)*)'|'(.*)$|((\\.|[^\s\\'])+)))", std::regex::icase);
  for (auto it = std::sregex_iterator(location.begin(), location.end(), kPair); it != std::sregex_iterator(); ++it) {
    const std::smatch& p = *it;
    out.push_back(p[2].matched ? p[2].str() : p[4].matched ? p[4].str() : p[5].str());
    out.push_back(p[1].str());
  }
  return out;
}

// libpq's text about `location` with every secret of it replaced by ***, and the location itself by `display`.
std::string scrubbed(std::string message, const std::string& location, const std::string& display) {
  auto replace_all = [&message](const std::string& what, const std::string& with) {
    if (what.empty()) return;
    for (size_t p = message.find(what); p != std::string::npos; p = message.find(what, p + with.size()))
      message.replace(p, what.size(), with);
  };
  replace_all(with_connect_timeout(location), display);
  replace_all(location, display);
  std::vector<std::string> secrets = secrets_of(location);
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& s : secrets) replace_all(s, "***");
  return message;
}

// SQLSTATE -> Status: a lost or refused connection, a server shutting down, a conflict to retry and too
// little of a resource are Unavailable; a refused write (privileges, a read-only transaction) is
// FailedPrecondition; data the server finds damaged is Corruption; the rest Internal.
Status status_of(const std::string& sqlstate, const std::string& msg) {
  const std::string cls = sqlstate.substr(0, 2);
  if (cls == "08" || cls == "53" || cls == "57" || sqlstate == "40001" || sqlstate == "40P01") return unavailable(msg);
  // A role that may not write (or read) the store: bad input naming it (exit 2), as SQLite's unwritable file.
  if (sqlstate == "42501") return invalid_argument(msg + " (this database role lacks the privilege)");
  if (sqlstate == "25006") return failed_precondition(msg);
  // lock_timeout (session_settings): another writer held the store's lock that long, as SQLite's busy timeout.
  if (sqlstate == "55P03")
    return unavailable(msg + " (the store's lock stayed taken for " + std::to_string(kLockTimeoutS) + " s)");
  if (cls == "XX" && (sqlstate == "XX001" || sqlstate == "XX002")) return corruption(msg);
  if (cls == "22" || cls == "23") return invalid_argument(msg);
  return internal_error(msg);
}

// libpq's message as one line: its own line breaks (a hint on a second, tab-indented line) become "; ".
std::string trimmed(const char* s) {
  std::string out;
  bool pending_break = false;
  for (const char* p = s ? s : ""; *p; ++p) {
    if (*p == '\n' || *p == '\r') {
      pending_break = true;
    } else if (pending_break && (*p == '\t' || *p == ' ')) {
      continue;  // the next line's indent
    } else {
      if (pending_break && !out.empty()) out += "; ";
      pending_break = false;
      out += *p;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string double_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// bytea's text output ("\x0a1b..."), as bytes.
std::string bytea_bytes(const char* s, int n) {
  if (n < 2 || s[0] != '\\' || s[1] != 'x') return std::string(s, static_cast<size_t>(n));
  std::string out;
  out.reserve(static_cast<size_t>(n - 2) / 2);
  for (int i = 2; i + 1 < n; i += 2) out += static_cast<char>(hex_value(s[i]) * 16 + hex_value(s[i + 1]));
  return out;
}

void ignore_notice(void*, const char*) {}

// A statement of a PgConn: its parameters collected by the binders, run at the first step.
class PgStmt final : public StmtImpl {
 public:
  PgStmt(PgConn* conn, std::string sql) : conn_(conn), sql_(std::move(sql)) {}
  ~PgStmt() override { clear(); }

  void bind_text(int i, std::string_view text) override { set(i, kText, std::string(text), 0); }
  void bind_blob(int i, std::string_view bytes) override { set(i, pq::kByteaOid, std::string(bytes), 1); }
  void bind_int64(int i, int64_t v) override { set(i, pq::kInt8Oid, std::to_string(v), 0); }
  void bind_double(int i, double v) override { set(i, pq::kFloat8Oid, double_text(v), 0); }

  StatusOr<bool> step() override {
    if (!res_) {
      KILN_ASSIGN_OR_RETURN(res_, conn_->run(sql_, types_, values_, formats_, nulls_));
      rows_ = conn_->api().ntuples(res_);
      row_ = -1;
    }
    return ++row_ < rows_;
  }
  void reset() override {
    clear();
    types_.clear();
    values_.clear();
    formats_.clear();
    nulls_.clear();
  }
  int type(int col) const override {
    const pq::Api& a = conn_->api();
    if (a.getisnull(res_, row_, col)) return SQLITE_NULL;
    switch (a.ftype(res_, col)) {
      case pq::kInt8Oid:
      case pq::kInt4Oid:
      case pq::kInt2Oid:
      case pq::kOidOid: return SQLITE_INTEGER;
      case pq::kFloat8Oid:
      case pq::kFloat4Oid:
      case pq::kNumericOid: return SQLITE_FLOAT;
      case pq::kByteaOid: return SQLITE_BLOB;
      default: return SQLITE_TEXT;
    }
  }
  int64_t int64(int col) const override { return std::strtoll(value(col), nullptr, 10); }
  double real(int col) const override { return std::strtod(value(col), nullptr); }
  std::string text(int col) const override {
    const pq::Api& a = conn_->api();
    if (a.getisnull(res_, row_, col)) return std::string();
    const char* v = a.getvalue(res_, row_, col);
    const int n = a.getlength(res_, row_, col);
    if (a.ftype(res_, col) == pq::kByteaOid) return bytea_bytes(v, n);
    return std::string(v, static_cast<size_t>(n));
  }

 private:
  // Text parameters are typed text: a parameter a statement leaves unused (SQLite allows it) needs a type.
  static constexpr unsigned kText = pq::kTextOid;
  void set(int i, unsigned type, std::string value, int format) {
    const size_t k = static_cast<size_t>(i - 1);
    if (values_.size() <= k) {
      types_.resize(k + 1, kText);  // a gap (a parameter only another statement of the text uses): text NULL
      values_.resize(k + 1);
      formats_.resize(k + 1, 0);
      nulls_.resize(k + 1, true);
    }
    types_[k] = type;
    values_[k] = std::move(value);
    formats_[k] = format;
    nulls_[k] = false;
  }
  const char* value(int col) const { return conn_->api().getvalue(res_, row_, col); }
  void clear() {
    if (res_) conn_->api().clear(res_);
    res_ = nullptr;
  }

  PgConn* conn_;
  std::string sql_;
  std::vector<unsigned> types_;
  std::vector<std::string> values_;
  std::vector<int> formats_;
  std::vector<bool> nulls_;
  pq::PGresult* res_ = nullptr;
  int rows_ = 0, row_ = -1;
};

}  // namespace

StatusOr<std::unique_ptr<PgConn>> PgConn::connect(const std::string& conninfo, const std::string& display,
                                                  bool read_only) {
  KILN_RETURN_IF_ERROR(check_uri_userinfo(conninfo, display));
  KILN_RETURN_IF_ERROR(check_uri_hosts(conninfo, display));
  KILN_ASSIGN_OR_RETURN(const pq::Api* api, pq::api());
  const std::string full = with_connect_timeout(conninfo);
  // A string libpq cannot read is bad input (exit 2), said before any connection; libpq's words may quote the
  // string or a piece of its password: they are scrubbed.
  char* parse_error = nullptr;
  if (pq::PQconninfoOption* opts = api->conninfo_parse(full.c_str(), &parse_error)) {
    api->conninfo_free(opts);
  } else {
    const std::string why = parse_error ? trimmed(parse_error) : "not a libpq connection string";
    if (parse_error) api->freemem(parse_error);
    return invalid_argument("PostgreSQL store " + display +
                            " is not a location libpq can read: " + scrubbed(why, conninfo, display));
  }
  pq::PGconn* c = api->connectdb(full.c_str());
  if (!c) return unavailable("cannot reach PostgreSQL store " + display + ": out of memory");
  std::unique_ptr<PgConn> conn(new PgConn(api, c, display, read_only));
  if (api->status(c) != pq::kConnectionOk) {
    const std::string why = scrubbed(trimmed(api->error_message(c)), conninfo, display);
    // libpq checks option values (a port that is not a number, an unknown sslmode) only when it connects; its
    // words for them ("invalid integer value ... for connection option", "invalid port number", "invalid sslmode
    // value") say the location is wrong, not the server away: bad input (exit 2), as an unparsable location.
    static const std::regex kBadValue(R"(^invalid (integer value|port number|\S+ value))");
    if (std::regex_search(why, kBadValue))
      return invalid_argument("PostgreSQL store " + display + " is not a location libpq can use: " + why);
    return unavailable("cannot reach PostgreSQL store " + display + ": " + why);
  }
  api->set_notice_processor(c, ignore_notice, nullptr);
  KILN_RETURN_IF_ERROR(conn->session_settings());
  return conn;
}

PgConn::~PgConn() {
  if (conn_) api_->finish(conn_);
}

Status PgConn::session_settings() {
  // extra_float_digits=3: every double read back is the one written (servers before 12 round by default).
  // lock_timeout: a write waits for another writer's lock (pg_advisory_xact_lock) at most that long, as a SQLite
  // store's busy timeout; then Unavailable (55P03), never a hang.
  std::string sql = "SET extra_float_digits = 3; SET client_encoding = 'UTF8'; SET client_min_messages = warning; "
                    "SET lock_timeout = '" +
                    std::to_string(kLockTimeoutS) + "s'";
  if (read_only_) sql += "; SET default_transaction_read_only = on";
  for (const std::string& c : channels_) sql += "; LISTEN " + c;
  return simple(sql.c_str());
}

Status PgConn::ensure_connected() {
  if (api_->status(conn_) == pq::kConnectionOk) return Status::ok();
  if (in_txn_) return unavailable("PostgreSQL store " + display_ + ": the connection was lost in a transaction");
  api_->reset(conn_);
  prepared_.clear();                     // the server's prepared statements went with the old session
  missed_notices_ = !channels_.empty();  // and so did what was sent while no session listened
  if (api_->status(conn_) != pq::kConnectionOk)
    return unavailable("cannot reach PostgreSQL store " + display_ + ": " + trimmed(api_->error_message(conn_)));
  return session_settings();
}

Status PgConn::result_error(pq::PGresult* res, const std::string& what) {
  std::string msg = res ? trimmed(api_->result_error_message(res)) : trimmed(api_->error_message(conn_));
  const char* state = res ? api_->result_error_field(res, pq::kDiagSqlstate) : nullptr;
  std::string sqlstate = state ? state : "";
  if (res) api_->clear(res);
  // No SQLSTATE and a connection gone: the server went away under the call.
  if (sqlstate.empty() && api_->status(conn_) != pq::kConnectionOk) sqlstate = "08006";
  // A write refused by a server this connection did not ask to be read-only (a hot standby, a role's
  // default_transaction_read_only): the location is wrong for a command that writes, not a stale plan.
  if (sqlstate == "25006" && !read_only_)
    return invalid_argument("PostgreSQL store " + display_ + ": " + what + ": " + msg +
                            " (this server or role accepts no writes: a command that writes needs a writable primary)");
  return status_of(sqlstate, "PostgreSQL store " + display_ + ": " + what + ": " + msg);
}

Status PgConn::simple(const char* sql) {
  pq::PGresult* res = api_->exec(conn_, sql);
  const int st = res ? api_->result_status(res) : -1;
  if (st != pq::kCommandOk && st != pq::kTuplesOk)
    return result_error(res, "SQL '" + std::string(sql).substr(0, 80) + "'");
  char* n = api_->cmd_tuples(res);
  changes_ = n && *n ? std::strtoll(n, nullptr, 10) : 0;
  api_->clear(res);
  return Status::ok();
}

Status PgConn::exec(const char* sql) {
  KILN_RETURN_IF_ERROR(ensure_connected());
  return simple(postgres_sql(sql).c_str());
}

StatusOr<std::unique_ptr<StmtImpl>> PgConn::prepare(std::string_view sql) {
  KILN_RETURN_IF_ERROR(ensure_connected());
  return std::unique_ptr<StmtImpl>(new PgStmt(this, postgres_sql(sql)));
}

StatusOr<pq::PGresult*> PgConn::run(const std::string& sql, const std::vector<unsigned>& types,
                                    const std::vector<std::string>& values, const std::vector<int>& formats,
                                    const std::vector<bool>& nulls) {
  KILN_RETURN_IF_ERROR(ensure_connected());
  std::string key = sql;
  for (unsigned t : types) key += "|" + std::to_string(t);
  auto it = prepared_.find(key);
  const int n = static_cast<int>(values.size());
  if (it == prepared_.end()) {
    std::string name = "kiln_" + std::to_string(prepared_.size());
    pq::PGresult* res = api_->prepare(conn_, name.c_str(), sql.c_str(), n, types.empty() ? nullptr : types.data());
    if (!res || api_->result_status(res) != pq::kCommandOk)
      return result_error(res, "preparing '" + sql.substr(0, 80) + "'");
    api_->clear(res);
    it = prepared_.emplace(key, name).first;
  }
  std::vector<const char*> ptrs(values.size());
  std::vector<int> lengths(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ptrs[i] = nulls[i] ? nullptr : values[i].data();
    lengths[i] = static_cast<int>(values[i].size());
  }
  pq::PGresult* res = api_->exec_prepared(conn_, it->second.c_str(), n, ptrs.data(), lengths.data(),
                                          formats.empty() ? nullptr : formats.data(), 0);
  const int st = res ? api_->result_status(res) : -1;
  if (st != pq::kCommandOk && st != pq::kTuplesOk) return result_error(res, "executing '" + sql.substr(0, 80) + "'");
  char* rows = api_->cmd_tuples(res);
  changes_ = rows && *rows ? std::strtoll(rows, nullptr, 10) : 0;
  return res;
}

Status PgConn::begin_write() {
  KILN_RETURN_IF_ERROR(ensure_connected());
  // Writers are serialized per schema, as SQLite's BEGIN IMMEDIATE serializes them per file: the store's
  // read-modify-write steps (counting a queued key, a quarantine move) then need no retry loop.
  KILN_RETURN_IF_ERROR(
      simple("BEGIN; SELECT pg_advisory_xact_lock(hashtext('kiln:' || coalesce(current_schema(), '')))"));
  in_txn_ = true;
  return Status::ok();
}

Status PgConn::begin_read() {
  KILN_RETURN_IF_ERROR(ensure_connected());
  KILN_RETURN_IF_ERROR(simple("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
  in_txn_ = true;
  return Status::ok();
}

Status PgConn::begin_row_locks() {
  KILN_RETURN_IF_ERROR(ensure_connected());
  KILN_RETURN_IF_ERROR(simple("BEGIN"));
  in_txn_ = true;
  return Status::ok();
}

Status PgConn::commit() {
  Status s = simple("COMMIT");
  if (s.is_ok()) in_txn_ = false;
  return s;
}

void PgConn::rollback() {
  if (api_->status(conn_) == pq::kConnectionOk) (void)simple("ROLLBACK");
  in_txn_ = false;
}

Status PgConn::listen(const char* channel) {
  for (const std::string& c : channels_)
    if (c == channel) return Status::ok();
  KILN_RETURN_IF_ERROR(ensure_connected());
  KILN_RETURN_IF_ERROR(simple((std::string("LISTEN ") + channel).c_str()));
  channels_.push_back(channel);
  return Status::ok();
}

Status PgConn::notify(const char* channel, const std::string& payload) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT pg_notify(?1, ?2)"));
  st.bind(1, std::string_view(channel)).bind(2, payload);
  return st.run();
}

int PgConn::session_id() {
  return conn_ != nullptr && api_->status(conn_) == pq::kConnectionOk ? api_->backend_pid(conn_) : 0;
}

StatusOr<std::vector<std::string>> PgConn::notifications(const std::set<int>& skip) {
  std::vector<std::string> out;
  if (channels_.empty()) return out;
  // A connection lost while listening is made again at once: notices sent meanwhile are gone, so the caller
  // hears "*" (anything may have changed).
  if (api_->status(conn_) == pq::kConnectionOk && !api_->consume_input(conn_) &&
      api_->status(conn_) == pq::kConnectionOk)
    return unavailable("PostgreSQL store " + display_ +
                       ": reading notifications: " + trimmed(api_->error_message(conn_)));
  KILN_RETURN_IF_ERROR(ensure_connected());
  if (missed_notices_) {
    missed_notices_ = false;
    out.push_back("*");
  }
  const int self = api_->backend_pid(conn_);
  while (pq::PGnotify* n = api_->notifies(conn_)) {
    // This connection's own writes are known, and so are those of the sessions the caller names.
    if (n->be_pid != self && !skip.count(n->be_pid)) out.push_back(n->extra ? n->extra : "");
    api_->freemem(n);
  }
  return out;
}

StatusOr<std::string> PgConn::object_type(const std::string& name) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON "
                                                     "n.oid = c.relnamespace WHERE n.nspname = current_schema() AND "
                                                     "c.relname = lower(?1)"));
  st.bind(1, name);
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::string();
  const std::string kind = st.text(0);
  if (kind == "r" || kind == "p") return std::string("table");
  if (kind == "v" || kind == "m") return std::string("view");
  if (kind == "i" || kind == "I") return std::string("index");
  if (kind == "S") return std::string("sequence");
  return "relation of kind " + kind;
}

StatusOr<std::vector<std::string>> PgConn::table_names() {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT table_name::text FROM information_schema.tables WHERE "
                                                     "table_schema = current_schema() ORDER BY table_name"));
  std::vector<std::string> out;
  KILN_RETURN_IF_ERROR(for_each_row(st, [&] { return out.push_back(st.text(0)), Status::ok(); }));
  return out;
}

StatusOr<std::vector<std::string>> PgConn::columns_of(const std::string& table) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(this, "SELECT column_name::text FROM information_schema.columns WHERE "
                                                     "table_schema = current_schema() AND lower(table_name) = "
                                                     "lower(?1) ORDER BY ordinal_position"));
  st.bind(1, table);
  std::vector<std::string> out;
  KILN_RETURN_IF_ERROR(for_each_row(st, [&] { return out.push_back(st.text(0)), Status::ok(); }));
  return out;
}

}  // namespace kiln::store
