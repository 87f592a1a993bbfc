// The workshop's tune, compile and retune_queued (kiln/runtime/workshop.h, planner_jobs.h): the coordination `kiln tune`,
// `kiln compile` and `kiln plans retune` did each in its own way, in one place, over the PlanBackend seam.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/graph/decompose.h"
#include "kiln/lower/cudnn_limits.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/runtime/segments.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "runtime/planner_jobs_internal.h"

namespace kiln {

const char* compile_outcome_name(CompileOutcome o) { return enum_name(kCompileOutcomeNames, o); }

namespace planner_jobs {
namespace {

using Clock = std::chrono::steady_clock;

Status needs_device(const PlannerOptions& o, const char* job) {
  if (o.target)
    return failed_precondition(std::string("this Planner is deviceless (PlannerOptions::target: ") +
                               o.target->gpu_name + "): it compiles plans; " + job + " needs a GPU");
  return Status::ok();
}

// The store's record for exactly this key, runnable in `env` (none: nullopt).
StatusOr<std::optional<PlanRecord>> stored_record(PlanBackend& b, const GraphSignature& sig, const EnvFingerprint& env,
                                                  const EnvPolicy& policy) {
  std::optional<PlanRecord> out;
  KILN_RETURN_IF_ERROR(b.with_writable_store([&](PlanStore& s) -> Status {
    KILN_ASSIGN_OR_RETURN(LookupResult look, s.get(sig.structure, sig.shape_key, env, policy));
    if (look.runnable() && look.record) out = *look.record;
    return Status::ok();
  }));
  return out;
}

}  // namespace

// The shapes the backend's store says were tuned for `sig`'s structure, as (shape key, winner) for the candidate
// budget's priors (rank_prior_winners); none when it cannot say.
std::vector<std::pair<std::string, std::string>> tuned_winners(PlanBackend& b, const GraphSignature& sig) {
  std::vector<std::pair<std::string, std::string>> out;
  StatusOr<std::vector<TunedShape>> shapes = b.tuned_shapes(sig);
  if (shapes.is_ok())
    for (const TunedShape& t : *shapes) out.emplace_back(t.shape_key, t.config.identity());
  return out;
}

namespace {

StatusOr<KeptPlan> keep(PlanBackend& b, const Graph& graph, const PlanRecord& rec, const Forget& forget,
                        RolloutPolicy rollout = RolloutPolicy::kImmediate) {
  KeptPlan kept;
  KILN_RETURN_IF_ERROR(b.with_writable_store([&](PlanStore& s) -> Status {
    KILN_ASSIGN_OR_RETURN(kept, keep_plan(s, graph, rec, rollout));
    return Status::ok();
  }));
  GraphSignature sig;
  sig.structure = rec.structure_sig;
  sig.shape_key = rec.shape_key;
  if (forget) forget(sig);
  return kept;
}

// The chain decided on (TunedGraph::kept_fusion): each part's winner kept under its own signature, then the
// decision. The parts are the graph partitioned again as the chosen decomposition groups it (UnfusedResult::groups;
// each node alone where empty: same graph, same dtype), checked against the tuned parts' signatures.
Status keep_unfused(PlanBackend& b, const Graph& g, const GraphSignature& sig, const EnvFingerprint& env,
                    const TunedGraph& tuned, FusionPolicy policy, const Forget& forget, TunedGraph* out) {
  const UnfusedResult& u = *tuned.unfused;
  KILN_ASSIGN_OR_RETURN(std::vector<GraphPart> parts, u.groups.empty() ? decompose_graph(g, u.materialized)
                                                                       : partition_graph(g, u.groups, u.materialized));
  if (parts.size() != u.parts.size())
    return internal_error("the graph decomposed into " + std::to_string(parts.size()) + " parts, " +
                          std::to_string(u.parts.size()) + " were tuned");
  FusionRecord fr;
  fr.structure_sig = sig.structure;
  fr.shape_key = sig.shape_key;
  fr.fingerprint = env;
  fr.materialized = dtype_name(u.materialized);
  fr.policy = fusion_policy_name(policy);
  const CandidateResult* fused = tuned.result.winner ? &tuned.result.candidates[*tuned.result.winner] : nullptr;
  fr.fused_ms = fused && fused->timed() ? fused->median_ms : 0.0;
  fr.unfused_ms = u.chain.median_ms;
  fr.explanation = (*tuned.fusion)->explanation;
  std::vector<KeptPlan> kept;
  for (size_t i = 0; i < parts.size(); ++i) {
    const UnfusedPartResult& pr = u.parts[i];
    KILN_ASSIGN_OR_RETURN(GraphSignature psig, compute_signature(parts[i].graph));
    if (psig.structure != pr.structure_sig || psig.shape_key != pr.shape_key)
      return internal_error("part '" + pr.name + "': its signature differs from the tuned part's");
    KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_tuning(psig, env, pr.tune));
    rec.tuned = tuning_is_complete(pr.tune);
    KILN_ASSIGN_OR_RETURN(KeptPlan k, keep(b, parts[i].graph, rec, forget));
    kept.push_back(std::move(k));
    fr.parts.push_back({pr.name, psig.structure, psig.shape_key});
  }
  FusionRecord stored;
  KILN_RETURN_IF_ERROR(b.with_writable_store([&](PlanStore& s) -> Status {
    KILN_ASSIGN_OR_RETURN(stored, s.put_fusion_record(fr));
    return Status::ok();
  }));
  if (forget) forget(sig);
  out->kept_fusion = std::move(stored);
  out->kept_parts = std::move(kept);
  return Status::ok();
}

}  // namespace

StatusOr<TunedGraph> tune_and_store(PlanBackend& b, const PlannerOptions& o, const Graph& g, const TuneJob& job,
                                    const Forget& forget) {
  KILN_RETURN_IF_ERROR(needs_device(o, "tune_and_store"));
  const bool use_store = o.store_writable && !o.store_path.empty();
  if ((job.store || job.untuned_only) && !use_store)
    return failed_precondition(std::string("tune_and_store with TuneJob::") + (job.store ? "store" : "untuned_only") +
                               " needs the Planner's store opened for writing (PlannerOptions::store_path and "
                               "store_writable)");
  const auto t0 = Clock::now();
  TunedGraph out;
  KILN_ASSIGN_OR_RETURN(out.signature, compute_signature(g));
  const GraphSignature& sig = out.signature;
  KILN_ASSIGN_OR_RETURN(out.environment, b.environment());
  const EnvFingerprint& env = out.environment;
  TuneOptions to = job.tune;
  to.incumbent.reset();
  if (use_store) {
    KILN_ASSIGN_OR_RETURN(std::optional<PlanRecord> prev, stored_record(b, sig, env, o.policy));
    // The incumbent is the winner measured in this environment (its key): a record a relaxed policy lets run here
    // was timed elsewhere, so its time says nothing against a challenger timed here.
    if (prev && prev->tuned && prev->fingerprint_key() == fingerprint_key(env)) {
      if (job.untuned_only) {
        out.skipped = true;
        return out;
      }
      to.incumbent =
          Incumbent{plan_identity(prev->engine_id, prev->knobs), prev->stats.median_ms, prev->stats.noise_rel};
    }
  }
  // The candidate budget ranks first the incumbent (timed again, so that the incumbent rule can keep it: a budgeted
  // re-tune must not replace an exhaustive tune's winner with a slower one it never timed), then what won at other
  // shapes of this structure (the store's tuned shapes).
  if (!to.budget.exhaustive) {
    std::vector<std::string> given = std::move(to.budget.prior);  // a caller's own come after the store's
    to.budget.prior =
        rank_prior_winners(tuned_winners(b, sig), sig.shape_key, to.incumbent ? to.incumbent->identity : "");
    for (std::string& id : given)
      if (std::find(to.budget.prior.begin(), to.budget.prior.end(), id) == to.budget.prior.end())
        to.budget.prior.push_back(std::move(id));
  }
  if (job.deadline) {
    const double left = std::chrono::duration<double>(*job.deadline - Clock::now()).count();
    if (left <= 0) {
      out.budget_spent = true;
      return out;
    }
    if (to.time_budget_s <= 0 || to.time_budget_s > left) to.time_budget_s = left;
  }
  KILN_ASSIGN_OR_RETURN(out.result, job.tuner ? job.tuner(g, to) : tune_graph(g, to));
  TuneResult& tr = out.result;

  // The unfused alternative gets what the fused tuning left of the budget.
  const double left_s = to.time_budget_s - std::chrono::duration<double>(Clock::now() - t0).count();
  const bool budget_spent = to.time_budget_s > 0 && left_s <= 0;
  if (job.unfused && g.nodes.size() > 1 && !to.pin && g.pin.empty() && tuning_is_complete(tr) && !budget_spent) {
    UnfusedOptions uo;
    uo.tune = to;
    uo.tune.progress = nullptr;
    uo.tune.incumbent.reset();
    if (to.time_budget_s > 0) uo.tune.time_budget_s = left_s;
    uo.materialized = job.materialized;
    uo.evaluation = tr.evaluation;  // the same inputs and reference, still on the device
    // Decompositions that cannot beat the fused winner are skipped only where the faster side is chosen:
    // always_unfused stores the fastest chain, however it compares.
    if (job.fusion_policy == FusionPolicy::kFaster && tr.winner && tr.candidates[*tr.winner].timed())
      uo.fused_ms = tr.candidates[*tr.winner].median_ms;
    if (job.on_note) job.on_note("timing the unfused alternatives (" + std::to_string(g.nodes.size()) + " nodes)");
    KILN_ASSIGN_OR_RETURN(out.unfused, job.unfused_tuner ? job.unfused_tuner(g, uo) : tune_unfused(g, uo));
    const CandidateResult* fused = tr.winner ? &tr.candidates[*tr.winner] : nullptr;
    out.fusion =
        decide_fusion(fused ? fused_side(*fused) : FusionSide{}, unfused_chain_side(*out.unfused), job.fusion_policy);
  }
  tr.evaluation.reset();  // frees the graph's inputs and reference on the device

  if (tr.winner && job.store) {
    KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_tuning(sig, env, tr));
    rec.tuned = tuning_is_complete(tr);
    StatusOr<KeptPlan> kept = keep(b, g, rec, forget, job.rollout);
    if (kept.is_ok()) out.kept = std::move(kept).value();
    else out.store_status = kept.status();
  }
  // Fused or unfused in service: the decision is stored where the chain won (or the policy asked for it),
  // and removed where this tuning decided for the fused plan. Without a decision (no chain timed), an
  // earlier one stands.
  if (job.store && out.store_status.is_ok() && out.fusion && out.fusion->is_ok()) {
    if (!(*out.fusion)->use_fused) {
      Status st = keep_unfused(b, g, sig, env, out, job.fusion_policy, forget, &out);
      if (!st.is_ok()) out.fusion_status = st.with_context("the unfused chain was not stored (the fused plan serves)");
    } else {
      Status st = b.with_writable_store([&](PlanStore& s) -> Status {
        KILN_ASSIGN_OR_RETURN(int64_t n, s.remove_fusion_record(sig.structure, sig.shape_key, fingerprint_key(env)));
        out.fusion_removed = n > 0;
        return Status::ok();
      });
      if (!st.is_ok()) out.fusion_status = st.with_context("the earlier unfused decision was not removed");
      else if (out.fusion_removed && forget) forget(sig);
    }
  }
  return out;
}

StatusOr<CompiledGraph> compile(PlanBackend& b, const PlannerOptions& o, const Graph& g,
                                const std::optional<EngineConfig>& pin, const Forget& forget) {
  if (!o.target)
    return failed_precondition("compile() is for a deviceless Planner: set PlannerOptions::target to the recorded "
                               "device profile to compile for");
  if (o.store_path.empty()) return failed_precondition("compile() stores its plans: set PlannerOptions::store_path");
  CompiledGraph out;
  // A graph past cuDNN's operations or entrance nodes per graph is compiled as the segments `kiln run` runs it as, each stored
  // under its own signature; a pin names one configuration for one graph, so it cannot apply.
  std::vector<Graph> work;
  if (exceeds_cudnn_graph_limits(g)) {
    out.segmented = check_cudnn_limits(g).message();
    if (pin) {
      out.outcome = CompileOutcome::kFailed;
      out.why = "graph '" + g.name + "' has a \"pin\" but runs as segments (" + out.segmented + "): a pin cannot apply";
      return out;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<GraphPart> parts, graph_segments(g));
    for (GraphPart& p : parts) work.push_back(std::move(p.graph));
  } else {
    work.push_back(g);
  }
  for (const Graph& w : work) {
    CompiledPart part;
    part.graph_name = w.name;
    KILN_ASSIGN_OR_RETURN(part.signature, compute_signature(w));
    PlanRecord rec;
    KILN_RETURN_IF_ERROR(b.compile(w, part.signature, pin, &part, &rec));
    if (part.outcome == CompileOutcome::kCompiled) {
      KILN_ASSIGN_OR_RETURN(KeptPlan kept, keep(b, w, rec, forget));
      part.warnings = kept.warnings;
    }
    if (part.outcome > out.outcome) {
      out.outcome = part.outcome;
      out.why = part.why;
    }
    out.parts.push_back(std::move(part));
  }
  return out;
}

StatusOr<RetuneReport> retune_queued(PlanBackend& b, const PlannerOptions& o, const RetuneOptions& retune,
                                     const Forget& forget) {
  KILN_RETURN_IF_ERROR(needs_device(o, "retune_queued"));
  if (!o.store_writable || o.store_path.empty())
    return failed_precondition("retune_queued needs the Planner's store opened for writing (PlannerOptions::store_path "
                               "and store_writable)");
  KILN_ASSIGN_OR_RETURN(EnvFingerprint env, b.environment());
  RetuneOptions ro = retune;
  ro.current = env;
  RetuneReport report;
  KILN_RETURN_IF_ERROR(b.with_writable_store([&](PlanStore& s) -> Status {
    KILN_ASSIGN_OR_RETURN(report, kiln::retune_queued(s, ro));
    return Status::ok();
  }));
  if (forget)
    for (const RetuneRowReport& r : report.rows)
      if (r.outcome == RetuneOutcome::kTuned) {
        GraphSignature sig;
        sig.structure = r.entry.structure_sig;
        sig.shape_key = r.entry.shape_key;
        forget(sig);
      }
  return report;
}

}  // namespace planner_jobs
}  // namespace kiln
