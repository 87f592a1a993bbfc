// PlanStore's re-tune queue (docs/store.md "The re-tune queue"): one row per (structure, shape, environment)
// that asked for a tuned plan it could not get, with why, how often and the graph's spec.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "kiln/core/log.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::Stmt;
using store::Txn;

namespace store {

std::string retune_queue_table_sql() {
  return "CREATE TABLE IF NOT EXISTS retune_queue(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  shape_key TEXT NOT NULL,\n"
         "  fingerprint_key TEXT NOT NULL,\n"
         "  fingerprint_json TEXT NOT NULL,\n"
         "  graph_name TEXT NOT NULL,\n"
         "  spec_json TEXT NOT NULL,\n"
         "  reasons TEXT NOT NULL,\n"
         "  request_count INTEGER NOT NULL,\n"
         "  first_seen INTEGER NOT NULL,\n"
         "  last_seen INTEGER NOT NULL,\n"
         "  requested_by TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)\n"
         ")";
}

StatusOr<bool> table_exists(sqlite3* db, const char* table) {
  // Case-insensitive, as SQLite's own names are (and as check_table_schema finds the table).
  KILN_ASSIGN_OR_RETURN(Stmt st,
                        Stmt::prepare(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1 COLLATE NOCASE"));
  st.bind(1, std::string_view(table));
  return st.step();
}

}  // namespace store

namespace {

constexpr const char* kQueueColumns =
    "structure_sig, shape_key, fingerprint_key, fingerprint_json, graph_name, spec_json, reasons, request_count, "
    "first_seen, last_seen, requested_by";

std::string clip_reason(std::string r) {
  if (r.empty()) r = "requested";
  if (r.size() > kRetuneReasonMaxChars) r = r.substr(0, kRetuneReasonMaxChars - 3) + "...";
  return r;
}

std::string reasons_to_json(const std::vector<std::string>& reasons) {
  return nlohmann::json(reasons).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Reads one row of kQueueColumns. Unreadable columns are named in entry.problem.
RetuneQueueEntry read_entry(const Stmt& st) {
  RetuneQueueEntry e;
  e.structure_sig = st.text(0);
  e.shape_key = st.text(1);
  e.fingerprint_key = st.text(2);
  std::vector<std::string> problems;
  StatusOr<EnvFingerprint> fp = fingerprint_from_json(st.text(3));
  if (fp.is_ok()) e.fingerprint = *fp;
  else problems.push_back("fingerprint: " + fp.status().message());
  e.graph_name = st.text(4);
  e.spec_json = st.text(5);
  nlohmann::json reasons = nlohmann::json::parse(st.text(6), nullptr, /*allow_exceptions=*/false);
  if (reasons.is_array()) {
    for (const auto& r : reasons)
      if (r.is_string()) e.reasons.push_back(r.get<std::string>());
  } else {
    problems.push_back("reasons are not a JSON array");
  }
  e.request_count = st.int64(7);
  e.first_seen = st.int64(8);
  e.last_seen = st.int64(9);
  e.requested_by = st.text(10);
  for (const auto& p : problems) e.problem += (e.problem.empty() ? "" : "; ") + p;
  return e;
}

}  // namespace

StatusOr<RetuneQueueEntry> PlanStore::enqueue_retune(const RetuneRequest& request) {
  if (request.structure_sig.empty()) return invalid_argument("re-tune request: empty structure signature");
  if (request.spec_json.empty())
    return invalid_argument("re-tune request for " + request.structure_sig.substr(0, 12) +
                            ": no graph spec (the queue keeps the graph so that it can be re-tuned without its file)");
  std::string fpkey = fingerprint_key(request.fingerprint);
  std::string name = store::record_name(request.structure_sig, request.shape_key, fpkey);
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << " is read-only: re-tune of " << name << " ('" << request.graph_name
                                  << "') not queued (" << request.reason << ")");
    return failed_precondition("plan store " + path_ + " was opened read-only: re-tune of " + name + " not queued");
  }
  int64_t now = request.requested_at > 0 ? request.requested_at : store::unix_now();
  std::string reason = clip_reason(request.reason);

  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  RetuneQueueEntry e;
  bool exists = false;
  {
    KILN_ASSIGN_OR_RETURN(Stmt find, Stmt::prepare(db_, std::string("SELECT ") + kQueueColumns +
                                                            " FROM retune_queue WHERE structure_sig=?1 AND "
                                                            "shape_key=?2 AND fingerprint_key=?3"));
    find.bind(1, request.structure_sig).bind(2, request.shape_key).bind(3, fpkey);
    KILN_ASSIGN_OR_RETURN(exists, find.step());
    if (exists) e = read_entry(find);
  }
  if (!exists) {
    e.structure_sig = request.structure_sig;
    e.shape_key = request.shape_key;
    e.fingerprint_key = fpkey;
    e.first_seen = now;
    e.request_count = 0;
  }
  e.fingerprint = request.fingerprint;
  e.graph_name = request.graph_name;
  e.spec_json = request.spec_json;
  e.problem.clear();
  ++e.request_count;
  e.first_seen = std::min(e.first_seen, now);
  e.last_seen = std::max(e.last_seen, now);
  e.requested_by = store::user_at_host();
  if (std::find(e.reasons.begin(), e.reasons.end(), reason) == e.reasons.end()) e.reasons.push_back(reason);
  if (e.reasons.size() > kRetuneReasonsKept)
    e.reasons.erase(e.reasons.begin(), e.reasons.end() - static_cast<std::ptrdiff_t>(kRetuneReasonsKept));

  KILN_ASSIGN_OR_RETURN(Stmt put,
                        Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO retune_queue(") + kQueueColumns +
                                               ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)"));
  put.bind(1, e.structure_sig)
      .bind(2, e.shape_key)
      .bind(3, e.fingerprint_key)
      .bind(4, fingerprint_to_json(e.fingerprint))
      .bind(5, e.graph_name)
      .bind(6, e.spec_json)
      .bind(7, reasons_to_json(e.reasons))
      .bind(8, e.request_count)
      .bind(9, e.first_seen)
      .bind(10, e.last_seen)
      .bind(11, e.requested_by);
  KILN_RETURN_IF_ERROR(put.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  KILN_LOG(kInfo, "plan store " << path_ << ": re-tune of " << name << " ('" << e.graph_name << "') queued ("
                                << e.request_count << (e.request_count == 1 ? " request" : " requests")
                                << "): " << reason);
  return e;
}

StatusOr<std::vector<RetuneQueueEntry>> PlanStore::list_retune_queue(const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RetuneQueueEntry> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "retune_queue"));
  if (!exists) return out;  // a read-only store from before the queue existed
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + kQueueColumns +
                                                        " FROM retune_queue WHERE (?1 = '' OR fingerprint_key = ?1)"
                                                        " ORDER BY first_seen, structure_sig, shape_key, "
                                                        "fingerprint_key"));
  st.bind(1, fingerprint_key);
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back(read_entry(st));
  }
  return out;
}

StatusOr<bool> PlanStore::remove_from_retune_queue(const std::string& structure_sig, const std::string& shape_key,
                                                   const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, "DELETE FROM retune_queue WHERE structure_sig=?1 AND "
                                                     "shape_key=?2 AND fingerprint_key=?3"));
  del.bind(1, structure_sig).bind(2, shape_key).bind(3, fingerprint_key);
  KILN_RETURN_IF_ERROR(del.run());
  bool removed = sqlite3_changes(db_) > 0;
  KILN_RETURN_IF_ERROR(txn.commit());
  return removed;
}

}  // namespace kiln
