// kiln/store/store_maintenance.h: the options and reports of the store's upkeep: gc, verify, the quarantine,
// and bundles (export and import; docs/store.md "Maintenance", "Bundles").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/kernel_cache_record.h"
#include "kiln/store/plan_lookup.h"
#include "kiln/store/plan_record.h"

namespace kiln {

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
  // Plans in states other than active (kiln/store/plan_rollout.h): each row's columns, checksum, state and that its
  // configuration column is its record's. Reported, never moved: a damaged row is never activated (promote and
  // rollback refuse it by name), and `kiln plans rm` removes it with its key.
  int64_t rollout_checked = 0;
  int64_t rollout_ok = 0;
  std::vector<VerifyProblem> rollout_problems;  // reason: "<config> (<state>): <what is wrong>"
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
  int64_t imported = 0;       // new keys
  int64_t replaced = 0;       // existing older records replaced
  int64_t kept_newer = 0;     // existing records at least as new kept
  int64_t unchanged = 0;      // identical record already present
  int64_t skipped_stale = 0;  // fingerprint failed the policy
  // The very plan (same checksum) was rejected or retired for its key here (a rollback, a promotion of another):
  // an import does not undo that decision (docs/rollout.md).
  int64_t skipped_decided = 0;
  int64_t graph_specs = 0;     // graph specs added (a spec already stored for the key is kept)
  int64_t fusion_records = 0;  // fusion decisions added or replaced by newer ones (stale ones skipped)
};

}  // namespace kiln
