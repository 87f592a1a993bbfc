// kiln tune's printing (tune_report.h).
#include "tune_report.h"

#include <cstdio>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/lower/lower.h"
#include "kiln/lower/plan_words.h"
#include "kiln/tune/tuner.h"
#include "kiln/tune/unfused.h"

namespace kiln::cli {

Status list_candidates(const Graph& g, bool json) {
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle handle, make_cudnn_handle());
  LowerTarget target;
  target.handle = handle.get();
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, with_plan_words(LoweredGraph::create(g, target), g.name));
  KILN_ASSIGN_OR_RETURN(
      auto cands,
      with_plan_words(lg.list_candidates({HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback}), g.name));
  nlohmann::json j = nlohmann::json::array();
  if (!json)
    std::printf("%s: %zu distinct engine configurations\n  %-5s %-36s %-14s %s\n", g.name.c_str(), cands.size(), "rank",
                "engine+knobs", "modes", "behavior notes");
  for (auto& c : cands) {
    std::string modes, notes;
    for (auto& m : c.modes) modes += (modes.empty() ? "" : ",") + m;
    for (auto& n : c.behavior_notes) notes += (notes.empty() ? "" : ",") + n;
    if (json)
      j.push_back({{"identity", c.config.identity()},
                   {"engine_id", c.config.engine_id},
                   {"heuristic_rank", c.heuristic_rank},
                   {"modes", c.modes},
                   {"behavior_notes", c.behavior_notes}});
    else
      std::printf("  %-5s %-36s %-14s %s\n", c.heuristic_rank >= 0 ? std::to_string(c.heuristic_rank).c_str() : "-",
                  c.config.identity().c_str(), modes.c_str(), notes.c_str());
  }
  if (json) std::printf("%s\n", nlohmann::json{{"graph", g.name}, {"candidates", j}}.dump(2).c_str());
  return Status::ok();
}

void print_tuned(const std::string& spec, const Graph& g, const TunedGraph& t, const TuneJob& job, bool json,
                 nlohmann::json* all) {
  const TuneResult& tr = t.result;
  const GraphSignature& sig = t.signature;
  const EnvFingerprint& env = t.environment;
  ReportOptions ro;
  ro.winner = job.tune.winner;
  ro.title =
      g.name + "  structure " + sig.structure.substr(0, 16) + (sig.shape_key.empty() ? "" : "  shape " + sig.shape_key);
  const CandidateResult* fused_winner = tr.winner ? &tr.candidates[*tr.winner] : nullptr;
  // The candidate budget's part (kiln/tune/tune_policy.h): runtime-compiled candidates it left, and why.
  size_t left = 0;
  std::string left_why;
  for (const CandidateResult& c : tr.candidates) {
    if (c.disposition != Disposition::kNotVerified || c.message.rfind("not run: candidate budget", 0) != 0) continue;
    if (left++ == 0) left_why = c.message.substr(9);
  }
  if (json) {
    nlohmann::json meta = {{"graph", g.name},
                           {"spec", spec},
                           {"structure_signature", sig.structure},
                           {"shape_key", sig.shape_key},
                           {"gpu", env.gpu_name},
                           {"cudnn_version", env.cudnn_version},
                           {"kiln_git_revision", env.kiln_git_revision},
                           {"reference", reference_kind_name(tr.reference_kind)},
                           {"inputs", tr.inputs},
                           {"build_wall_ms", tr.build_wall_ms},
                           {"total_wall_ms", tr.total_wall_ms},
                           {"prepare_wall_ms", tr.prepare_wall_ms},
                           {"cancelled", tr.cancelled},
                           {"budget_exhausted", tr.budget_exhausted},
                           {"partial", tr.cancelled}};
    if (tr.incumbent_decision) meta["incumbent"] = tr.incumbent_decision->explanation;
    meta["candidate_budget"] = {{"exhaustive", job.tune.budget.exhaustive}, {"left", left}, {"why", left_why}};
    nlohmann::json rep = report_to_json(tr.candidates, meta, ro);
    if (t.unfused) rep["fusion"] = fusion_report_json(fused_winner, *t.unfused, job.fusion_policy, *t.fusion);
    if (t.kept_fusion || t.fusion_removed || !t.fusion_status.is_ok()) {
      nlohmann::json parts = nlohmann::json::array();
      if (t.kept_fusion)
        for (const FusionPartRef& p : t.kept_fusion->parts)
          parts.push_back({{"name", p.name}, {"structure_signature", p.structure_sig}, {"shape_key", p.shape_key}});
      rep["fusion_stored"] = {{"unfused_chain", t.kept_fusion.has_value()},
                              {"parts", parts},
                              {"earlier_decision_removed", t.fusion_removed},
                              {"error", t.fusion_status.is_ok() ? "" : t.fusion_status.message()}};
    }
    all->push_back(rep);
    return;
  }
  std::printf("%s\n", format_report_table(tr.candidates, ro).c_str());
  std::printf("reference: %s; inputs: %s; %zu candidates built in %.0f ms (inputs and reference %.0f ms, "
              "meanwhile); total %.1f s\n",
              reference_kind_name(tr.reference_kind), tr.inputs.c_str(), tr.candidates.size() - left, tr.build_wall_ms,
              tr.prepare_wall_ms, tr.total_wall_ms / 1000.0);
  if (tr.winner)
    std::printf("winner: %s  %.4f ms  %s\n", tr.winner_config.identity().c_str(), tr.candidates[*tr.winner].median_ms,
                tr.winner_check.c_str());
  if (tr.incumbent_decision) std::printf("incumbent: %s\n", tr.incumbent_decision->explanation.c_str());
  if (left > 0) std::printf("%zu runtime-compiled candidates not compiled: %s\n", left, left_why.c_str());
  if (t.unfused)
    std::printf("%s", format_fusion_report(fused_winner, *t.unfused, job.fusion_policy, *t.fusion).c_str());
  if (t.kept_fusion) {
    std::string names;
    for (const FusionPartRef& p : t.kept_fusion->parts) names += (names.empty() ? "" : ", ") + p.name;
    std::printf("stored: the unfused chain decision for this key (%zu parts: %s), each part's winner under its own "
                "signature: kiln::Planner serves the chain here\n",
                t.kept_fusion->parts.size(), names.c_str());
  } else if (!t.fusion_status.is_ok()) {
    std::printf("warning: %s\n", t.fusion_status.message().c_str());
  } else if (t.fusion && t.fusion->is_ok() && !(*t.fusion)->use_fused && !job.store) {
    std::printf(
        "note: the unfused parts win here; nothing was stored (no --store), so a Planner serving this key runs the fused plan\n");
  }
  if (t.fusion_removed)
    std::printf("stored: the fused plan decided on again: the earlier unfused decision for this key was removed\n");
}

}  // namespace kiln::cli
