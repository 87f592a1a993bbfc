// kiln/runtime/plan_bridge.h: the glue between tuning results, the plan store and execution:
// store records for a graph and the fingerprint of a deviceless target.
#pragma once

#include <string>

#include "kiln/core/fingerprint.h"
#include "kiln/graph/graph.h"
#include "kiln/lower/lower.h"
#include "kiln/store/plan_store.h"
#include "kiln/tune/tuner.h"

namespace kiln {

// The fingerprint a plan compiled for `profile` on this machine will carry: the profile's GPU fields plus
// this build's cuDNN, frontend and CUDA versions. The driver requirement is the CUDA runtime's major
// (a CUDA 13 runtime needs a 13.x driver); no device UUID or release.
EnvFingerprint fingerprint_for_profile(const DeviceProfile& profile);

// A store record for a tuned graph (winner plan + statistics + runner-up + numerics verdict).
StatusOr<PlanRecord> record_from_tuning(const GraphSignature& sig, const EnvFingerprint& env, const TuneResult& tr);
// A store record for a heuristic (untuned) plan.
StatusOr<PlanRecord> record_from_plan(const GraphSignature& sig, const EnvFingerprint& env, const LoweredGraph& plan);

}  // namespace kiln
