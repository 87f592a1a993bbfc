// PlanStore's re-tune queue (docs/store.md "The re-tune queue"): one row per (structure, shape, environment)
// that asked for a tuned plan it could not get, with why, how often and the graph's spec.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/core/log.h"
#include "store/sql_plan_store.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_table.h"
#include "store/sql.h"

namespace kiln {

using store::Stmt;
using store::Txn;

namespace {

const store::TableCodec& queue_table() {
  static const store::TableCodec t{
      "retune_queue",
      {store::text("structure_sig"), store::text("shape_key"), store::text("fingerprint_key"),
       store::text("fingerprint_json"), store::text("graph_name"), store::text("spec_json"), store::text("reasons"),
       store::integer("request_count"), store::integer("first_seen"), store::integer("last_seen"),
       store::text("requested_by")},
      {"structure_sig", "shape_key", "fingerprint_key"},
      nullptr};
  return t;
}

std::string clip_reason(std::string r) {
  if (r.empty()) r = "requested";
  if (r.size() > kRetuneReasonMaxChars) r = r.substr(0, kRetuneReasonMaxChars - 3) + "...";
  return r;
}

std::string reasons_to_json(const std::vector<std::string>& reasons) {
  return nlohmann::json(reasons).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

store::Row encode(const RetuneQueueEntry& e) {
  return store::row_of(e.structure_sig, e.shape_key, e.fingerprint_key, fingerprint_to_json(e.fingerprint),
                       e.graph_name, e.spec_json, reasons_to_json(e.reasons), e.request_count, e.first_seen,
                       e.last_seen, e.requested_by);
}

// A queue row is listed whatever it holds: unreadable columns are named in entry.problem; returns "".
std::string decode(const store::Row& row, RetuneQueueEntry* e) {
  std::string fingerprint, reasons_json;
  store::RowCursor(row) >> e->structure_sig >> e->shape_key >> e->fingerprint_key >> fingerprint >> e->graph_name >>
      e->spec_json >> reasons_json >> e->request_count >> e->first_seen >> e->last_seen >> e->requested_by;
  std::vector<std::string> problems;
  StatusOr<EnvFingerprint> fp = fingerprint_from_json(fingerprint);
  if (fp.is_ok()) e->fingerprint = *fp;
  else problems.push_back("fingerprint: " + fp.status().message());
  nlohmann::json reasons = nlohmann::json::parse(reasons_json, nullptr, /*allow_exceptions=*/false);
  if (reasons.is_array()) {
    for (const auto& r : reasons)
      if (r.is_string()) e->reasons.push_back(r.get<std::string>());
  } else {
    problems.push_back("reasons are not a JSON array");
  }
  for (const auto& p : problems) e->problem += (e->problem.empty() ? "" : "; ") + p;
  return std::string();
}

// Reads one queue row, whatever the types its columns hold.
RetuneQueueEntry read_entry(const store::Stmt& st) {
  std::string types;  // not checked: SQLite converts, and decode names what does not read back
  RetuneQueueEntry e;
  decode(queue_table().read(st, 0, &types), &e);
  return e;
}

}  // namespace

const store::RecordCodec<RetuneQueueEntry>& store::retune_queue_codec() {
  return make_codec(queue_table(), encode, decode);
}

StatusOr<RetuneQueueEntry> SqlPlanStore::enqueue_retune(const RetuneRequest& request) {
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
    KILN_ASSIGN_OR_RETURN(Stmt find, Stmt::prepare(db_, queue_table().select_sql(queue_table().where_key())));
    store::bind_texts(find, {request.structure_sig, request.shape_key, fpkey});
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
  const int64_t add = std::max<int64_t>(1, request.count);  // saturating: a count never wraps negative
  e.request_count = e.request_count > std::numeric_limits<int64_t>::max() - add ? std::numeric_limits<int64_t>::max()
                                                                                : e.request_count + add;
  e.first_seen = std::min(e.first_seen, now);
  e.last_seen = std::max(e.last_seen, now);
  e.requested_by = store::user_at_host();
  if (std::find(e.reasons.begin(), e.reasons.end(), reason) == e.reasons.end()) e.reasons.push_back(reason);
  if (e.reasons.size() > kRetuneReasonsKept)
    e.reasons.erase(e.reasons.begin(), e.reasons.end() - static_cast<std::ptrdiff_t>(kRetuneReasonsKept));

  KILN_RETURN_IF_ERROR(store::insert_row(db_, queue_table(), encode(e)));
  if (request.revive) KILN_RETURN_IF_ERROR(delete_dead_lease(request.structure_sig, request.shape_key, fpkey));
  KILN_RETURN_IF_ERROR(txn.commit());
  KILN_LOG(kInfo, "plan store " << path_ << ": re-tune of " << name << " ('" << e.graph_name << "') queued ("
                                << e.request_count << (e.request_count == 1 ? " request" : " requests")
                                << "): " << reason);
  return e;
}

StatusOr<std::vector<RetuneQueueEntry>> SqlPlanStore::list_retune_queue(const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RetuneQueueEntry> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "retune_queue"));
  if (!exists) return out;  // a read-only store from before the queue existed
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, queue_table().select_sql(
                                                        " WHERE (?1 = '' OR fingerprint_key = ?1) ORDER BY first_seen, "
                                                        "structure_sig, shape_key, fingerprint_key")));
  st.bind(1, fingerprint_key);
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back(read_entry(st));
  }
  return out;
}

Status SqlPlanStore::delete_dead_lease(const std::string& structure_sig, const std::string& shape_key,
                                       const std::string& fingerprint_key) {
  KILN_ASSIGN_OR_RETURN(bool leases, store::table_exists(db_, "retune_leases"));
  if (!leases) return Status::ok();
  KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, "DELETE FROM retune_leases WHERE structure_sig = ?1 AND "
                                                     "shape_key = ?2 AND fingerprint_key = ?3 AND state = 'dead'"));
  store::bind_texts(del, {structure_sig, shape_key, fingerprint_key});
  return del.run();
}

StatusOr<bool> SqlPlanStore::remove_from_retune_queue(const std::string& structure_sig, const std::string& shape_key,
                                                      const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  // A dead-lettered row's lease goes with it: the key queued again later is a new job, not one still dead. A live
  // claim's lease stays (a worker removes the row when it stores the plan, then ends its claim).
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(int64_t n,
                        store::delete_by_key_in_txn(db_, queue_table(), {structure_sig, shape_key, fingerprint_key}));
  KILN_RETURN_IF_ERROR(delete_dead_lease(structure_sig, shape_key, fingerprint_key));
  KILN_RETURN_IF_ERROR(txn.commit());
  return n > 0;
}

}  // namespace kiln
