#include "kiln/lower/environment.h"
#include "kiln/runtime/plan_bridge.h"

namespace kiln {

EnvFingerprint fingerprint_for_profile(const DeviceProfile& profile) {
  EnvFingerprint f = collect_environment().fingerprint;  // this build's library versions
  f.gpu_name = profile.gpu_name;
  f.sm_version = profile.sm_version;
  f.sm_count = profile.sm_count;
  f.device_uuid.clear();
  f.driver_release.clear();
  f.driver_version = (f.cuda_runtime_version / 1000) * 1000;
  f.has_device = false;
  return f;
}

StatusOr<PlanRecord> record_from_tuning(const GraphSignature& sig, const EnvFingerprint& env, const TuneResult& tr) {
  if (!tr.winner) return failed_precondition("tuning of '" + tr.graph_name + "' found no correct candidate to store");
  const CandidateResult& w = tr.candidates[*tr.winner];
  PlanRecord r;
  r.structure_sig = sig.structure;
  r.shape_key = sig.shape_key;
  r.fingerprint = env;
  r.plan_bytes.assign(tr.winner_plan.begin(), tr.winner_plan.end());
  r.engine_id = w.config.engine_id;
  r.knobs = w.config.knobs;
  r.workspace_bytes = w.workspace_bytes;
  r.tuned = true;
  r.stats.median_ms = w.median_ms;
  r.stats.min_ms = w.min_ms;
  r.stats.max_ms = w.max_ms;
  r.stats.noise_rel = w.rel_error;
  r.stats.samples = static_cast<int64_t>(w.samples);
  // Runner-up: the next fastest correct candidate.
  const CandidateResult* up = nullptr;
  for (size_t i = 0; i < tr.candidates.size(); ++i) {
    const auto& c = tr.candidates[i];
    if (i == *tr.winner || c.disposition != Disposition::kPassed || !c.timed()) continue;
    if (!up || c.median_ms < up->median_ms) up = &c;
  }
  if (up) {
    r.stats.runner_up_engine = up->config.engine_id;
    r.stats.runner_up_knobs = up->config.knobs;
    r.stats.runner_up_median_ms = up->median_ms;
  }
  r.numerics.verdict = w.disposition;
  return r;
}

StatusOr<PlanRecord> record_from_plan(const GraphSignature& sig, const EnvFingerprint& env, const LoweredGraph& plan) {
  PlanRecord r;
  r.structure_sig = sig.structure;
  r.shape_key = sig.shape_key;
  r.fingerprint = env;
  KILN_ASSIGN_OR_RETURN(auto bytes, plan.serialize());
  r.plan_bytes.assign(bytes.begin(), bytes.end());
  r.engine_id = plan.config().engine_id;
  r.knobs = plan.config().knobs;
  r.workspace_bytes = plan.workspace_size();
  r.tuned = false;
  return r;
}

}  // namespace kiln
