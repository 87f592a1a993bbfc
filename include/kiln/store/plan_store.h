// kiln/store/plan_store.h: the persistent plan store, an embedded SQLite file (docs/store.md).
//
// One record per (structure signature, shape key, fingerprint key). Plan bytes are opaque here (the
// frontend's serialize() output); the store checks the record's checksum and fingerprint, and a caller may
// add a deeper check of the bytes through a PlanValidator.
//
// Guarantees: every write is one transaction (BEGIN IMMEDIATE), so readers see a record whole or not at
// all; several processes and threads may share a store file (WAL mode, busy timeout); a corrupt record is
// moved to a quarantine table, logged and reported as a miss, never a crash or an exception; the bytes of
// a record whose fingerprint fails the policy are never handed out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/disposition.h"
#include "kiln/core/engine_config.h"
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/first_use_record.h"
#include "kiln/store/fusion_record.h"
#include "kiln/store/kernel_cache_record.h"

struct sqlite3;

namespace kiln {

// Version of the store's tables and of the record layout. A store written by a newer Kiln is refused.
inline constexpr int kStoreSchemaVersion = 2;
// Records written before this version bind plan tensors by declaration order, not canonical order
// (GraphSignature::tensor_ids): they are never run (stale, reason "kiln_schema_version"), and get re-tuned.
inline constexpr int kMinRunnableRecordVersion = 2;

// Knobs and their column text (knobs_to_text, knobs_from_text): kiln/core/engine_config.h.

// Timing of the winner (all zero for a plan that was not tuned).
struct PlanStats {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double noise_rel = 0;  // relative spread of the samples
  int64_t samples = 0;
  int64_t runner_up_engine = -1;  // -1: none
  Knobs runner_up_knobs;
  double runner_up_median_ms = 0;
};

// Numerical check of the winner against a reference.
struct PlanNumerics {
  Disposition verdict = Disposition::kNotVerified;  // kept as its name (disposition_name) in the store
  double max_abs = 0;
  double max_rel = 0;
  double nmse = 0;
};

struct PlanRecord {
  // Key.
  std::string structure_sig;
  std::string shape_key;
  EnvFingerprint fingerprint;  // stored as canonical JSON plus fingerprint_key(fingerprint)
  // Plan.
  std::string plan_bytes;  // opaque blob
  int64_t engine_id = -1;
  Knobs knobs;
  int64_t workspace_bytes = 0;
  bool tuned = false;  // false for heuristic or AOT-compiled plans
  PlanStats stats;
  PlanNumerics numerics;
  // Provenance. put() fills tuned_by ("user@host") and created_at (unix seconds) when left empty/zero,
  // always sets kiln_schema_version and computes checksum.
  std::string tuned_by;
  int64_t created_at = 0;
  int kiln_schema_version = kStoreSchemaVersion;
  std::string checksum;  // XXH3-128 hex over canonical_record_bytes()

  std::string fingerprint_key() const { return kiln::fingerprint_key(fingerprint); }
};

// The bytes the checksum covers: every field but the checksum, in a fixed order, length-prefixed
// (docs/store.md "Checksum").
std::string canonical_record_bytes(const PlanRecord& r);
std::string compute_record_checksum(const PlanRecord& r);

// A deeper check of a record, e.g. deserializing plan_bytes with the frontend on a device. A non-OK status
// marks the record corrupt. Must not throw (a throw is caught and counted as a refusal).
using PlanValidator = std::function<Status(const PlanRecord&)>;

enum class LookupOutcome { kHit, kMiss, kStale, kCorrupt };
const char* lookup_outcome_name(LookupOutcome o);  // "hit", "miss", "stale", "corrupt"

struct LookupResult {
  LookupOutcome outcome = LookupOutcome::kMiss;
  // kHit: the record to run. kStale: the best stale record with plan_bytes cleared (its engine and knobs
  // are a hint for re-tuning); never runnable. Empty otherwise.
  std::optional<PlanRecord> record;
  // kStale: why (one line per failing field); kCorrupt: what was wrong.
  std::vector<std::string> reasons;
  // kStale: what the policy says to do (never kFail: get() returns FailedPrecondition then).
  MismatchPolicy action = MismatchPolicy::kHeuristicsAndQueue;

  bool runnable() const { return outcome == LookupOutcome::kHit; }
};

struct StoreCounters {
  int64_t hits = 0;
  int64_t misses = 0;  // includes stale and corrupt lookups
  int64_t stale = 0;
  int64_t corrupt = 0;  // records found corrupt (by get, load_all or verify)
  int64_t quarantined = 0;
  std::map<std::string, int64_t> stale_by_field;  // "cudnn_version" -> count
};

struct StoreOpenOptions {
  bool read_only = false;       // no writes; corrupt records are reported but not quarantined
  int busy_timeout_ms = 10000;  // how long a write waits for another writer
  bool quick_check = true;      // PRAGMA quick_check on open: a damaged file fails open, not a later call
};

struct ListFilter {
  std::string structure_prefix;  // empty: any
  std::string shape_key;         // empty: any
  std::string fingerprint_key;   // empty: any
  bool tuned_only = false;
};

// What list() returns: a record without its plan bytes (plan_size says how many there are).
struct PlanSummary {
  PlanRecord record;  // plan_bytes empty
  int64_t plan_size = 0;
  std::string stored_fingerprint_key;  // the row's fingerprint_key column (what ListFilter matches)
  // Why the record is corrupt (verify's check: columns, fingerprint, truncated plan, checksum), "" when sound.
  // A corrupt record's other fields may be defaults: its fingerprint is not to be judged.
  std::string problem;
};

struct LoadAllResult {
  std::vector<PlanRecord> records;  // runnable: checksum OK, validator OK, fingerprint passes
  int64_t stale = 0;
  int64_t corrupt = 0;
};

struct GcOptions {
  // Drop records whose fingerprint fails `policy` against `current` (when set).
  std::optional<EnvFingerprint> current;
  EnvPolicy policy;
  bool drop_quarantine = true;
  // Drop records created before this unix time (when set).
  std::optional<int64_t> older_than;
  // Drop records whose checksum fails (they are moved to quarantine first, then dropped with it).
  bool drop_corrupt = true;
  // Kernel caches (docs/store.md "Kernel caches") follow the same switches: with `current`, a cache that
  // could not serve it (kernel_cache_mismatches under `kernel_cache_judged`, not `policy`: a cache is machine
  // code, read back only in exactly its environment) is dropped; with `older_than`, one kept before that time;
  // with `drop_corrupt`, a damaged one (as verify finds it). A cache whose structure has no plan record is
  // kept: a Planner reads it for any dynamic build of the structure, plan record or not.
  KernelCacheJudged kernel_cache_judged = KernelCacheJudged::kEverything;
  // Report what would be removed, and remove nothing: the same rows are found by reading alone (one snapshot),
  // so a dry run writes nothing at all and works on a store opened read-only.
  bool dry_run = false;
};
// A kernel cache gc removed (or, dry run, would remove), and why.
struct KernelCacheRemoval {
  std::string structure_sig, fingerprint_key, graph_name;
  std::string why;    // "another environment: cudnn_version: kept ...", "older than the cut-off", "corrupt: ..."
  int64_t rowid = 0;  // names a row whose key columns are NULL (kernel_cache_display_name)
};
struct GcReport {
  bool dry_run = false;  // counts are what a real run would remove; nothing was
  int64_t stale_removed = 0;
  int64_t old_removed = 0;
  int64_t corrupt_removed = 0;
  int64_t quarantine_removed = 0;
  int64_t graph_specs_removed = 0;            // specs no plan and no queue row refers to any more
  int64_t fusion_records_removed = 0;         // fusion decisions a part's record (same environment) is gone from
  int64_t kernel_caches_stale_removed = 0;    // kept for an environment other than `current`
  int64_t kernel_caches_old_removed = 0;      // kept before `older_than`
  int64_t kernel_caches_corrupt_removed = 0;  // damaged
  std::vector<KernelCacheRemoval> kernel_caches_removed;  // each of them, by key
};

struct VerifyOptions {
  PlanValidator validator;  // optional deeper check (e.g. the device-side deserialization)
  // Move bad records to quarantine, and drop damaged kernel caches (they are compiled again, as a lookup
  // that meets one does); needs a writable store.
  bool quarantine = false;
};
struct VerifyProblem {
  std::string structure_sig, shape_key, fingerprint_key;  // shape_key is empty for a kernel cache
  std::string reason;
  int64_t rowid = 0;  // the row's SQLite rowid: names a row whose key columns are NULL
};
struct VerifyReport {
  int64_t checked = 0;
  int64_t ok = 0;
  std::vector<VerifyProblem> problems;
  std::string integrity;  // "ok" or SQLite's integrity_check output
  // Kernel caches (docs/store.md "Kernel caches"): each row's column types, size, fingerprint and key,
  // checksum, and that its cache text is whole JSON. A damaged one is reported here, never thrown.
  int64_t kernel_caches_checked = 0;
  int64_t kernel_caches_ok = 0;
  std::vector<VerifyProblem> kernel_cache_problems;
};

struct QuarantineEntry {
  int64_t id = 0;
  std::string structure_sig, shape_key, fingerprint_key;
  std::string reason;
  int64_t quarantined_at = 0;
};

struct ExportOptions {
  ListFilter filter;
  // Replace an existing bundle file (`kiln plans export --force`). Off: an existing file is refused
  // (InvalidArgument). Never the store's own files (database_files()), whatever this says.
  bool overwrite = false;
};
struct ExportReport {
  int64_t records = 0;
  std::vector<std::string> fingerprint_keys;
  int64_t graph_specs = 0;  // graph specs of the exported records' (structure, shape) carried along
  // Fusion decisions of the exported records (same key and environment) carried along; each one's parts'
  // records travel too, even where the filter left them out (`records` counts them).
  int64_t fusion_records = 0;
};

struct ImportOptions {
  // When `current` is set, records whose fingerprint fails `policy` against it are skipped.
  std::optional<EnvFingerprint> current;
  EnvPolicy policy;
  PlanValidator validator;  // optional deeper check of each incoming record
};
struct ImportReport {
  int64_t imported = 0;        // new keys
  int64_t replaced = 0;        // existing older records replaced
  int64_t kept_newer = 0;      // existing records at least as new kept
  int64_t unchanged = 0;       // identical record already present
  int64_t skipped_stale = 0;   // fingerprint failed the policy
  int64_t graph_specs = 0;     // graph specs added (a spec already stored for the key is kept)
  int64_t fusion_records = 0;  // fusion decisions added or replaced by newer ones (stale ones skipped)
};

// ---- Re-tune queue (docs/store.md "The re-tune queue") ----
// A process that could not use a tuned plan (miss, stale or corrupt record) under the policy
// kHeuristicsAndQueue asks for one here; `kiln plans retune` (retune_queued() in kiln/runtime/retune.h) drains it
// on a machine of that environment. One row per (structure_sig, shape_key, fingerprint_key of the
// environment that wants the plan).
struct RetuneRequest {
  std::string structure_sig;
  std::string shape_key;       // may be empty (a graph with no dynamic dim)
  EnvFingerprint fingerprint;  // the environment that wants a tuned plan
  std::string graph_name;
  std::string spec_json;     // the graph as spec JSON (graph_to_spec_json): re-tunable without its file
  std::string reason;        // "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)"
  int64_t requested_at = 0;  // unix seconds; 0: now
};

// Distinct reasons kept per queue row (the oldest are dropped), and the longest reason kept (longer ones are
// cut with "...").
inline constexpr size_t kRetuneReasonsKept = 8;
inline constexpr size_t kRetuneReasonMaxChars = 500;

struct RetuneQueueEntry {
  std::string structure_sig, shape_key, fingerprint_key;
  EnvFingerprint fingerprint;
  std::string graph_name;
  std::string spec_json;
  std::vector<std::string> reasons;  // distinct, in the order first seen
  int64_t request_count = 0;         // how many times it was asked for
  int64_t first_seen = 0;            // unix seconds
  int64_t last_seen = 0;
  std::string requested_by;  // user@host of the last request
  std::string problem;       // non-empty when a column did not read back (e.g. fingerprint JSON)
};

// ---- Graph specs (docs/store.md "Graph specs") ----
// The graph behind a (structure_sig, shape_key), as spec JSON, kept beside its plans so that a plan can be
// re-run and checked (`kiln plans verify --deep`) without the original spec file. Opaque text to the
// store; the writer (runtime layer) guarantees the spec gives this signature and shape key.
struct GraphSpecEntry {
  std::string structure_sig, shape_key;
  std::string graph_name;
  std::string spec_json;
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over the key and the text (docs/store.md)
};
std::string compute_graph_spec_checksum(const GraphSpecEntry& e);

// $KILN_STORE, else $XDG_CACHE_HOME/kiln/plans.db, else $HOME/.cache/kiln/plans.db.
std::string default_store_path();

class PlanStore {
 public:
  // Opens (creating the file and its folders unless read_only) a store. Corruption for a file that is
  // not a SQLite database, fails quick_check, or whose tables are damaged (a Kiln table that is a view or
  // lacks a column, or a store without its plans table); NewerVersion for a store of a newer schema. A store
  // this user cannot write, opened to write: InvalidArgument that is_unwritable_store() recognizes (a reader
  // may open it read-only instead); opened read-only, it is read as immutable where no -wal is left beside it.
  static StatusOr<std::unique_ptr<PlanStore>> open(const std::string& path, const StoreOpenOptions& options = {});
  // open()'s first checks of the path alone, which read no file: not empty, present when read_only, and not a folder,
  // pipe, socket or device. The same errors open() returns for them; ok says nothing of the file's contents.
  static Status check_path(const std::string& path, const StoreOpenOptions& options = {});
  // True for open()'s refusal of a store this user cannot write, opened to write.
  static bool is_unwritable_store(const Status& s);
  ~PlanStore();
  PlanStore(const PlanStore&) = delete;
  PlanStore& operator=(const PlanStore&) = delete;

  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  // The files SQLite keeps for this store: the database, its -wal, -shm and -journal files, also under
  // the path with symlinks resolved. Nothing Kiln writes for a user may replace one of them.
  std::vector<std::string> database_files() const;

  // Inserts or replaces the record with the same key, in one transaction. Returns the record as stored
  // (tuned_by, created_at, kiln_schema_version and checksum filled). InvalidArgument for an empty
  // structure signature or shape key, a NaN measure, or knob names that cannot be written canonically.
  StatusOr<PlanRecord> put(const PlanRecord& record);

  // Looks up the plan for (structure_sig, shape_key) in the environment `current`:
  //  hit     a record whose checksum, validator and fingerprint pass (the exact fingerprint key is
  //          preferred, then tuned over untuned, then the newest);
  //  stale   records exist but none passes the policy: reasons name the fields; no plan bytes;
  //  corrupt the only candidates were corrupt: they are quarantined and logged (counted as a miss);
  //  miss    nothing stored.
  // FailedPrecondition (naming the fields) instead of kStale when policy.on_mismatch is kFail. Other
  // errors only for I/O or a damaged database file.
  StatusOr<LookupResult> get(const std::string& structure_sig, const std::string& shape_key,
                             const EnvFingerprint& current, const EnvPolicy& policy = {},
                             const PlanValidator& validator = nullptr);

  // Every runnable record for `current`, in one query: for start-up. One record per (structure, shape).
  StatusOr<LoadAllResult> load_all(const EnvFingerprint& current, const EnvPolicy& policy = {},
                                   const PlanValidator& validator = nullptr);

  // Records matching the filter, without plan bytes, ordered by structure, shape, fingerprint key.
  StatusOr<std::vector<PlanSummary>> list(const ListFilter& filter = {});
  // The full record with this exact key (checksum not checked: use verify or get for that).
  StatusOr<PlanRecord> read(const std::string& structure_sig, const std::string& shape_key,
                            const std::string& fingerprint_key);

  // Removes the records matching the filter; returns how many. An empty filter removes nothing unless
  // `all` is true.
  StatusOr<int64_t> remove(const ListFilter& filter, bool all = false);

  StatusOr<GcReport> gc(const GcOptions& options);
  // Re-checks every record's checksum (and the validator), every kept kernel cache, plus PRAGMA
  // integrity_check.
  StatusOr<VerifyReport> verify(const VerifyOptions& options = {});
  StatusOr<std::vector<QuarantineEntry>> quarantine();

  // Writes the records matching the filter to a bundle file (docs/store.md "Bundles"), atomically (a
  // temporary file in the bundle's folder, fsync'd and renamed into place: kiln/core/atomic_file.h).
  // InvalidArgument, before anything is read, when the bundle path is a folder, exists (unless
  // options.overwrite), or is one of this store's own files (by name or identity: database_files()).
  StatusOr<ExportReport> export_bundle(const std::string& bundle_path, const ExportOptions& options = {});
  // Checks the whole bundle first (manifest, per-record and whole checksums, validator), then merges it
  // in one transaction: Corruption naming the first bad record and nothing imported if any check fails.
  StatusOr<ImportReport> import_bundle(const std::string& bundle_path, const ImportOptions& options = {});

  // Adds a request to the re-tune queue, or, when the key is already queued, counts it again in one
  // transaction: request_count + 1, last_seen, the reason added to the distinct reasons, spec, graph name
  // and fingerprint replaced by the latest. Returns the row as stored. InvalidArgument for an empty
  // structure signature or spec; FailedPrecondition (and a log line) for a read-only store, which never
  // queues.
  StatusOr<RetuneQueueEntry> enqueue_retune(const RetuneRequest& request);
  // The queued rows (for one environment when fingerprint_key is non-empty), oldest request first.
  StatusOr<std::vector<RetuneQueueEntry>> list_retune_queue(const std::string& fingerprint_key = "");
  // Removes one row; returns whether it was there.
  StatusOr<bool> remove_from_retune_queue(const std::string& structure_sig, const std::string& shape_key,
                                          const std::string& fingerprint_key);

  // Stores the graph spec of (structure_sig, shape_key), replacing an earlier one (created_at and checksum
  // are filled). InvalidArgument for an empty signature or spec; FailedPrecondition for a read-only store.
  StatusOr<GraphSpecEntry> put_graph_spec(const std::string& structure_sig, const std::string& shape_key,
                                          const std::string& graph_name, const std::string& spec_json);
  // The stored spec of (structure_sig, shape_key), or nullopt. A row whose checksum fails is logged,
  // deleted (unless read-only) and reported as absent.
  StatusOr<std::optional<GraphSpecEntry>> get_graph_spec(const std::string& structure_sig,
                                                         const std::string& shape_key);
  // Every stored spec whose checksum passes (others are logged and skipped), by key.
  StatusOr<std::vector<GraphSpecEntry>> list_graph_specs();

  // ---- Fusion decisions (kiln/store/fusion_record.h, docs/store.md "Fusion decisions") ----
  // Stores the decision for its key and environment, replacing an earlier one (created_at when 0, and
  // checksum, are filled). InvalidArgument for an empty structure signature, fewer than two parts, a part
  // without one, or a median that is negative or not finite; FailedPrecondition for a read-only store.
  StatusOr<FusionRecord> put_fusion_record(const FusionRecord& record);
  // The decision for (structure_sig, shape_key) that `current` may use under `policy` (the exact
  // environment first, then the newest), or nullopt. A row whose checksum or fingerprint fails is logged,
  // counted corrupt, deleted (unless read-only) and reported as absent: the fused plan then serves.
  StatusOr<std::optional<FusionRecord>> get_fusion_record(const std::string& structure_sig,
                                                          const std::string& shape_key, const EnvFingerprint& current,
                                                          const EnvPolicy& policy = {});
  // Removes the decision for this key and environment; returns how many rows went (0 or 1).
  StatusOr<int64_t> remove_fusion_record(const std::string& structure_sig, const std::string& shape_key,
                                         const std::string& fingerprint_key);
  // Every sound decision, by key (corrupt ones are logged and skipped).
  StatusOr<std::vector<FusionRecord>> list_fusion_records();

  // ---- First-use verdicts (kiln/store/first_use_record.h, docs/store.md "First-use verdicts") ----
  // Keeps a verdict for its (structure, shape, configuration, environment) and returns what the store holds
  // there afterwards: a failed verdict is never replaced (a configuration that failed once is not served
  // again in that environment), a passing one is replaced by a newer verdict. InvalidArgument for an empty
  // structure signature, configuration or fingerprint key; FailedPrecondition for a read-only store.
  StatusOr<FirstUseRecord> put_first_use_verdict(const FirstUseRecord& record);
  // The verdict kept for exactly this key and environment, or nullopt. A row whose checksum fails is logged,
  // counted corrupt, deleted (unless read-only) and reported as absent: the plan is then checked again.
  StatusOr<std::optional<FirstUseRecord>> get_first_use_verdict(const std::string& structure_sig,
                                                                const std::string& shape_key, const std::string& config,
                                                                const std::string& fingerprint_key);
  // Every sound verdict, by key (corrupt ones are logged and skipped).
  StatusOr<std::vector<FirstUseRecord>> list_first_use_verdicts();

  // ---- Kernel caches (kiln/store/kernel_cache_record.h, docs/store.md "Kernel caches") ----
  // Keeps a structure's kernel cache for its environment, replacing an earlier one (created_at when 0, and
  // checksum, are filled). InvalidArgument for an empty structure signature or cache text, or a text over
  // kMaxKernelCacheBytes; FailedPrecondition for a read-only store.
  StatusOr<KernelCacheRecord> put_kernel_cache(const KernelCacheRecord& record);
  // The cache kept for this structure in exactly `current`'s environment (no EnvPolicy relaxes it: it is
  // machine code), or nullopt. A row whose checksum, fingerprint or size fails is logged, counted corrupt,
  // deleted (unless read-only) and reported as absent.
  StatusOr<std::optional<KernelCacheRecord>> get_kernel_cache(const std::string& structure_sig,
                                                              const EnvFingerprint& current);
  // Removes the cache of this structure and environment; returns how many rows went (0 or 1).
  StatusOr<int64_t> remove_kernel_cache(const std::string& structure_sig, const std::string& fingerprint_key);
  // What is kept, without the cache texts, by key.
  StatusOr<std::vector<KernelCacheInfo>> list_kernel_caches();

  StoreCounters counters() const;
  void reset_counters();

 private:
  PlanStore(std::string path, sqlite3* db, bool read_only);
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
  // Deletes one kernel cache row (by rowid and stored checksum), in the caller's transaction if there is one;
  // returns the rows gone.
  StatusOr<int64_t> drop_kernel_cache_row_locked(const BadKernelCache& bad);
  // What gc removes besides the corrupt rows, read without writing. `gone_plans` and `gone_caches`: rows a
  // real run has already removed as corrupt by then (a dry run leaves them in place), passed over here.
  Status gc_find_locked(const GcOptions& options, const std::set<int64_t>& gone_plans,
                        const std::set<int64_t>& gone_caches, GcGarbage* out);
  // gc_find_locked's kernel cache part (stale and old caches; kernel_caches.cc).
  Status gc_find_kernel_caches_locked(const GcOptions& options, const std::set<int64_t>& gone, GcGarbage* out);
  // Moves the row with these stored key and checksum column values to quarantine, unless another process
  // replaced it meanwhile (its checksum column then differs). Logs. No-op for a read-only store.
  void quarantine_row(const std::string& structure_sig, const std::string& shape_key,
                      const std::string& fingerprint_key, const std::string& stored_checksum,
                      const std::string& reason);

  std::string path_;
  sqlite3* db_ = nullptr;
  bool read_only_ = false;
  mutable std::mutex mu_;  // one connection, shared by threads: calls are serialized
  StoreCounters counters_;
};

}  // namespace kiln
