// Re-tuning what the plan store could not serve: queueing (obtain_plan under kHeuristicsAndQueue), the
// graph specs kept beside plans, and draining the queue (`kiln plans retune`).
#include "kiln/runtime/retune.h"

#include <chrono>
#include <cstdio>

#include "kiln/core/log.h"
#include "kiln/core/strings.h"
#include "kiln/lower/environment.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string key_name(const std::string& sig, const std::string& shape) {
  return sig.substr(0, 12) + (shape.empty() ? "" : "/" + shape);
}

// The candidate budget's priors for a queued key (kiln/tune/tune_policy.h rank_prior_winners): the tuned winners the
// store holds for its structure in this environment; none when it cannot say.
std::vector<std::string> stored_winners(PlanStore& store, const RetuneQueueEntry& e, const EnvFingerprint& current) {
  ListFilter f;
  f.structure_prefix = e.structure_sig;
  f.fingerprint_key = fingerprint_key(current);
  f.tuned_only = true;
  StatusOr<std::vector<PlanSummary>> rows = store.list(f);
  std::vector<std::pair<std::string, std::string>> winners;
  if (rows.is_ok())
    for (const PlanSummary& r : *rows)
      if (r.problem.empty() && r.record.structure_sig == e.structure_sig)
        winners.emplace_back(r.record.shape_key, plan_identity(r.record.engine_id, r.record.knobs));
  return rank_prior_winners(winners, e.shape_key);
}

// Tunes one queued row whose environment is this one. Fills the row's outcome.
void retune_row(PlanStore& store, const EnvFingerprint& current, const TuneOptions& to, RolloutPolicy rollout,
                RetuneRowReport& row) {
  const RetuneQueueEntry& e = row.entry;
  auto fail = [&](const std::string& why) {
    row.outcome = RetuneOutcome::kFailed;
    row.message = why;
  };
  StatusOr<Graph> g = parse_spec_string(e.spec_json, "queued graph '" + e.graph_name + "'");
  if (!g.is_ok()) return fail("its spec does not parse: " + g.status().message());
  StatusOr<GraphSignature> sig = compute_signature(*g);
  if (!sig.is_ok()) return fail("no signature: " + sig.status().message());
  if (sig->structure != e.structure_sig || sig->shape_key != e.shape_key)
    return fail("its spec gives " + key_name(sig->structure, sig->shape_key) + ", not the queued " +
                key_name(e.structure_sig, e.shape_key) + " (queued by another Kiln version?)");

  // Someone may have tuned it since it was queued (kiln tune, another retune).
  StatusOr<LookupResult> look = store.get(e.structure_sig, e.shape_key, current);
  if (look.is_ok() && look->runnable() && look->record->tuned) {
    row.outcome = RetuneOutcome::kAlreadyTuned;
    row.winner = plan_identity(look->record->engine_id, look->record->knobs);
    row.median_ms = look->record->stats.median_ms;
    row.verdict = look->record->numerics.verdict;
    row.message = "the store already has a tuned plan for this environment";
    Status s = remember_graph_spec(store, *g);
    if (!s.is_ok())
      KILN_LOG(kWarn, "graph spec of " << key_name(e.structure_sig, e.shape_key) << " not kept: " << s.message());
    StatusOr<bool> removed = store.remove_from_retune_queue(e.structure_sig, e.shape_key, e.fingerprint_key);
    if (!removed.is_ok()) row.message += "; the queue row could not be removed: " + removed.status().message();
    return;
  }

  // The candidate budget starts from what won at the structure's other shapes in this environment.
  TuneOptions with_priors = to;
  if (!to.budget.exhaustive && to.budget.prior.empty()) with_priors.budget.prior = stored_winners(store, e, current);
  StatusOr<TuneResult> tr = tune_graph(*g, with_priors);
  if (!tr.is_ok()) return fail("tuning failed: " + tr.status().message());
  if (tr->cancelled) {
    row.outcome = RetuneOutcome::kNotReached;
    row.message = "interrupted while tuning";
    return;
  }
  if (!tr->winner) {
    std::string why = "no correct candidate";
    if (tr->budget_exhausted) why += " within the time budget";
    return fail(why + " (" + std::to_string(tr->candidates.size()) + " candidates)");
  }
  StatusOr<PlanRecord> rec = record_from_tuning(*sig, current, *tr);
  if (!rec.is_ok()) return fail("no record: " + rec.status().message());
  rec->tuned = tuning_is_complete(*tr);
  StatusOr<KeptPlan> kept = keep_plan(store, *g, *rec, rollout, "re-tuned");
  if (!kept.is_ok()) return fail("the tuned plan could not be stored: " + kept.status().message());
  row.outcome = RetuneOutcome::kTuned;
  row.winner = tr->winner_config.identity();
  row.median_ms = tr->candidates[*tr->winner].median_ms;
  row.verdict = rec->numerics.verdict;
  row.message = tr->winner_check;
  row.state = kept->state;
  // A tuning the per-graph budget cut short is stored untuned and its request stays queued (keep_plan).
  if (!rec->tuned) row.message += "; cut short by the time budget: stored untuned, still queued";
  if (kept->state != PlanState::kActive)
    row.message += std::string("; held back (--rollout ") + rollout_policy_name(rollout) + "): stored as " +
                   plan_state_name(kept->state) + ", the active plan still serves";
  for (const std::string& w : kept->warnings) {
    KILN_LOG(kWarn, key_name(e.structure_sig, e.shape_key) << ": " << w);
    row.message += "; " + w;
  }
}

}  // namespace

std::string retune_reason(const LookupResult& look) {
  std::string r = std::string("store ") + lookup_outcome_name(look.outcome);
  if (look.outcome == LookupOutcome::kHit) r += ", but the plan did not load";
  if (!look.reasons.empty()) r += ": " + join(look.reasons, "; ");
  return r;
}

StatusOr<RetuneRequest> retune_request_for(const Graph& graph, const EnvFingerprint& env, const std::string& reason) {
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(graph));
  KILN_ASSIGN_OR_RETURN(std::string spec, graph_to_spec_json(graph));
  RetuneRequest req;
  req.structure_sig = sig.structure;
  req.shape_key = sig.shape_key;
  req.fingerprint = env;
  req.graph_name = graph.name;
  req.spec_json = std::move(spec);
  req.reason = reason;
  return req;
}

StatusOr<RetuneQueueEntry> queue_retune(PlanStore& store, const Graph& graph, const EnvFingerprint& env,
                                        const std::string& reason) {
  KILN_ASSIGN_OR_RETURN(RetuneRequest req, retune_request_for(graph, env, reason));
  return store.enqueue_retune(req);
}

StatusOr<EnvFingerprint> this_machine_environment(const std::optional<EnvFingerprint>& given,
                                                  const std::string& needs) {
  if (given) return *given;
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok()) return unavailable(needs + ", and there is none: " + env.device_status.message());
  return env.fingerprint;
}

TuneOptions tune_options_for(const RetuneNowOptions& o) {
  TuneOptions to;
  to.time_budget_s = o.time_budget_s;
  to.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  to.top_k = o.top_k;
  to.seed = o.seed;
  return to;
}

const char* retune_outcome_name(RetuneOutcome o) { return enum_name(kRetuneOutcomeNames, o); }

RetuneRowReport retune_one(PlanStore& store, const EnvFingerprint& current, RetuneQueueEntry entry,
                           const TuneOptions& to, RolloutPolicy rollout) {
  RetuneRowReport row;
  row.entry = std::move(entry);
  auto t0 = Clock::now();
  if (row.entry.fingerprint_key != fingerprint_key(current)) {
    row.outcome = RetuneOutcome::kOtherEnvironment;
    row.message = "queued for environment " + row.entry.fingerprint_key.substr(0, 12) + ", not this one";
  } else {
    retune_row(store, current, to, rollout, row);
  }
  row.seconds = seconds_since(t0);
  return row;
}

StatusOr<RetuneReport> retune_queued(PlanStore& store, const RetuneOptions& options) {
  if (store.read_only())
    return failed_precondition("plan store " + store.path() + " was opened read-only: cannot store re-tuned plans");
  KILN_ASSIGN_OR_RETURN(EnvFingerprint current,
                        this_machine_environment(options.current, "re-tuning needs this machine's GPU"));
  const std::string here = fingerprint_key(current);
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queue, store.list_retune_queue());

  RetuneReport rep;
  auto t0 = Clock::now();
  for (RetuneQueueEntry& e : queue) {
    RetuneRowReport row;
    row.entry = std::move(e);
    auto tr0 = Clock::now();
    double left_s = options.budget_s > 0 ? options.budget_s - seconds_since(t0) : 0;
    bool cancelled = options.cancel && options.cancel->load();
    if (row.entry.fingerprint_key != here) {
      row.outcome = RetuneOutcome::kOtherEnvironment;
      const EnvFingerprint& f = row.entry.fingerprint;
      row.message = "queued by " + (f.gpu_name.empty() ? std::string("an unreadable environment") : f.gpu_name) +
                    (f.gpu_name.empty() ? "" : ", cuDNN " + EnvFingerprint::cudnn_version_string(f.cudnn_version)) +
                    " (" + row.entry.fingerprint_key.substr(0, 12) + "), not this environment (" + here.substr(0, 12) +
                    ")";
      if (!row.entry.problem.empty()) row.message += ": " + row.entry.problem;
    } else if (cancelled || rep.cancelled) {
      rep.cancelled = true;
      row.message = "interrupted";
    } else if (options.budget_s > 0 && left_s <= 0) {
      rep.budget_exhausted = true;
      row.message = "the time budget ran out";
    } else {
      TuneOptions to = options.tune;
      if (options.cancel) to.cancel = options.cancel;
      if (options.budget_s > 0 && (to.time_budget_s <= 0 || to.time_budget_s > left_s)) to.time_budget_s = left_s;
      retune_row(store, current, to, options.rollout, row);
      if (row.outcome == RetuneOutcome::kNotReached) rep.cancelled = true;
    }
    row.seconds = seconds_since(tr0);
    switch (row.outcome) {
      case RetuneOutcome::kTuned: ++rep.tuned; break;
      case RetuneOutcome::kAlreadyTuned: ++rep.already_tuned; break;
      case RetuneOutcome::kFailed: ++rep.failed; break;
      case RetuneOutcome::kOtherEnvironment: ++rep.other_environment; break;
      case RetuneOutcome::kNotReached: ++rep.not_reached; break;
    }
    KILN_LOG(kInfo, "re-tune " << key_name(row.entry.structure_sig, row.entry.shape_key) << " ('"
                               << row.entry.graph_name << "'): " << retune_outcome_name(row.outcome)
                               << (row.message.empty() ? "" : ": " + row.message));
    if (options.on_row) options.on_row(row);
    rep.rows.push_back(std::move(row));
  }
  return rep;
}

}  // namespace kiln
