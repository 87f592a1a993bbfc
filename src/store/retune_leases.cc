// Leases on the re-tune queue (kiln/store/retune_request.h, docs/fleet.md): the queue as a fleet's job queue.
// A lease row beside a queue row says who holds it and until when, how many attempts it had, and whether it
// waits for a retry or was dead-lettered; the log keeps every ended claim.
#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <random>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "store/sql_plan_store.h"
#include "store/sql_table.h"
#include "store/tables.h"

namespace kiln {

namespace {
// The longest lease or backoff step a caller may ask for (about 136 years): sums with a unix time never overflow.
constexpr int64_t kMaxSpanS = int64_t{1} << 32;
}  // namespace

using store::Stmt;
using store::Txn;

const store::TableCodec& store::retune_leases_table() {
  static const TableCodec t{"retune_leases",
                            {text("structure_sig"), text("shape_key"), text("fingerprint_key"), text("state"),
                             text("worker"), text("token"), integer("attempts"), integer("lease_expires_at"),
                             integer("next_attempt_at"), text("last_error"), integer("updated_at")},
                            {"structure_sig", "shape_key", "fingerprint_key"},
                            nullptr};
  return t;
}

const store::TableCodec& store::retune_log_table() {
  static const TableCodec t{
      "retune_log",
      {text("token"), text("structure_sig"), text("shape_key"), text("fingerprint_key"), text("worker"),
       text("outcome"), text("message"), integer("attempt"), integer("finished_at")},
      {"token"},
      nullptr};
  return t;
}

namespace {

struct Lease {
  std::string structure_sig, shape_key, fingerprint_key, state, worker, token;
  int64_t attempts = 0, lease_expires_at = 0, next_attempt_at = 0;
  std::string last_error;
  int64_t updated_at = 0;
};

store::Row encode(const Lease& l) {
  return store::row_of(l.structure_sig, l.shape_key, l.fingerprint_key, l.state, l.worker, l.token, l.attempts,
                       l.lease_expires_at, l.next_attempt_at, l.last_error, l.updated_at);
}

Lease decode(const store::Row& row) {
  Lease l;
  store::RowCursor(row) >> l.structure_sig >> l.shape_key >> l.fingerprint_key >> l.state >> l.worker >> l.token >>
      l.attempts >> l.lease_expires_at >> l.next_attempt_at >> l.last_error >> l.updated_at;
  return l;
}

// A claim's identity, unique across hosts and processes: a forked child (a worker pool) draws its own numbers,
// not its parent's sequence again.
std::string new_token() {
  static std::mutex mu;
  static std::mt19937_64 rng;
  static pid_t seeded_for = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (seeded_for != ::getpid()) {
    seeded_for = ::getpid();
    std::seed_seq seq{std::random_device{}(), std::random_device{}(), static_cast<unsigned>(seeded_for),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    rng.seed(seq);
  }
  return hex64(rng()) + hex64(rng());
}

int64_t or_now(int64_t t) { return t > 0 ? t : store::unix_now(); }

// The queue row's columns, prefixed "q.", for the joins below.
std::string queue_columns() {
  std::string out;
  for (const store::Column& c : store::retune_queue_codec().table.columns)
    out += (out.empty() ? "q." : ", q.") + std::string(c.name);
  return out;
}

constexpr const char* kJoinLeases =
    " FROM retune_queue q LEFT JOIN retune_leases l ON l.structure_sig = q.structure_sig AND l.shape_key = "
    "q.shape_key AND l.fingerprint_key = q.fingerprint_key";

// The lease held by `job`'s token, read in the caller's transaction; FailedPrecondition when it no longer holds.
StatusOr<Lease> held_lease(store::Conn* db, const RetuneJob& job, const std::string& store_path) {
  const store::TableCodec& t = store::retune_leases_table();
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, t.select_sql(t.where_key())));
  store::bind_texts(st, {job.entry.structure_sig, job.entry.shape_key, job.entry.fingerprint_key});
  KILN_ASSIGN_OR_RETURN(bool row, st.step());
  std::string problem;
  Lease l;
  if (row) l = decode(t.read(st, 0, &problem));
  if (!row || l.token != job.token || l.state != "claimed")
    return failed_precondition(
        "plan store " + store_path + ": lease lost on re-tune " +
        store::record_name(job.entry.structure_sig, job.entry.shape_key, job.entry.fingerprint_key) +
        " (its lease ran out and another worker took it, or it was ended)");
  return l;
}

}  // namespace

StatusOr<std::optional<RetuneJob>> SqlPlanStore::claim_retune(const std::string& fingerprint_key,
                                                              const RetuneLeaseOptions& options) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only: no job is claimed");
  const int64_t now = or_now(options.now);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin_row_locks());
  const bool pg = db_->dialect() == store::SqlDialect::kPostgres;
  // Claimable: no lease row, a claim whose lease ran out, or a retry that is due. Dead rows never are.
  const std::string claimable =
      "(l.state IS NULL OR (l.state = 'claimed' AND l.lease_expires_at < ?2) OR (l.state = 'retry' AND "
      "l.next_attempt_at <= ?2))";
  KILN_ASSIGN_OR_RETURN(Stmt find,
                        Stmt::prepare(db_, "SELECT " + queue_columns() + ", COALESCE(l.attempts, 0)" + kJoinLeases +
                                               " WHERE q.fingerprint_key = ?1 AND " + claimable +
                                               " ORDER BY q.first_seen, q.structure_sig, q.shape_key "
                                               "LIMIT 1" +
                                               (pg ? " FOR UPDATE OF q SKIP LOCKED" : "")));
  // PostgreSQL locks the queue row, but the lease row beside it is what a concurrent claim changed: a row
  // another worker claimed and committed while this search waited is locked here without the lease being read
  // again. So the lease is read again under the lock (a new statement sees every committed claim), and the
  // search repeats when the row turns out taken. SQLite's one writer never needs the second look.
  KILN_ASSIGN_OR_RETURN(
      Stmt recheck,
      Stmt::prepare(db_,
                    std::string("SELECT COALESCE(l.attempts, 0) FROM retune_queue q LEFT JOIN retune_leases l ON ") +
                        "l.structure_sig = q.structure_sig AND l.shape_key = q.shape_key AND "
                        "l.fingerprint_key = q.fingerprint_key WHERE q.structure_sig = ?3 AND "
                        "q.shape_key = ?4 AND q.fingerprint_key = ?1 AND " +
                        claimable));
  bool found = false;
  for (int tries = 0; tries < 16 && !found; ++tries) {
    KILN_RETURN_IF_ERROR(find.reset());
    find.bind(1, fingerprint_key).bind(2, now);
    KILN_ASSIGN_OR_RETURN(bool row, find.step());
    if (!row) return std::optional<RetuneJob>();
    if (!pg) break;
    KILN_RETURN_IF_ERROR(recheck.reset());
    recheck.bind(1, fingerprint_key).bind(2, now).bind(3, find.text(0)).bind(4, find.text(1));
    KILN_ASSIGN_OR_RETURN(found, recheck.step());
  }
  if (pg && !found) return std::optional<RetuneJob>();  // contended: the caller asks again
  std::string ignored;
  RetuneJob job;
  store::retune_queue_codec().decode(store::retune_queue_codec().table.read(find, 0, &ignored), &job.entry);
  const int attempts_col = static_cast<int>(store::retune_queue_codec().table.columns.size());
  job.attempt = (pg ? recheck.int64(0) : find.int64(attempts_col)) + 1;
  job.token = new_token();
  job.worker = options.worker.empty() ? store::user_at_host() : options.worker;
  job.lease_expires_at = now + std::clamp<int64_t>(options.lease_s, 1, kMaxSpanS);
  Lease l{job.entry.structure_sig,
          job.entry.shape_key,
          job.entry.fingerprint_key,
          "claimed",
          job.worker,
          job.token,
          job.attempt,
          job.lease_expires_at,
          0,
          "",
          now};
  KILN_RETURN_IF_ERROR(store::insert_row(db_, store::retune_leases_table(), encode(l)));
  KILN_RETURN_IF_ERROR(txn.commit());
  KILN_LOG(kInfo, "plan store " << path_ << ": " << job.worker << " claimed re-tune "
                                << store::record_name(l.structure_sig, l.shape_key, l.fingerprint_key) << " (attempt "
                                << job.attempt << ", lease " << options.lease_s << " s)");
  return std::optional<RetuneJob>(std::move(job));
}

Status SqlPlanStore::heartbeat_retune(const RetuneJob& job, int64_t lease_s) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  const int64_t now = store::unix_now();
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin_row_locks());
  KILN_ASSIGN_OR_RETURN(Lease l, held_lease(db_, job, path_));
  l.lease_expires_at = now + std::clamp<int64_t>(lease_s, 1, kMaxSpanS);
  l.updated_at = now;
  KILN_RETURN_IF_ERROR(store::insert_row(db_, store::retune_leases_table(), encode(l)));
  return txn.commit();
}

Status SqlPlanStore::finish_retune(const RetuneJob& job, const RetuneJobFinish& finish) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  const int64_t now = or_now(finish.now);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin_row_locks());
  KILN_ASSIGN_OR_RETURN(Lease l, held_lease(db_, job, path_));
  std::string outcome = enum_name(kRetuneJobEndNames, finish.end);
  if (finish.end == RetuneJobEnd::kDone) {
    KILN_RETURN_IF_ERROR(store::delete_by_key_in_txn(db_, store::retune_leases_table(),
                                                     {l.structure_sig, l.shape_key, l.fingerprint_key})
                             .status());
  } else if (finish.end == RetuneJobEnd::kReleased) {
    // Back to the queue at once; the attempt is not counted against the job (its worker stopped, it did not fail).
    l.state = "retry";
    l.attempts = std::max<int64_t>(l.attempts - 1, 0);
    l.next_attempt_at = now;
    l.token.clear();
    l.updated_at = now;
    KILN_RETURN_IF_ERROR(store::insert_row(db_, store::retune_leases_table(), encode(l)));
  } else {
    const bool dead = l.attempts >= std::max<int64_t>(finish.max_attempts, 1);
    l.state = dead ? "dead" : "retry";
    l.last_error = finish.message;
    const int64_t shift = std::min<int64_t>(l.attempts - 1, 20);
    l.next_attempt_at =
        dead ? 0
             : now + std::clamp<int64_t>(finish.backoff_s, 0, kMaxSpanS) * (int64_t{1} << std::max<int64_t>(shift, 0));
    l.token.clear();
    l.updated_at = now;
    if (dead) outcome = "dead";
    KILN_RETURN_IF_ERROR(store::insert_row(db_, store::retune_leases_table(), encode(l)));
  }
  const store::Row log = store::row_of(job.token, l.structure_sig, l.shape_key, l.fingerprint_key, job.worker, outcome,
                                       finish.message, job.attempt, now);
  KILN_RETURN_IF_ERROR(store::insert_row(db_, store::retune_log_table(), log));
  KILN_RETURN_IF_ERROR(txn.commit());
  KILN_LOG(kInfo, "plan store " << path_ << ": re-tune "
                                << store::record_name(l.structure_sig, l.shape_key, l.fingerprint_key) << " " << outcome
                                << " by " << job.worker << (finish.message.empty() ? "" : ": " + finish.message));
  return Status::ok();
}

StatusOr<std::vector<RetuneJobState>> SqlPlanStore::list_retune_jobs(const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RetuneJobState> out;
  KILN_ASSIGN_OR_RETURN(bool queue, store::table_exists(db_, "retune_queue"));
  KILN_ASSIGN_OR_RETURN(bool leases, store::table_exists(db_, "retune_leases"));
  if (!queue || !leases) return out;  // a read-only store from before the leases existed
  KILN_ASSIGN_OR_RETURN(
      Stmt st, Stmt::prepare(db_, "SELECT " + queue_columns() +
                                      ", COALESCE(l.state, 'queued'), COALESCE(l.worker, ''), COALESCE(l.attempts, 0), "
                                      "COALESCE(l.lease_expires_at, 0), COALESCE(l.next_attempt_at, 0), "
                                      "COALESCE(l.last_error, '')" +
                                      kJoinLeases +
                                      " WHERE (?1 = '' OR q.fingerprint_key = ?1) ORDER BY q.first_seen, "
                                      "q.structure_sig, q.shape_key, q.fingerprint_key"));
  st.bind(1, fingerprint_key);
  const int c = static_cast<int>(store::retune_queue_codec().table.columns.size());
  const int64_t now = store::unix_now();
  KILN_RETURN_IF_ERROR(store::for_each_row(st, [&] {
    RetuneJobState j;
    std::string ignored;
    store::retune_queue_codec().decode(store::retune_queue_codec().table.read(st, 0, &ignored), &j.entry);
    j.state = st.text(c);
    j.worker = st.text(c + 1);
    j.attempts = st.int64(c + 2);
    j.lease_expires_at = st.int64(c + 3);
    j.next_attempt_at = st.int64(c + 4);
    j.last_error = st.text(c + 5);
    if (j.state == "claimed" && j.lease_expires_at < now) j.state = "expired";
    out.push_back(std::move(j));
    return Status::ok();
  }));
  return out;
}

StatusOr<std::vector<RetuneJobLogEntry>> SqlPlanStore::retune_job_log() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RetuneJobLogEntry> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "retune_log"));
  if (!exists) return out;
  const store::TableCodec& t = store::retune_log_table();
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, t.select_sql(" ORDER BY finished_at, token")));
  KILN_RETURN_IF_ERROR(store::for_each_row(st, [&] {
    std::string ignored;
    store::Row row = t.read(st, 0, &ignored);
    RetuneJobLogEntry e;
    store::RowCursor(row) >> e.token >> e.structure_sig >> e.shape_key >> e.fingerprint_key >> e.worker >> e.outcome >>
        e.message >> e.attempt >> e.finished_at;
    out.push_back(std::move(e));
    return Status::ok();
  }));
  return out;
}

}  // namespace kiln
