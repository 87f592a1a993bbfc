// kiln/store/plan_store.h: the persistent plan store (docs/store.md), one interface over its tables; open()
// gives the embedded SQLite implementation (src/store/*_test.cc hold the contract every implementation passes).
// Every write is one transaction (readers see a record whole or not at all); processes and threads may share
// a store; a corrupt record is quarantined or dropped, logged and a miss, never a crash or an exception; the
// bytes of a record whose fingerprint fails the policy are never handed out.
#pragma once

#include <memory>
#include <string>

#include "kiln/core/status.h"
#include "kiln/store/first_use_record.h"
#include "kiln/store/fusion_record.h"
#include "kiln/store/graph_spec_entry.h"
#include "kiln/store/kernel_cache_record.h"
#include "kiln/store/plan_lookup.h"
#include "kiln/store/plan_rollout.h"
#include "kiln/store/retune_request.h"
#include "kiln/store/store_maintenance.h"
#include "kiln/store/winner_change.h"

namespace kiln {

struct StoreOpenOptions {
  bool read_only = false;       // no writes; corrupt records are reported but not quarantined
  int busy_timeout_ms = 10000;  // how long a write waits for another writer
  bool quick_check = true;      // PRAGMA quick_check on open: a damaged file fails open, not a later call
  // A server location (PostgreSQL) only: a local SQLite file that mirrors the plans read from the server, so that
  // a restart loads from disk and lookups go on while the server cannot be reached (docs/fleet.md "Local
  // mirror"). "" : none. default_mirror_path() gives one per location.
  std::string mirror_path;
  double mirror_retry_s = 5;  // while the server is unreachable, how often a call tries it again
};

// The mirror a host keeps of a server location: $XDG_CACHE_HOME/kiln/mirror-<hash>.db (or under
// $HOME/.cache/kiln), the hash of the location without its password.
std::string default_mirror_path(const std::string& location);

// $KILN_STORE, else $XDG_CACHE_HOME/kiln/plans.db, else $HOME/.cache/kiln/plans.db.
std::string default_store_path();

// The tables beside the plans are interfaces of their own (each in its record's header), all implemented here.
class PlanStore : public RetuneQueue,
                  public GraphSpecTable,
                  public FusionRecordTable,
                  public FirstUseTable,
                  public KernelCacheTable,
                  public WinnerChangeLog,
                  public PlanRollout {
 public:
  // Opens (creating it unless read_only) the SQLite store at `path`. Corruption for a file that is not a SQLite
  // database, fails quick_check, or has damaged tables; NewerVersion for a newer schema; a store this user
  // cannot write, opened to write: InvalidArgument that is_unwritable_store() recognizes.
  static StatusOr<std::unique_ptr<PlanStore>> open(const std::string& path, const StoreOpenOptions& options = {});
  // open()'s checks of the path alone (no file read): not empty, present when read_only, a regular file.
  static Status check_path(const std::string& path, const StoreOpenOptions& options = {});
  static bool is_unwritable_store(const Status& s);

  virtual ~PlanStore() = default;
  PlanStore(const PlanStore&) = delete;
  PlanStore& operator=(const PlanStore&) = delete;

  virtual const std::string& path() const = 0;
  virtual bool read_only() const = 0;
  // The files this store keeps (SQLite: the database, -wal, -shm, -journal, also with symlinks resolved).
  virtual std::vector<std::string> database_files() const = 0;

  // Inserts or replaces the record with the same key, in one transaction (with a WinnerChange when a tuned record
  // replaces a tuned one of another configuration). Returns the record as stored
  // (tuned_by, created_at, kiln_schema_version and checksum filled). InvalidArgument for an empty structure
  // signature, a NaN measure, or knob names that cannot be written canonically.
  virtual StatusOr<PlanRecord> put(const PlanRecord& record) = 0;
  // The plan for (structure_sig, shape_key) in the environment `current`:
  //  hit     a record whose checksum, validator and fingerprint pass (the exact fingerprint key is
  //          preferred, then tuned over untuned, then the newest);
  //  stale   records exist but none passes the policy: reasons name the fields; no plan bytes;
  //  corrupt the only candidates were corrupt: they are quarantined and logged (counted as a miss);
  //  miss    nothing stored.
  // FailedPrecondition (naming the fields) instead of kStale when policy.on_mismatch is kFail. Other errors
  // only for I/O or a damaged database.
  virtual StatusOr<LookupResult> get(const std::string& structure_sig, const std::string& shape_key,
                                     const EnvFingerprint& current, const EnvPolicy& policy = {},
                                     const PlanValidator& validator = nullptr) = 0;
  // Every runnable record for `current`, in one query: for start-up. One record per (structure, shape).
  virtual StatusOr<LoadAllResult> load_all(const EnvFingerprint& current, const EnvPolicy& policy = {},
                                           const PlanValidator& validator = nullptr) = 0;
  // Records matching the filter, without plan bytes, by structure, shape, fingerprint key.
  virtual StatusOr<std::vector<PlanSummary>> list(const ListFilter& filter = {}) = 0;
  // The record with this exact key (checksum not checked: verify or get check it).
  virtual StatusOr<PlanRecord> read(const std::string& structure_sig, const std::string& shape_key,
                                    const std::string& fingerprint_key) = 0;
  // Removes the records matching the filter (an empty one only with `all`), and the plans of theirs in other states
  // (kiln/store/plan_rollout.h; their history stays); returns how many rows went.
  virtual StatusOr<int64_t> remove(const ListFilter& filter, bool all = false) = 0;

  // ---- Upkeep (kiln/store/store_maintenance.h) ----
  virtual StatusOr<GcReport> gc(const GcOptions& options) = 0;
  // verify re-checks every record's checksum (and the validator), every kernel cache, and the database.
  virtual StatusOr<VerifyReport> verify(const VerifyOptions& options = {}) = 0;
  virtual StatusOr<std::vector<QuarantineEntry>> quarantine() = 0;
  // Writes the records matching the filter to a bundle file (docs/store.md "Bundles"), atomically.
  // InvalidArgument, before anything is read, when the bundle path is a folder, exists (unless
  // options.overwrite), or is one of this store's own files (by name or identity: database_files()).
  virtual StatusOr<ExportReport> export_bundle(const std::string& bundle_path, const ExportOptions& options = {}) = 0;
  // Checks the whole bundle, then merges it in one transaction; Corruption and nothing imported if one fails.
  virtual StatusOr<ImportReport> import_bundle(const std::string& bundle_path, const ImportOptions& options = {}) = 0;

  // ---- Change notices ----
  // The keys other processes (or other store objects) changed since the last call, without waiting; the first call
  // starts watching and returns nothing. A key whose structure_sig is "*" says notices may have been missed: any held
  // plan may be out of date. A server store: PostgreSQL NOTIFY on every put and every transition ("*" after the
  // connection was made again). A SQLite store: the keys of the plan_history rows written since (every transition
  // writes one; a same-configuration re-put and a removal write none), less those this object or a writer it was
  // told of wrote ("*" when the table's row count does not add up: rows deleted, or a damaged rowid).
  virtual StatusOr<std::vector<StoredPlanKey>> changed_plans() = 0;
  // What `writer` writes counts as this store's own for changed_plans(): a Planner's read and write connections to
  // one store, whose own promotions and verdicts are no news to it (SQLite: the writer's history rows; PostgreSQL:
  // the writer's server sessions).
  virtual void treat_writes_as_own(PlanStore& writer) { (void)writer; }

  virtual StoreCounters counters() const = 0;
  virtual void reset_counters() = 0;

 protected:
  PlanStore() = default;
};

}  // namespace kiln
