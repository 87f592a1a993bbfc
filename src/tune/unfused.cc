// tune_unfused: tune each decomposition's parts, then time their winners back to back (kiln/tune/unfused.h).
#include "kiln/tune/unfused.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "kiln/core/log.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/graph/decompose.h"
#include "kiln/graph/op_cost.h"
#include "kiln/validate/device_io.h"
#include "kiln/tune/plan_chain.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/numerics.h"
#include "tune/evaluation.h"

namespace kiln {
namespace {

std::string fmt_ms(double ms) {
  char b[64];
  std::snprintf(b, sizeof b, "%.4f ms", ms);
  return b;
}

std::string fmt_timing(const CandidateResult& c) {
  if (!c.timed()) return std::string("not timed (") + disposition_name(c.disposition) + ")";
  char b[96];
  std::snprintf(b, sizeof b, "%.4f ms ±%.2f%%%s", c.median_ms, c.rel_error * 100.0, c.throttled ? " THROTTLED" : "");
  return b;
}

}  // namespace

namespace {
// The options a part is tuned with: the whole graph's, less what names the whole graph (its pin, incumbent and the
// candidate budget's priors, another structure's configurations) or its own inputs and hooks.
TuneOptions part_options(const TuneOptions& whole) {
  TuneOptions po = whole;
  po.pin.reset();
  po.incumbent.reset();
  po.budget.prior.clear();
  po.output_hook = nullptr;
  po.progress = nullptr;
  po.inputs_dir.clear();  // a part's inputs are the fused graph's intermediates: random, of their own
  return po;
}

// What one tune_unfused shares across its decompositions: the budget's clock, the parts tuned so far (by signature:
// a part two decompositions share is tuned once), the device, the fused graph's inputs and reference.
struct UnfusedRun {
  UnfusedRun(const Graph& g, const UnfusedOptions& o) : graph(g), options(o), po(part_options(o.tune)) {
    for (const Node& n : g.nodes) heavy.push_back(n.op != OpKind::kPointwise && n.op != OpKind::kReduction);
  }
  const Graph& graph;
  const UnfusedOptions& options;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  TuneOptions po;
  std::map<std::string, UnfusedPartResult> tuned;  // "structure/shape" -> its tuning
  std::map<std::string, std::string> refused;      // "structure/shape" -> why it has no correct, timed plan
  std::shared_ptr<const GraphEvaluation> eval;
  UniqueStream stream;
  UniqueCudnnHandle handle;
  bool stop = false;        // the budget is spent or the tune interrupted: no further decomposition
  std::vector<bool> heavy;  // by node: a GEMM, conv or attention, whose own work bounds a part (chain_lower_bound_ms)

  double left_s() const {
    return options.tune.time_budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  bool budgeted() const { return options.tune.time_budget_s > 0; }
  bool cancelled() const { return options.tune.cancel && options.tune.cancel->load(); }
};

std::string part_key(const GraphSignature& sig) { return sig.structure + "/" + sig.shape_key; }

// Part `p` tuned (or found tuned); null with the reason in *why (and run->stop set where the budget ran out).
StatusOr<const UnfusedPartResult*> tune_part(UnfusedRun* run, const GraphPart& p, std::string* why) {
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(p.graph));
  const std::string key = part_key(sig);
  if (auto it = run->tuned.find(key); it != run->tuned.end()) return &it->second;
  if (auto it = run->refused.find(key); it != run->refused.end()) {
    *why = it->second;
    return nullptr;
  }
  if (run->cancelled()) {
    *why = "interrupted";
    run->stop = true;
    return nullptr;
  }
  if (run->budgeted()) {
    if (run->left_s() <= 0) {
      *why = "time budget reached before part '" + p.graph.name + "'";
      run->stop = true;
      return nullptr;
    }
    run->po.time_budget_s = run->left_s();
  }
  UnfusedPartResult pr;
  pr.name = p.graph.name;
  pr.structure_sig = sig.structure;
  pr.shape_key = sig.shape_key;
  auto tr = tune_graph(p.graph, run->po);
  if (!tr.is_ok() || !tr->winner) {
    if (run->cancelled() || (run->budgeted() && run->left_s() <= 0)) {  // not the part's fault: no more parts
      *why = run->cancelled() ? "interrupted" : "time budget reached while tuning part '" + p.graph.name + "'";
      run->stop = true;
      return nullptr;
    }
    *why =
        "part '" + p.graph.name + "': " + (tr.is_ok() ? std::string("no correct, timed plan") : tr.status().message());
    run->refused[key] = *why;
    return nullptr;
  }
  pr.tune = std::move(tr).value();
  pr.tune.evaluation.reset();  // the part's buffers are not needed any more
  if (run->cancelled()) run->stop = true;
  return &run->tuned.emplace(key, std::move(pr)).first->second;
}

// The chain of `parts`' winners (`results`) on the fused graph's inputs: checked against its reference, then timed,
// into d->chain and `out`'s chain fields. A part's plan that does not load, or a chain that cannot be made of them,
// leaves the decomposition unavailable; the device's errors (running, synchronizing, checking) are returned.
Status time_chain(UnfusedRun* run, std::vector<GraphPart> parts, const std::vector<const UnfusedPartResult*>& results,
                  DecompositionResult* d, UnfusedResult* out) {
  std::vector<LoweredGraph> plans;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto plan = LoweredGraph::deserialize(parts[i].graph, run->handle.get(), results[i]->tune.winner_plan);
    if (!plan.is_ok()) {
      d->unavailable = "part '" + parts[i].graph.name + "': its winner does not load: " + plan.status().message();
      return Status::ok();
    }
    plans.push_back(std::move(plan).value());
  }
  auto made = PlanChain::create(run->graph, std::move(parts), std::move(plans), run->eval->buffers);
  if (!made.is_ok()) {
    d->unavailable = "the chain: " + made.status().message();
    return Status::ok();
  }
  PlanChain& chain = *made;
  out->intermediate_bytes = chain.intermediate_bytes();
  auto run_chain = [&](cudaStream_t) { return chain.run(run->handle.get()); };
  // Numerics of the chain against the fused graph's reference (intermediates stored in the materialized dtype),
  // then one timing of the whole chain.
  const OpCost cost = graph_cost(run->graph);
  d->chain.flops = cost.flops;
  d->chain.bytes = cost.bytes + out->intermediate_bytes;
  d->chain.workspace_bytes = chain.workspace_bytes();
  KILN_RETURN_IF_ERROR(chain.poison(run->stream.get()));
  KILN_RETURN_IF_ERROR(run_chain(run->stream.get()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(run->stream.get()));
  if (run->eval->reference) {
    CheckOptions co = run->options.tune.check;
    co.stored_intermediates = out->materialized;
    KILN_ASSIGN_OR_RETURN(DeviceChecker checker, DeviceChecker::create(run->graph, co));
    KILN_ASSIGN_OR_RETURN(CheckReport rep,
                          checker.check(chain.output_pointers(), *run->eval->reference, run->stream.get()));
    out->chain_check = rep.summary();
    d->chain.disposition = rep.verdict == Disposition::kPassed ? Disposition::kPassed : Disposition::kIncorrect;
    if (d->chain.disposition != Disposition::kPassed) {
      d->chain.message = "unfused chain: " + out->chain_check;
      return Status::ok();
    }
  } else {
    d->chain.disposition = Disposition::kNotVerified;
    d->chain.message = "no reference: not verified";
  }
  if (run->budgeted() && run->left_s() <= 0) {
    d->unavailable = "time budget reached before the chain was timed";
    run->stop = true;
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Timer timer, Timer::create());
  MeasureOptions mo = run->options.tune.measure;
  mo.stream = run->stream.get();
  auto m = timer.measure(run_chain, mo);
  if (!m.is_ok()) {
    d->chain.disposition = Disposition::kFailed;
    d->chain.message = m.status().message();
    return Status::ok();
  }
  d->chain.set_timing(*m);
  d->chain.warmup_ms = m->warmup_ms;
  d->chain.throttled = m->throttled;
  if (m->throttled)
    d->chain.message += (d->chain.message.empty() ? "" : "; ") + std::string("throttled: ") + m->throttle_note;
  return Status::ok();
}

// A decomposition past the first is skipped where its bound (chain_lower_bound_ms) passes the fused winner's median
// by more than kSkipMargin: a chain can run a little faster than its parts alone, and both sides carry noise.
constexpr double kSkipMargin = 0.03;
bool skip_past(const UnfusedRun* run, double bound, DecompositionResult* d) {
  if (run->options.fused_ms <= 0 || bound < run->options.fused_ms * (1.0 + kSkipMargin)) return false;
  d->unavailable = "skipped: its parts alone take at least " + fmt_ms(bound) + ", past the fused plan's " +
                   fmt_ms(run->options.fused_ms) + " by more than 3%";
  return true;
}

// Decomposition `groups` (one of unfused_groupings) tuned, chained, checked and timed into *d (named by its parts,
// "graph/mm+1 | graph/act", unless named already); `out` gets its parts, sums and chain fields (the caller keeps the
// fastest). `node_ms`: each node's time alone, from the first decomposition (empty before it, when nothing is
// skipped). A decomposition that cannot run says why in d->unavailable; the device's errors are returned.
Status run_decomposition(UnfusedRun* run, const std::vector<int>& groups, const std::vector<double>& node_ms,
                         bool may_skip, DecompositionResult* d, UnfusedResult* out) {
  d->groups = groups;
  auto partition = partition_graph(run->graph, groups, out->materialized);
  if (!partition.is_ok()) {
    d->unavailable = partition.status().message();
    return Status::ok();
  }
  std::vector<GraphPart> parts = std::move(partition).value();
  for (const GraphPart& p : parts) d->parts.push_back(p.graph.name);
  if (d->name.empty())
    for (const std::string& n : d->parts) d->name += (d->name.empty() ? "" : " | ") + n;
  std::map<int, double> part_ms;  // group number -> its winner's median, as the parts are tuned
  std::vector<int> numbers(groups.begin(), groups.end());
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::vector<const UnfusedPartResult*> results;

  for (size_t i = 0; i < parts.size(); ++i) {
    if (may_skip && skip_past(run, chain_lower_bound_ms(groups, node_ms, run->heavy, part_ms), d)) return Status::ok();
    std::string why;
    KILN_ASSIGN_OR_RETURN(const UnfusedPartResult* pr, tune_part(run, parts[i], &why));
    UnfusedPartResult shown;
    if (pr) shown = *pr;
    shown.name = parts[i].graph.name;  // a part tuned under another decomposition's name is this one's here
    out->parts.push_back(std::move(shown));
    if (!pr) {
      d->unavailable = why;
      return Status::ok();
    }
    const CandidateResult& w = pr->tune.candidates[*pr->tune.winner];
    d->identities.push_back(w.identity());
    out->sum_of_parts_ms += w.median_ms;
    part_ms[numbers[i]] = w.median_ms;
    results.push_back(pr);
    if (run->stop) {
      d->unavailable = "interrupted";
      return Status::ok();
    }
  }
  if (may_skip && skip_past(run, chain_lower_bound_ms(groups, node_ms, run->heavy, part_ms), d)) return Status::ok();
  return time_chain(run, std::move(parts), results, d, out);
}

// Each node's time alone from the first decomposition's parts (one node a part, in topological order); empty where
// any is missing.
std::vector<double> node_times(const std::vector<int>& groups, const UnfusedResult& first) {
  std::vector<double> out(groups.size(), 0.0);
  for (size_t n = 0; n < groups.size(); ++n) {
    const auto g = static_cast<size_t>(groups[n]);
    if (g >= first.parts.size() || !first.parts[g].tune.winner) return {};
    out[n] = first.parts[g].tune.candidates[*first.parts[g].tune.winner].median_ms;
  }
  return out;
}

bool chain_passed(const UnfusedResult& r, const DecompositionResult& d) {
  const bool checked = d.chain.disposition == Disposition::kPassed ||
                       (r.reference_kind == ReferenceKind::kNone && d.chain.disposition == Disposition::kNotVerified);
  return d.unavailable.empty() && checked && d.chain.timed();
}

}  // namespace

StatusOr<UnfusedResult> tune_unfused(const Graph& graph, const UnfusedOptions& options) {
  if (graph.nodes.size() < 2)
    return not_supported("graph '" + graph.name + "' has one node: there is no unfused alternative to time");
  UnfusedRun run(graph, options);
  UnfusedResult r;
  r.materialized = options.materialized.value_or(graph.io_dtype);
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<int>> groupings, unfused_groupings(graph));
  if (!options.split_points) groupings.resize(1);
  KILN_ASSIGN_OR_RETURN(run.stream, make_stream());
  KILN_ASSIGN_OR_RETURN(run.handle, make_cudnn_handle(run.stream.get()));
  run.eval = options.evaluation;
  if (!run.eval) {
    KILN_ASSIGN_OR_RETURN(run.eval, prepare_evaluation(graph, options.tune.seed, options.tune.verify,
                                                       options.tune.host_reference, options.tune.inputs_dir));
  }
  r.reference_kind = run.eval->reference_kind;
  std::optional<UnfusedResult> best, first;
  std::vector<double> node_ms;
  for (size_t i = 0; i < groupings.size() && !run.stop && !run.cancelled(); ++i) {
    UnfusedResult one;
    one.materialized = r.materialized;
    one.reference_kind = r.reference_kind;
    DecompositionResult d;
    if (i == 0) d.name = "each node";
    KILN_RETURN_IF_ERROR(run_decomposition(&run, groupings[i], node_ms, /*may_skip=*/i > 0, &d, &one));
    if (i == 0) node_ms = node_times(groupings[0], one);
    one.groups = d.groups;
    one.identities = d.identities;
    one.chain = d.chain;
    one.unavailable = d.unavailable;
    const bool passed = chain_passed(one, d);
    r.decompositions.push_back(std::move(d));
    if (passed && (!best || one.chain.median_ms < best->chain.median_ms)) best = one;
    if (i == 0) first = std::move(one);
  }
  UnfusedResult chosen = best ? std::move(*best) : std::move(*first);
  chosen.decompositions = std::move(r.decompositions);
  return chosen;
}

FusionSide unfused_chain_side(const UnfusedResult& result) {
  FusionSide s;
  s.identities = result.identities;
  // Without a reference (--no-verify) the chain is NotVerified, like every fused candidate then.
  const bool checked =
      result.chain.disposition == Disposition::kPassed ||
      (result.reference_kind == ReferenceKind::kNone && result.chain.disposition == Disposition::kNotVerified);
  if (!result.unavailable.empty() || !checked || !result.chain.timed()) return s;
  s.available = true;
  s.median_ms = result.chain.median_ms;
  s.rel_error = result.chain.rel_error;
  return s;
}

std::string format_fusion_report(const CandidateResult* fused_winner, const UnfusedResult& u, FusionPolicy policy,
                                 const StatusOr<FusionDecision>& decision) {
  std::string out = std::string("fused vs unfused (") + std::to_string(u.parts.size()) +
                    " parts, intermediates stored as " + dtype_name(u.materialized) + ", policy " +
                    fusion_policy_name(policy) + "):\n";
  out += "  fused     " +
         (fused_winner ? fused_winner->identity() + "  " + fmt_timing(*fused_winner) : std::string("no plan")) + "\n";
  std::string ids;
  for (const auto& id : u.identities) ids += (ids.empty() ? "" : " + ") + id;
  if (!u.unavailable.empty()) {
    out += "  unfused   unavailable: " + u.unavailable + "\n";
  } else {
    char mib[64];
    std::snprintf(mib, sizeof mib, "%.1f MiB", u.intermediate_bytes / (1024.0 * 1024.0));
    out += "  unfused   " + ids + "  " + fmt_timing(u.chain) + " back to back (parts alone sum to " +
           fmt_ms(u.sum_of_parts_ms) + "; " + mib + " through memory between parts)\n";
    if (u.chain.disposition != Disposition::kPassed && !u.chain.message.empty())
      out += "            " + u.chain.message + "\n";
  }
  if (u.decompositions.size() > 1) {
    out += "  decompositions (" + std::to_string(u.decompositions.size()) +
           "; the fastest chain that passed is the unfused side):\n";
    for (const DecompositionResult& d : u.decompositions) {
      std::string dids;
      for (const auto& id : d.identities) dids += (dids.empty() ? "" : " + ") + id;
      out += "    " + d.name + ": " +
             (d.unavailable.empty() ? dids + "  " + fmt_timing(d.chain) : "unavailable: " + d.unavailable) + "\n";
    }
  }
  for (const UnfusedPartResult& p : u.parts) {
    out += "    part " + p.name + ": ";
    if (p.tune.winner) {
      const CandidateResult& w = p.tune.candidates[*p.tune.winner];
      out += w.identity() + "  " + fmt_timing(w) + "  (" + std::to_string(p.tune.candidates.size()) + " candidates)\n";
    } else {
      out += "no correct plan\n";
    }
  }
  out += "  decision: " + (decision.is_ok() ? decision->explanation : "none: " + decision.status().message()) + "\n";
  return out;
}

nlohmann::json fusion_report_json(const CandidateResult* fused_winner, const UnfusedResult& u, FusionPolicy policy,
                                  const StatusOr<FusionDecision>& decision) {
  nlohmann::json parts = nlohmann::json::array();
  for (const UnfusedPartResult& p : u.parts) {
    nlohmann::json j = {{"name", p.name},
                        {"structure_signature", p.structure_sig},
                        {"shape_key", p.shape_key},
                        {"candidates", p.tune.candidates.size()}};
    j["winner"] = p.tune.winner ? candidate_to_json(p.tune.candidates[*p.tune.winner]) : nlohmann::json(nullptr);
    parts.push_back(j);
  }
  nlohmann::json chain = candidate_to_json(u.chain);
  chain.erase("identity");
  chain.erase("engine_id");
  chain.erase("knobs");
  chain["identities"] = u.identities;
  nlohmann::json decompositions = nlohmann::json::array();
  for (const DecompositionResult& d : u.decompositions) {
    nlohmann::json c = candidate_to_json(d.chain);
    for (const char* k : {"identity", "engine_id", "knobs"}) c.erase(k);
    decompositions.push_back({{"name", d.name},
                              {"groups", d.groups},
                              {"parts", d.parts},
                              {"identities", d.identities},
                              {"chain", c},
                              {"available", d.unavailable.empty()},
                              {"unavailable_reason", d.unavailable}});
  }
  nlohmann::json j = {{"policy", fusion_policy_name(policy)},
                      {"decompositions", decompositions},
                      {"groups", u.groups},
                      {"materialized_dtype", dtype_name(u.materialized)},
                      {"fused", fused_winner ? candidate_to_json(*fused_winner) : nlohmann::json(nullptr)},
                      {"unfused", chain},
                      {"unfused_available", u.unavailable.empty()},
                      {"unfused_unavailable_reason", u.unavailable},
                      {"sum_of_parts_ms", u.sum_of_parts_ms},
                      {"intermediate_bytes", u.intermediate_bytes},
                      {"reference", reference_kind_name(u.reference_kind)},
                      {"parts", parts}};
  if (decision.is_ok()) {
    j["decision"] = decision->use_fused ? "fused" : "unfused";
    j["explanation"] = decision->explanation;
  } else {
    j["decision"] = nullptr;
    j["explanation"] = decision.status().message();
  }
  return j;
}

}  // namespace kiln
