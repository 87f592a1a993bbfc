// LookupOutcome's names (kiln/store/plan_lookup.h).
#include "kiln/store/plan_lookup.h"

namespace kiln {

const char* lookup_outcome_name(LookupOutcome o) {
  switch (o) {
    case LookupOutcome::kHit: return "hit";
    case LookupOutcome::kMiss: return "miss";
    case LookupOutcome::kStale: return "stale";
    case LookupOutcome::kCorrupt: return "corrupt";
  }
  return "?";
}

}  // namespace kiln
