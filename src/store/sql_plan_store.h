// SqlPlanStore: the PlanStore interface over one embedded SQLite file (docs/store.md "Schema"). Private to
// the store layer: callers open it through PlanStore::open().
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/store/plan_store.h"
#include "store/database.h"
#include "store/record_codec.h"
#include "store/sql_table.h"

namespace kiln {

// The PostgreSQL channel a put() notifies on (PlanStore::changed_plans).
inline constexpr const char* kPlanChannel = "kiln_plans";

// A plan_history row's identity beyond its rowid: its key and number (SqlPlanStore's own rows, changed_plans()).
std::string history_row_id(const std::string& structure_sig, const std::string& shape_key,
                           const std::string& fingerprint_key, int64_t seq);

class SqlPlanStore final : public PlanStore {
 public:
  // PlanStore::open's work (the path already checked by PlanStore::check_path).
  static StatusOr<std::unique_ptr<PlanStore>> open(const std::string& path, const StoreOpenOptions& options);
  ~SqlPlanStore() override;

  const std::string& path() const override { return path_; }
  bool read_only() const override { return read_only_; }
  std::vector<std::string> database_files() const override;

#include "store/plan_store_methods.inc"  // put() ... reset_counters(), each an override

 private:
  // In a write transaction: a dead-lettered lease of this key goes (its queue row is removed or asked for again).
  Status delete_dead_lease(const std::string& structure_sig, const std::string& shape_key,
                           const std::string& fingerprint_key);
  SqlPlanStore(std::string path, store::Database db, bool read_only);
  // A put of a record that passed its own checks: the store writable, created_at (when 0) and checksum
  // filled, written in one transaction; returns the record as stored.
  template <class Record>
  StatusOr<Record> put_stamped(const store::RecordCodec<Record>& codec, const Record& record) {
    if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
    const Record r = store::stamped(codec, record);
    std::lock_guard<std::mutex> lock(mu_);
    KILN_RETURN_IF_ERROR(store::put_row(db_, codec.table, codec.encode(r)));
    return r;
  }
  // The change of winner that `incoming` replacing `old` (same key and environment) makes at `at` (unix seconds): a
  // tuned record over a tuned one of another configuration; nullopt otherwise.
  static std::optional<WinnerChange> winner_change_of(const PlanRecord& old, const PlanRecord& incoming, int64_t at);
  // How a plan becomes its key's active one (activate_locked): the state it leaves ("" for a record that enters
  // the store), why, the evidence, and what the plan it replaces becomes.
  struct Activation {
    std::string from_state;
    std::string reason = "stored";
    std::string evidence;
    PlanState old_becomes = PlanState::kRetired;
    std::string old_reason;  // "" : "replaced by <config> (<reason>)"
    bool notify = true;      // tell other processes (PostgreSQL NOTIFY)
  };
  // In the caller's write transaction (plan_rollout.cc): `r` becomes the plans row of its key, with the winner
  // change it makes, the plan it replaces kept in plan_rollout (Activation::old_becomes), its own earlier state
  // row removed, and the history rows.
  Status activate_locked(const PlanRecord& r, const Activation& how);
  // The key's plans row (its problem, when damaged), or nullopt.
  StatusOr<std::optional<store::RowRead>> active_row_locked(const StoredPlanKey& key);
  // The key's plan of `config` in plan_rollout (with its bytes), or nullopt.
  StatusOr<std::optional<RolloutEntry>> rollout_row_locked(const StoredPlanKey& key, const std::string& config);
  // "" when the row is sound and its history row (by its seq) moved this configuration into its state; else why not.
  StatusOr<std::string> history_mismatch_locked(const RolloutEntry& e);
  // A rollout row for `r` in `state`, numbered `seq` (the history row that put it there).
  Status put_rollout_locked(const PlanRecord& r, PlanState state, const std::string& reason, int64_t seq);
  // Appends a history row to the key's, numbered one past its last; returns that number.
  StatusOr<int64_t> history_locked(const StoredPlanKey& key, const std::string& config, const std::string& from,
                                   PlanState to, const std::string& reason, const std::string& evidence);
  StatusOr<int64_t> remove_kernel_cache_locked(const std::string& structure_sig, const std::string& fingerprint_key);
  // A bad plan row found by verify: its rowid, and its stored key and checksum column texts (what quarantine_row
  // matches).
  struct BadPlan {
    int64_t rowid = 0;
    std::string structure_sig, shape_key, fingerprint_key, stored_checksum, reason;
  };
  // A damaged kernel cache row found by verify: its rowid and stored checksum text, so that only that row goes.
  struct BadKernelCache {
    int64_t rowid = 0;
    std::string stored_checksum;
  };
  // A kernel cache gc removes (stale or old), with what its report says of it.
  struct KernelCacheGarbage {
    BadKernelCache row;
    KernelCacheRemoval what;
    bool stale = false;  // else old
  };
  // What gc removes after the corrupt rows, found by reading alone (gc_find_locked): rowids by table.
  struct GcGarbage {
    std::vector<int64_t> stale_plans, old_plans, graph_specs, fusion_records;
    int64_t quarantined = 0;  // rows in the quarantine table (when it is to be emptied)
    std::vector<KernelCacheGarbage> kernel_caches;
  };
  // What verify() does, under mu_; the bad rows are handed back too, when asked for.
  StatusOr<VerifyReport> verify_locked(const VerifyOptions& options, std::vector<BadPlan>* bad_plans = nullptr,
                                       std::vector<BadKernelCache>* bad_caches = nullptr);
  // Appends a check of every kernel cache row to `out` (kernel_caches.cc).
  Status verify_kernel_caches_locked(VerifyReport* out, std::vector<BadKernelCache>* bad);
  Status verify_rollout_locked(VerifyReport* out);
  // Deletes one kernel cache row (by rowid and stored checksum), in the caller's transaction if there is one;
  // returns the rows gone.
  StatusOr<int64_t> drop_kernel_cache_row_locked(const BadKernelCache& bad);
  // What gc removes besides the corrupt rows, read without writing. `gone_plans` and `gone_caches`: rows a
  // real run has already removed as corrupt by then (a dry run leaves them in place), passed over here.
  StatusOr<std::vector<StoredPlanKey>> changed_in_history_locked();
  Status gc_find_locked(const GcOptions& options, const std::set<int64_t>& gone_plans,
                        const std::set<int64_t>& gone_caches, GcGarbage* out);
  // gc_find_locked's kernel cache part (stale and old caches; kernel_caches.cc).
  Status gc_find_kernel_caches_locked(const GcOptions& options, const std::set<int64_t>& gone, GcGarbage* out);
  // A damaged row (not a plan) met by a read: logged, and removed through `remove` unless the store is read-only
  // (then left in place; `kept_note` ends the log line: ", the fused plan serves"). The caller counts it.
  Status drop_corrupt_locked(const char* what, const std::string& name, const std::string& problem,
                             const char* kept_note, const std::function<StatusOr<int64_t>()>& remove);
  // Moves the row with these stored key and checksum column values to quarantine, unless another process
  // replaced it meanwhile (its checksum column then differs). Logs. No-op for a read-only store.
  void quarantine_row(const std::string& structure_sig, const std::string& shape_key,
                      const std::string& fingerprint_key, const std::string& stored_checksum,
                      const std::string& reason);

  std::string path_;
  store::Database database_;
  store::Conn* db_ = nullptr;  // database_'s connection
  bool read_only_ = false;
  mutable std::mutex mu_;  // one connection, shared by threads: calls are serialized
  StoreCounters counters_;
  bool listening_ = false;  // changed_plans() has subscribed this connection
  // PostgreSQL: this store's own notice channel ("kiln_plans_" and a hash of its schema; empty until first needed).
  // NOTIFY is database-wide, and two stores in one database (two schemas) would hear each other's writes on
  // kPlanChannel alone. Writes notify both (older processes listen on kPlanChannel); this store listens on its own.
  std::string schema_channel_;
  StatusOr<std::string> schema_channel_locked();
  Status notify_locked(const std::string& structure_sig, const std::string& shape_key,
                       const std::string& fingerprint_key);
  // SQLite: changed_plans() reads plan_history's rows past this rowid (-1: not yet started), skipping the rows this
  // store object, or a writer it shares `own_` with (treat_writes_as_own), wrote: its Planner's own verdicts and
  // promotions, which it knows of already. A row is ours only if its rowid and its key and number match what we
  // wrote (a write of ours that rolled back leaves its rowid to the next writer, of any process). history_rows_: the
  // table's row count as last seen; a count that is not what the rows read explain (rows deleted, rowids reused or
  // taken at random after a damaged maximum) says notices may have been missed ("*").
  int64_t history_seen_ = -1;
  int64_t history_rows_ = 0;
  struct OwnHistory {
    std::mutex mu;                        // after a store's mu_, never before
    std::map<int64_t, std::string> rows;  // rowid -> the key and number written (history_row_id)
    // PostgreSQL: the server sessions our NOTIFYs were sent from -> when (unix seconds). A session id is a server
    // process id, which the server may give another connection once ours is gone: forgotten after kOwnSessionS.
    std::map<int, int64_t> sessions;
  };
  static constexpr int64_t kOwnSessionS = 600;
  // A NOTIFY of ours is about to be sent: its session is recorded as ours (PostgreSQL; nothing on SQLite).
  void note_own_session_locked();
  std::shared_ptr<OwnHistory> own_ = std::make_shared<OwnHistory>();
};

}  // namespace kiln
