// kiln/store/plan_lookup.h: what the store's plan reads answer (PlanStore::get, load_all, list) and the
// counters they keep.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/store/env_policy.h"
#include "kiln/store/plan_record.h"

namespace kiln {

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
  // A server store with a local mirror (StoreOpenOptions::mirror_path): lookups the mirror answered because the
  // server could not be reached, calls that found it unreachable, and the last such error ("" once it answers).
  int64_t mirror_hits = 0;
  int64_t unreachable = 0;
  std::string unreachable_error;
};

// A stored plan's key, as change notices name it (PlanStore::changed_plans).
struct StoredPlanKey {
  std::string structure_sig, shape_key, fingerprint_key;
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

}  // namespace kiln
