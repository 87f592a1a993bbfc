// kiln/store/plan_record.h: one stored plan (docs/store.md "Records"): its key, the opaque plan bytes, the engine
// that built them, how it was timed and checked, and its provenance and checksum.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/core/disposition.h"
#include "kiln/core/engine_config.h"
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"

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

}  // namespace kiln
