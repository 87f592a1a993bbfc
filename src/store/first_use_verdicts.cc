// PlanStore's first-use verdicts (kiln/store/first_use_record.h, docs/store.md "First-use verdicts"): whether a
// plan configuration passed the numerics gate on its first use, per key and environment.
#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/core/printable.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::put_field;
using store::Stmt;
using store::Txn;

namespace {

constexpr const char* kColumns =
    "structure_sig, shape_key, config, fingerprint_key, passed, summary, created_at, checksum";

std::string verdict_name(const std::string& sig, const std::string& shape, const std::string& config,
                         const std::string& fp) {
  return store::record_name(sig, shape, fp) + " " + printable(config);
}

void bind_verdict(Stmt& st, const FirstUseRecord& r) {
  st.bind(1, r.structure_sig)
      .bind(2, r.shape_key)
      .bind(3, r.config)
      .bind(4, r.fingerprint_key)
      .bind(5, static_cast<int64_t>(r.passed ? 1 : 0))
      .bind(6, r.summary)
      .bind(7, r.created_at)
      .bind(8, r.checksum);
}

// Reads kColumns from column 0; "" when sound, else the problem.
std::string read_verdict(const Stmt& st, FirstUseRecord* r) {
  const char* names[] = {"structure_sig", "shape_key", "config",     "fingerprint_key",
                         "passed",        "summary",   "created_at", "checksum"};
  for (int c = 0; c < 8; ++c) {
    const int want = c == 4 || c == 6 ? SQLITE_INTEGER : SQLITE_TEXT;
    if (st.type(c) != want) return std::string("column ") + names[c] + " has the wrong type";
  }
  r->structure_sig = st.text(0);
  r->shape_key = st.text(1);
  r->config = st.text(2);
  r->fingerprint_key = st.text(3);
  const int64_t passed = st.int64(4);
  if (passed != 0 && passed != 1) return "column passed is " + std::to_string(passed) + ", not 0 or 1";
  r->passed = passed == 1;
  r->summary = st.text(5);
  r->created_at = st.int64(6);
  r->checksum = st.text(7);
  const std::string sum = compute_first_use_checksum(*r);
  if (sum != r->checksum) return "checksum mismatch (stored " + r->checksum + ", computed " + sum + ")";
  return std::string();
}

}  // namespace

std::string compute_first_use_checksum(const FirstUseRecord& r) {
  std::string canon = "kiln-first-use-verdict/v1\n";
  put_field(canon, "structure_sig", r.structure_sig);
  put_field(canon, "shape_key", r.shape_key);
  put_field(canon, "config", r.config);
  put_field(canon, "fingerprint_key", r.fingerprint_key);
  put_field(canon, "passed", r.passed ? "1" : "0");
  put_field(canon, "summary", r.summary);
  put_field(canon, "created_at", std::to_string(r.created_at));
  return stable_hash128_hex(canon);
}

namespace store {

std::string first_use_verdicts_table_sql() {
  return "CREATE TABLE IF NOT EXISTS first_use_verdicts(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  shape_key TEXT NOT NULL,\n"
         "  config TEXT NOT NULL,\n"
         "  fingerprint_key TEXT NOT NULL,\n"
         "  passed INTEGER NOT NULL,\n"
         "  summary TEXT NOT NULL,\n"
         "  created_at INTEGER NOT NULL,\n"
         "  checksum TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, shape_key, config, fingerprint_key)\n"
         ")";
}

}  // namespace store

StatusOr<FirstUseRecord> PlanStore::put_first_use_verdict(const FirstUseRecord& record) {
  if (record.structure_sig.empty()) return invalid_argument("first-use verdict: empty structure signature");
  if (record.config.empty()) return invalid_argument("first-use verdict: empty configuration");
  if (record.fingerprint_key.empty()) return invalid_argument("first-use verdict: empty fingerprint key");
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  FirstUseRecord r = record;
  if (r.created_at == 0) r.created_at = store::unix_now();
  r.checksum = compute_first_use_checksum(r);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  {
    // A sound failed verdict stays: the configuration is not served again in this environment.
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + kColumns +
                                                          " FROM first_use_verdicts WHERE structure_sig=?1 AND "
                                                          "shape_key=?2 AND config=?3 AND fingerprint_key=?4"));
    st.bind(1, r.structure_sig).bind(2, r.shape_key).bind(3, r.config).bind(4, r.fingerprint_key);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    FirstUseRecord old;
    if (row && read_verdict(st, &old).empty() && !old.passed) return old;  // the transaction rolls back
  }
  KILN_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO first_use_verdicts(") +
                                                         kColumns + ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8)"));
  bind_verdict(ins, r);
  KILN_RETURN_IF_ERROR(ins.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::optional<FirstUseRecord>> PlanStore::get_first_use_verdict(const std::string& structure_sig,
                                                                         const std::string& shape_key,
                                                                         const std::string& config,
                                                                         const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "first_use_verdicts"));
  if (!exists) return std::optional<FirstUseRecord>();
  FirstUseRecord r;
  std::string problem;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + kColumns +
                                                          " FROM first_use_verdicts WHERE structure_sig=?1 AND "
                                                          "shape_key=?2 AND config=?3 AND fingerprint_key=?4"));
    st.bind(1, structure_sig).bind(2, shape_key).bind(3, config).bind(4, fingerprint_key);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<FirstUseRecord>();
    problem = read_verdict(st, &r);
  }
  if (problem.empty()) return std::optional<FirstUseRecord>(std::move(r));
  // A verdict is made again by checking the plan again: a damaged one is dropped, never trusted.
  ++counters_.corrupt;
  const std::string name = verdict_name(structure_sig, shape_key, config, fingerprint_key);
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt first-use verdict " << name << " (" << problem
                                  << "); read-only, left in place");
    return std::optional<FirstUseRecord>();
  }
  KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt first-use verdict " << name << ": " << problem);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, "DELETE FROM first_use_verdicts WHERE structure_sig=?1 AND "
                                                     "shape_key=?2 AND config=?3 AND fingerprint_key=?4"));
  del.bind(1, structure_sig).bind(2, shape_key).bind(3, config).bind(4, fingerprint_key);
  KILN_RETURN_IF_ERROR(del.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return std::optional<FirstUseRecord>();
}

StatusOr<std::vector<FirstUseRecord>> PlanStore::list_first_use_verdicts() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FirstUseRecord> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "first_use_verdicts"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + kColumns +
                                                        " FROM first_use_verdicts ORDER BY structure_sig, shape_key, "
                                                        "config, fingerprint_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    FirstUseRecord r;
    const std::string problem = read_verdict(st, &r);
    if (!problem.empty()) {
      KILN_LOG(kWarn, "plan store " << path_ << ": skipped corrupt first-use verdict: " << problem);
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
