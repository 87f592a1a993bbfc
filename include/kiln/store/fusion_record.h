// kiln/store/fusion_record.h: a stored decision that a graph's key runs unfused (docs/store.md "Fusion
// decisions"). `kiln tune` times the unfused chain of a graph's parts against the fused plan (kiln/tune/unfused.h);
// where the chain wins (or the policy asks for it), the parts' winners are stored under their own signatures
// and one FusionRecord says so, and kiln::Planner then serves that chain for the key instead of the fused
// plan (docs/runtime.md "Fused or unfused, in service"). No record: the fused plan serves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/store/env_policy.h"
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"
#include <optional>

namespace kiln {

// One part of the chain, by its own key in the store.
struct FusionPartRef {
  std::string name;  // "<graph>/<node>" (kiln/graph/decompose.h)
  std::string structure_sig;
  std::string shape_key;
  bool operator==(const FusionPartRef& o) const {
    return name == o.name && structure_sig == o.structure_sig && shape_key == o.shape_key;
  }
};

// One row of the store's fusion_decisions table: at this key, in this environment, the unfused chain of
// `parts` (run in this order, intermediates stored as `materialized`) is what serves.
struct FusionRecord {
  std::string structure_sig;
  std::string shape_key;
  EnvFingerprint fingerprint;        // the environment the chain was measured in
  std::string materialized;          // dtype_name() of the intermediates between parts ("fp16")
  std::vector<FusionPartRef> parts;  // in run order; at least two
  std::string policy;                // fusion_policy_name() of the policy that decided ("faster", ...)
  double fused_ms = 0;               // the fused winner's median (0: no fused plan was available)
  double unfused_ms = 0;             // the chain's median
  std::string explanation;           // decide_fusion's one line
  // put_fusion_record() fills these.
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over every other field (docs/store.md)

  std::string fingerprint_key() const { return kiln::fingerprint_key(fingerprint); }
};

std::string compute_fusion_record_checksum(const FusionRecord& r);
// The parts as the table stores them: [{"name":..,"structure_sig":..,"shape_key":..}, ...].
std::string fusion_parts_to_json(const std::vector<FusionPartRef>& parts);
// InvalidArgument for text that is not such a list.
StatusOr<std::vector<FusionPartRef>> fusion_parts_from_json(const std::string& text);

// The fusion decisions a store keeps (PlanStore implements it).
class FusionRecordTable {
 public:
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

 protected:
  FusionRecordTable() = default;
  ~FusionRecordTable() = default;
};

}  // namespace kiln
