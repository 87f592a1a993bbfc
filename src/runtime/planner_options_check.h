// The check Planner::create makes of its options. Private to the runtime layer.
#pragma once

#include "kiln/runtime/planner_options.h"

namespace kiln::runtime_detail {

// InvalidArgument for options that cannot hold: PromotionTuning bounds out of range, PromotionTuning::store with
// PromoteBy::kTune and no store_path, or split_max_parts outside 2..64.
Status check_planner_options(const PlannerOptions& options);

}  // namespace kiln::runtime_detail
