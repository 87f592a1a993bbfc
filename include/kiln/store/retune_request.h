// kiln/store/retune_request.h: the re-tune queue's rows (docs/store.md "The re-tune queue"). A process that
// could not use a tuned plan (miss, stale or corrupt record) under the policy kHeuristicsAndQueue asks for one
// here; `kiln plans retune` (retune_queued() in kiln/runtime/retune.h) drains it on a machine of that
// environment. One row per (structure_sig, shape_key, fingerprint_key of the environment that wants the plan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/fingerprint.h"

namespace kiln {

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

}  // namespace kiln
