// What a Planner reports: its counters (PlannerStats), a preload's report, and the counters its captured
// sequences add to (GraphCounters).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "kiln/runtime/plan_types.h"

namespace kiln {

// What the CUDA graph sequences made from one Planner (kiln/capture/capture.h) did, summed over all of them. Each
// sequence holds the counters (shared: a sequence may outlive its Planner) and adds to them as it goes.
struct GraphCounters {
  std::atomic<int64_t> captures{0}, instantiations{0}, replays{0}, stream_runs{0}, updates{0}, update_refusals{0},
      reinstantiations{0};
};

struct PreloadReport {
  int loaded = 0;  // plans loaded into memory
  int warmed = 0;  // of those, run once (warm)
  // With warm and padded stopgaps: a padded plan (a shape one below a representative) ran once, so that the
  // process's first new shape does not pay the padded path's first use (its copies at their sizes).
  bool padded_warmed = false;
  int failed = 0;            // records that did not load or warm (skipped)
  std::string last_failure;  // "tokens=512: ...", the last of them
  double ms = 0;
};

struct PlannerStats {
  int64_t served[kPlanSourceCount] = {};  // obtain() calls answered by each source
  int64_t builds = 0;                     // plans made (store loads and builds), not hits
  int64_t failures = 0;                   // obtain() calls that returned an error
  int64_t cached = 0;                     // plans held in memory
  int64_t stopgaps = 0;                   // of those, stopgaps (split, padded or dynamic) not yet promoted
  int64_t promotions = 0;                 // stopgaps replaced by their static plan
  int64_t promotions_tuned = 0;           // of those, by a tune of the shape (PromoteBy::kTune)
  int64_t promotion_failures = 0;         // static builds that failed (the stopgap stays)
  int64_t first_use_checks = 0;           // plans run and checked before their first use (FirstUse::kVerify)
  int64_t first_use_refused = 0;          // obtain() calls refused because the plan failed that check
  int64_t heuristic_fall_throughs = 0;    // heuristic plans that failed it, replaced by a later configuration
  int64_t first_use_rollbacks = 0;        // stored plans that failed it, the store rolled back to the previous plan
  int64_t shadow_trials = 0;              // keys whose plan in shadow this Planner runs beside the active one
  int64_t shadow_samples = 0;             // samples judged (both plans run on one request, compared, timed)
  int64_t shadow_disagreements = 0;       // of those, where the outputs disagreed (or the shadow plan failed)
  int64_t shadow_promotions = 0;          // shadow plans this Planner promoted in the store
  int64_t shadow_rejections = 0;          // shadow plans this Planner rejected in the store
  int64_t shadow_unrecorded = 0;          // verdicts the store did not take (another host decided first)
  std::string last_first_use_failure;     // the last plan that failed it, and the gate's summary
  std::string last_promotion_failure;     // why the last one failed
  std::string last_tune_fallback;         // PromoteBy::kTune: why the last tune gave no plan (a build replaced it)
  std::string last_tune_note;             // PromoteBy::kTune: the last tuned winner's note (not stored: why)
  int64_t kernel_caches_loaded = 0;       // structures whose dynamic-shape kernel cache came from the store
  int64_t kernel_caches_saved = 0;        // kernel caches written to the store (save_kernel_caches)
  std::string last_kernel_cache_note;     // the last kept cache that did not load or was not written, and why
  int64_t store_notices = 0;              // a server store's notices of plans stored elsewhere, acted on
  int64_t store_mirror_hits = 0;          // a server store: lookups its local mirror answered (server unreachable)
  std::string store_unreachable;          // that server's last error, "" while it answers
  // Summed over this Planner's captured sequences (GraphCounters).
  int64_t graph_captures = 0, graph_instantiations = 0, graph_replays = 0, graph_stream_runs = 0, graph_updates = 0,
          graph_update_refusals = 0, graph_reinstantiations = 0;
  // "memory 120, store 3, dynamic 2, bucket 0, heuristics 1, padded 4; 10 built, 0 failed, 10 held; 0 stopgaps,
  // 6 promoted" (", 4 by tuning" where promotions tuned; the last tune that fell back, after it),
  // then, once a captured sequence did anything, "; graphs: 2 captures, 1 instantiation, 100 replays, 0 stream
  // runs, 1 update, 0 refused, 0 re-instantiations".
  std::string text() const;
};

}  // namespace kiln
