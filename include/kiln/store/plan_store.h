// kiln/store/plan_store.h: the persistent plan store (docs/store.md), one interface over its tables; open()
// gives the embedded SQLite implementation (src/store/*_test.cc hold the contract every implementation passes).
// Every write is one transaction (readers see a record whole or not at all); processes and threads may share
// a store; a corrupt record is quarantined or dropped, logged and a miss, never a crash or an exception; the
// bytes of a record whose fingerprint fails the policy are never handed out.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kiln/core/status.h"
#include "kiln/store/first_use_record.h"
#include "kiln/store/fusion_record.h"
#include "kiln/store/graph_spec_entry.h"
#include "kiln/store/kernel_cache_record.h"
#include "kiln/store/plan_lookup.h"
#include "kiln/store/plan_record.h"
#include "kiln/store/retune_request.h"
#include "kiln/store/store_maintenance.h"

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

class PlanStore {
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

  // Inserts or replaces the record with the same key, in one transaction. Returns the record as stored
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
  // Removes the records matching the filter (an empty one only with `all`); returns how many.
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

  // ---- Re-tune queue (kiln/store/retune_request.h) ----
  // Adds a request, or counts a queued key again (count, last_seen, reason; spec and fingerprint replaced).
  // InvalidArgument for an empty signature or spec; FailedPrecondition (and a log line) for a read-only store.
  virtual StatusOr<RetuneQueueEntry> enqueue_retune(const RetuneRequest& request) = 0;
  // The queued rows (for one environment when fingerprint_key is non-empty), oldest request first.
  virtual StatusOr<std::vector<RetuneQueueEntry>> list_retune_queue(const std::string& fingerprint_key = "") = 0;
  // Removes one row; returns whether it was there.
  virtual StatusOr<bool> remove_from_retune_queue(const std::string& structure_sig, const std::string& shape_key,
                                                  const std::string& fingerprint_key) = 0;

  // ---- Leases on the re-tune queue: a fleet's job queue (kiln/store/retune_request.h) ----
  // Claims the oldest claimable row of the environment `fingerprint_key` (free, its lease expired, or its
  // retry due), or nullopt. PostgreSQL: SELECT ... FOR UPDATE SKIP LOCKED, so workers never wait on each other.
  virtual StatusOr<std::optional<RetuneJob>> claim_retune(const std::string& fingerprint_key,
                                                          const RetuneLeaseOptions& options) = 0;
  // Extends the claim's lease; FailedPrecondition ("lease lost") when the claim no longer holds.
  virtual Status heartbeat_retune(const RetuneJob& job, int64_t lease_s) = 0;
  // Ends the claim as `finish` says and logs it; FailedPrecondition ("lease lost") when it no longer holds
  // (another worker took the job after this one's lease ran out): nothing is changed then.
  virtual Status finish_retune(const RetuneJob& job, const RetuneJobFinish& finish) = 0;
  virtual StatusOr<std::vector<RetuneJobState>> list_retune_jobs(const std::string& fingerprint_key = "") = 0;
  virtual StatusOr<std::vector<RetuneJobLogEntry>> retune_job_log() = 0;  // oldest first

  // ---- Graph specs (kiln/store/graph_spec_entry.h) ----
  // Replaces the spec of the key. InvalidArgument: empty signature or spec; FailedPrecondition: read-only.
  virtual StatusOr<GraphSpecEntry> put_graph_spec(const std::string& structure_sig, const std::string& shape_key,
                                                  const std::string& graph_name, const std::string& spec_json) = 0;
  // The stored spec, or nullopt; a row whose checksum fails is logged, dropped (unless read-only), absent.
  virtual StatusOr<std::optional<GraphSpecEntry>> get_graph_spec(const std::string& structure_sig,
                                                                 const std::string& shape_key) = 0;
  virtual StatusOr<std::vector<GraphSpecEntry>> list_graph_specs() = 0;  // sound ones, by key

  // ---- Fusion decisions (kiln/store/fusion_record.h) ----
  // Replaces the decision for its key and environment. InvalidArgument for a chain that is not sound.
  virtual StatusOr<FusionRecord> put_fusion_record(const FusionRecord& record) = 0;
  // The decision `current` may use under `policy` (exact environment first, then the newest), or nullopt. A
  // damaged row is logged, counted corrupt, dropped (unless read-only) and absent: the fused plan serves.
  virtual StatusOr<std::optional<FusionRecord>> get_fusion_record(const std::string& structure_sig,
                                                                  const std::string& shape_key,
                                                                  const EnvFingerprint& current,
                                                                  const EnvPolicy& policy = {}) = 0;
  virtual StatusOr<int64_t> remove_fusion_record(const std::string& structure_sig, const std::string& shape_key,
                                                 const std::string& fingerprint_key) = 0;  // rows gone (0 or 1)
  virtual StatusOr<std::vector<FusionRecord>> list_fusion_records() = 0;                   // sound ones, by key

  // ---- First-use verdicts (kiln/store/first_use_record.h) ----
  // Keeps a verdict and returns what is held afterwards: a failed verdict is never replaced, a passing one is.
  virtual StatusOr<FirstUseRecord> put_first_use_verdict(const FirstUseRecord& record) = 0;
  // The verdict for exactly this key, or nullopt; a damaged row is logged, counted corrupt, dropped, absent.
  virtual StatusOr<std::optional<FirstUseRecord>> get_first_use_verdict(const std::string& structure_sig,
                                                                        const std::string& shape_key,
                                                                        const std::string& config,
                                                                        const std::string& fingerprint_key) = 0;
  virtual StatusOr<std::vector<FirstUseRecord>> list_first_use_verdicts() = 0;  // sound ones, by key

  // ---- Kernel caches (kiln/store/kernel_cache_record.h) ----
  // Replaces a structure's cache for its environment. InvalidArgument: empty or over kMaxKernelCacheBytes.
  virtual StatusOr<KernelCacheRecord> put_kernel_cache(const KernelCacheRecord& record) = 0;
  // The cache for exactly `current`'s environment (no policy relaxes it), or nullopt; a damaged row is logged,
  // counted corrupt, dropped (unless read-only) and absent.
  virtual StatusOr<std::optional<KernelCacheRecord>> get_kernel_cache(const std::string& structure_sig,
                                                                      const EnvFingerprint& current) = 0;
  virtual StatusOr<int64_t> remove_kernel_cache(const std::string& structure_sig,
                                                const std::string& fingerprint_key) = 0;  // rows gone (0 or 1)
  virtual StatusOr<std::vector<KernelCacheInfo>> list_kernel_caches() = 0;                // without the texts, by key

  // ---- Change notices (a server store: PostgreSQL NOTIFY on every put) ----
  // The keys other processes stored plans for since the last call, without waiting; the first call starts
  // listening and returns nothing. A key whose structure_sig is "*" says notices may have been missed (the
  // connection to the server was made again): any held plan may be out of date. A SQLite store returns nothing (its writers are one host's: the Planner's
  // own jobs tell it).
  virtual StatusOr<std::vector<StoredPlanKey>> changed_plans() = 0;

  virtual StoreCounters counters() const = 0;
  virtual void reset_counters() = 0;

 protected:
  PlanStore() = default;
};

}  // namespace kiln
