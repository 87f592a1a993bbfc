// kiln/store/winner_change.h: the winner changes a store keeps (docs/fleet.md "Winner changes"). Each time a
// tuned plan replaces a stored tuned plan of another configuration for the same key and environment, put()
// keeps the change beside it, in the same transaction: across a fleet, which key's winner flipped, when, from
// what to what, and who tuned each. A record stored again with the same configuration is no change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln {

struct WinnerChange {
  std::string structure_sig, shape_key, fingerprint_key;
  std::string from_config, to_config;  // plan identities ("eng4_k24=2")
  double from_median_ms = 0, to_median_ms = 0;
  std::string from_tuned_by, to_tuned_by;  // user@host of each
  int64_t changed_at = 0;                  // unix seconds
};

// The log of winner changes (PlanStore implements it).
class WinnerChangeLog {
 public:
  // Every change kept, oldest first.
  virtual StatusOr<std::vector<WinnerChange>> winner_changes() = 0;

 protected:
  WinnerChangeLog() = default;
  ~WinnerChangeLog() = default;
};

}  // namespace kiln
