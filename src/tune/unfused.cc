// tune_unfused: tune each node alone, then time the winners back to back (kiln/tune/unfused.h).
#include "kiln/tune/unfused.h"

#include <chrono>
#include <cmath>
#include <cstdio>
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
}  // namespace

StatusOr<UnfusedResult> tune_unfused(const Graph& graph, const UnfusedOptions& options) {
  if (graph.nodes.size() < 2)
    return not_supported("graph '" + graph.name + "' has one node: there is no unfused alternative to time");
  const auto t0 = std::chrono::steady_clock::now();
  auto left_s = [&] {
    return options.tune.time_budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  UnfusedResult r;
  r.materialized = options.materialized.value_or(graph.io_dtype);
  KILN_ASSIGN_OR_RETURN(std::vector<GraphPart> parts, decompose_graph(graph, r.materialized));

  // 1. Each part tuned as a graph of its own, within what is left of the budget.
  TuneOptions po = part_options(options.tune);
  for (const GraphPart& p : parts) {
    UnfusedPartResult pr;
    pr.name = p.graph.name;
    KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(p.graph));
    pr.structure_sig = sig.structure;
    pr.shape_key = sig.shape_key;
    if (options.tune.time_budget_s > 0) {
      if (left_s() <= 0) {
        r.unavailable = "time budget reached before part '" + p.graph.name + "'";
        r.parts.push_back(std::move(pr));
        return r;
      }
      po.time_budget_s = left_s();
    }
    auto tr = tune_graph(p.graph, po);
    if (!tr.is_ok()) {
      r.unavailable = "part '" + p.graph.name + "': " + tr.status().message();
      r.parts.push_back(std::move(pr));
      return r;
    }
    pr.tune = std::move(tr).value();
    pr.tune.evaluation.reset();  // the part's buffers are not needed any more
    if (!pr.tune.winner) {
      r.unavailable = "part '" + p.graph.name + "': no correct, timed plan";
      r.parts.push_back(std::move(pr));
      return r;
    }
    const CandidateResult& w = pr.tune.candidates[*pr.tune.winner];
    r.identities.push_back(w.identity());
    r.sum_of_parts_ms += w.median_ms;
    r.parts.push_back(std::move(pr));
    if (options.tune.cancel && options.tune.cancel->load()) {
      r.unavailable = "interrupted";
      return r;
    }
  }

  // 2. The chain: the fused graph's inputs (copied on the device) and outputs, plus one buffer per
  // materialized intermediate.
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle handle, make_cudnn_handle(stream.get()));
  std::shared_ptr<const GraphEvaluation> eval = options.evaluation;
  if (!eval) {
    KILN_ASSIGN_OR_RETURN(eval, prepare_evaluation(graph, options.tune.seed, options.tune.verify,
                                                   options.tune.host_reference, options.tune.inputs_dir));
  }
  r.reference_kind = eval->reference_kind;

  std::vector<LoweredGraph> plans;
  for (size_t i = 0; i < parts.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(LoweredGraph plan,
                          LoweredGraph::deserialize(parts[i].graph, handle.get(), r.parts[i].tune.winner_plan));
    plans.push_back(std::move(plan));
  }
  KILN_ASSIGN_OR_RETURN(PlanChain chain, PlanChain::create(graph, std::move(parts), std::move(plans), eval->buffers));
  r.intermediate_bytes = chain.intermediate_bytes();
  auto run_chain = [&](cudaStream_t) { return chain.run(handle.get()); };

  // 3. Numerics of the chain against the fused graph's reference (intermediates stored in the
  // materialized dtype), then one timing of the whole chain.
  const OpCost cost = graph_cost(graph);
  r.chain.flops = cost.flops;
  r.chain.bytes = cost.bytes + r.intermediate_bytes;
  r.chain.workspace_bytes = chain.workspace_bytes();
  KILN_RETURN_IF_ERROR(chain.poison(stream.get()));
  KILN_RETURN_IF_ERROR(run_chain(stream.get()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  if (eval->reference) {
    CheckOptions co = options.tune.check;
    co.stored_intermediates = r.materialized;
    KILN_ASSIGN_OR_RETURN(DeviceChecker checker, DeviceChecker::create(graph, co));
    KILN_ASSIGN_OR_RETURN(CheckReport rep, checker.check(chain.output_pointers(), *eval->reference, stream.get()));
    r.chain_check = rep.summary();
    r.chain.disposition = rep.verdict == Disposition::kPassed ? Disposition::kPassed : Disposition::kIncorrect;
    if (r.chain.disposition != Disposition::kPassed) {
      r.chain.message = "unfused chain: " + r.chain_check;
      return r;
    }
  } else {
    r.chain.disposition = Disposition::kNotVerified;
    r.chain.message = "no reference: not verified";
  }
  if (options.tune.time_budget_s > 0 && left_s() <= 0) {
    r.unavailable = "time budget reached before the chain was timed";
    return r;
  }
  KILN_ASSIGN_OR_RETURN(Timer timer, Timer::create());
  MeasureOptions mo = options.tune.measure;
  mo.stream = stream.get();
  auto m = timer.measure(run_chain, mo);
  if (!m.is_ok()) {
    r.chain.disposition = Disposition::kFailed;
    r.chain.message = m.status().message();
    return r;
  }
  r.chain.set_timing(*m);
  r.chain.warmup_ms = m->warmup_ms;
  r.chain.throttled = m->throttled;
  if (m->throttled)
    r.chain.message += (r.chain.message.empty() ? "" : "; ") + std::string("throttled: ") + m->throttle_note;
  return r;
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
  nlohmann::json j = {{"policy", fusion_policy_name(policy)},
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
