// kiln plans history / candidates / promote / reject / rollback (docs/rollout.md): the plan states a store keeps
// (kiln/store/plan_rollout.h). One subcommand family of `kiln plans` (cmd_plans.cc registers them).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/printable.h"
#include "kiln/store/plan_store.h"
#include "kiln/store/store_path.h"
#include "plans.h"

namespace kiln::cli::plans {
namespace {

using Key = std::tuple<std::string, std::string, std::string>;

// The one key (structure, shape, environment) that --structure (a prefix), --shape and --fingerprint (a prefix)
// name, among the store's active plans and the plans beside them. NotFound for none; InvalidArgument naming a few
// for several.
StatusOr<StoredPlanKey> one_key(const PlansOptions& o, PlanStore& store) {
  if (o.structure.empty()) return invalid_argument("--structure is required (a structure signature or a prefix of it)");
  KILN_ASSIGN_OR_RETURN(std::string fp, resolve_fingerprint_key(o.fingerprint, store));
  ListFilter f;
  f.structure_prefix = o.structure;
  f.shape_key = o.shape;
  f.fingerprint_key = fp;
  std::set<Key> keys;
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> active, store.list(f));
  for (const PlanSummary& s : active)
    keys.insert({s.record.structure_sig, s.record.shape_key, s.stored_fingerprint_key});
  KILN_ASSIGN_OR_RETURN(std::vector<RolloutEntry> beside, store.rollout_entries(f));
  for (const RolloutEntry& e : beside)
    keys.insert({e.record.structure_sig, e.record.shape_key, e.stored_fingerprint_key});
  const std::string asked = "--structure " + o.structure + (o.shape.empty() ? "" : " --shape '" + o.shape + "'") +
                            (o.fingerprint.empty() ? "" : " --fingerprint " + o.fingerprint);
  if (keys.empty()) return not_found("no plan in " + shown_location(o.store) + " matches " + asked);
  if (keys.size() > 1) {
    std::string some;
    int n = 0;
    for (const Key& k : keys) {
      if (n++ == 4) break;
      some += "\n  " + std::get<0>(k).substr(0, 12) + "  shape '" + std::get<1>(k) + "'  fingerprint " +
              std::get<2>(k).substr(0, 12);
    }
    return invalid_argument(asked + " matches " + std::to_string(keys.size()) +
                            " keys; narrow it with --shape and --fingerprint:" + some);
  }
  const Key& k = *keys.begin();
  return StoredPlanKey{std::get<0>(k), std::get<1>(k), std::get<2>(k)};
}

std::string when(int64_t at) { return at > 0 ? age_of(at) + " ago" : "-"; }

// The key whose history to show: one that holds plans, as the other commands name it; or, where the key's plans are
// gone (`kiln plans rm` keeps the history), the key as given whole: its full structure signature and shape (every
// environment of it, or the one --fingerprint names in full).
StatusOr<StoredPlanKey> history_key(const PlansOptions& o, PlanStore& store, std::vector<PlanTransition>* h) {
  StatusOr<StoredPlanKey> key = one_key(o, store);
  if (key.is_ok() || key.status().code() != StatusCode::kNotFound) {
    if (key.is_ok()) {
      KILN_ASSIGN_OR_RETURN(*h, store.plan_history(*key));
    }
    return key;
  }
  StoredPlanKey whole{o.structure, o.shape, o.fingerprint};
  KILN_ASSIGN_OR_RETURN(*h, store.plan_history(whole));
  if (h->empty())
    return Status(key.status().code(), key.status().message() +
                                           " (the history of a removed key is read by its whole structure signature, "
                                           "with --shape; a prefix names only keys that hold plans)");
  return whole;
}

}  // namespace

Status run_history(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/true));
  std::vector<PlanTransition> h;
  KILN_ASSIGN_OR_RETURN(StoredPlanKey key, history_key(o, *store, &h));
  (void)key;
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const PlanTransition& t : h)
      arr.push_back({{"seq", t.seq},
                     {"config", t.config},
                     {"from", t.from_state},
                     {"to", t.to_state},
                     {"reason", t.reason},
                     {"evidence", t.evidence},
                     {"by", t.by},
                     {"at", t.at}});
    std::printf("%s\n", nlohmann::ordered_json({{"structure_sig", key.structure_sig},
                                                {"shape_key", key.shape_key},
                                                {"fingerprint_key", key.fingerprint_key},
                                                {"history", arr}})
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
    return Status::ok();
  }
  std::printf("%s  shape '%s'  fingerprint %s\n", key.structure_sig.c_str(), key.shape_key.c_str(),
              key.fingerprint_key.substr(0, 12).c_str());
  std::vector<std::vector<std::string>> rows = {{"#", "CONFIG", "FROM", "TO", "WHEN", "BY", "WHY"}};
  for (const PlanTransition& t : h)
    rows.push_back({std::to_string(t.seq), t.config, t.from_state.empty() ? "(new)" : t.from_state, t.to_state,
                    when(t.at), t.by, printable(t.reason)});
  if (h.empty()) std::printf("no history (plans stored before Kiln kept states have none)\n");
  else print_table(rows);
  return Status::ok();
}

Status run_candidates(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(bool none, said_no_store(o));
  if (none) return Status::ok();
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/true));
  KILN_ASSIGN_OR_RETURN(std::string fp, resolve_fingerprint_key(o.fingerprint, *store));
  ListFilter f = filter_of(o);
  f.fingerprint_key = fp;
  KILN_ASSIGN_OR_RETURN(std::vector<RolloutEntry> all, store->rollout_entries(f));
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const RolloutEntry& e : all)
      arr.push_back({{"structure_sig", e.record.structure_sig},
                     {"shape_key", e.record.shape_key},
                     {"fingerprint_key", e.stored_fingerprint_key},
                     {"config", e.config},
                     {"state", e.problem.empty() ? plan_state_name(e.state) : "damaged"},
                     {"reason", e.reason},
                     {"changed_at", e.changed_at},
                     {"median_ms", e.record.stats.median_ms},
                     {"problem", e.problem}});
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "FINGERPRINT", "CONFIG", "STATE", "MEDIAN", "CHANGED", "WHY"}};
  for (const RolloutEntry& e : all)
    rows.push_back({e.record.structure_sig.substr(0, 12), e.record.shape_key, e.stored_fingerprint_key.substr(0, 12),
                    e.config, e.problem.empty() ? plan_state_name(e.state) : "damaged",
                    ms_text(e.record.stats.median_ms, e.record.tuned), when(e.changed_at),
                    printable(e.problem.empty() ? e.reason : e.problem)});
  if (all.empty()) std::printf("no plan beside the active ones in %s\n", shown_location(o.store).c_str());
  else print_table(rows);
  return Status::ok();
}

// promote (to active) and reject: a named plan of one key.
Status move_one(const PlansOptions& o, PlanState to) {
  if (o.config.empty())
    return invalid_argument("--config is required (the plan's configuration, as 'candidates' lists it)");
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(StoredPlanKey key, one_key(o, *store));
  const std::string why =
      o.reason.empty() ? std::string("by hand (kiln plans ") + (to == PlanState::kActive ? "promote" : "reject") + ")"
                       : o.reason;
  KILN_RETURN_IF_ERROR(store->transition(key, o.config, to, why));
  std::printf("%s  shape '%s': %s is %s\n", key.structure_sig.substr(0, 12).c_str(), key.shape_key.c_str(),
              o.config.c_str(), plan_state_name(to));
  return Status::ok();
}

Status run_promote(const PlansOptions& o) { return move_one(o, PlanState::kActive); }
Status run_reject(const PlansOptions& o) { return move_one(o, PlanState::kRejected); }

Status run_rollback(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(StoredPlanKey key, one_key(o, *store));
  KILN_ASSIGN_OR_RETURN(PlanRecord now,
                        store->rollback(key, o.reason.empty() ? "by hand (kiln plans rollback)" : o.reason));
  std::printf("%s  shape '%s': rolled back to %s (stored %s ago); the plan it replaced is rejected\n",
              key.structure_sig.substr(0, 12).c_str(), key.shape_key.c_str(),
              plan_identity(now.engine_id, now.knobs).c_str(), age_of(now.created_at).c_str());
  return Status::ok();
}

void add_rollout(const AddSubcommand& add, const std::function<void(CLI::App*, const char*)>& add_filter,
                 const std::shared_ptr<PlansOptions>& o) {
  auto add_key = [&](CLI::App* sub) {
    sub->add_option("--structure", o->structure, "Structure signature (or a prefix of it)")->required();
    sub->add_option("--shape", o->shape, "Shape key (needed where the structure has several)");
    sub->add_option("--fingerprint", o->fingerprint, "Environment fingerprint key, or a prefix of it (6+ hex digits)");
  };
  CLI::App* history =
      add("history", "Show a key's plan history: every state change, when, by whom and why", run_history);
  add_key(history);
  history->add_flag("--json", o->json, "Machine-readable output");
  CLI::App* cands =
      add("candidates", "List the plans beside the active ones: candidates, shadow, retired, rejected", run_candidates);
  add_filter(cands, "Environment fingerprint key");
  cands->add_flag("--json", o->json, "Machine-readable output");
  for (auto [name, help, fn] :
       {std::tuple<const char*, const char*, Status (*)(const PlansOptions&)>{
            "promote", "Make a candidate, shadow or retired plan of a key the active one", run_promote},
        {"reject", "Reject a candidate or shadow plan of a key (kept, never served)", run_reject}}) {
    CLI::App* sub = add(name, help, fn);
    add_key(sub);
    sub->add_option("--config", o->config, "The plan's configuration, as 'candidates' lists it")->required();
    sub->add_option("--reason", o->reason, "Why (kept in the history)");
  }
  CLI::App* rollback =
      add("rollback", "Restore a key's previous active plan (the newest retired one); the active plan is rejected",
          run_rollback);
  add_key(rollback);
  rollback->add_option("--reason", o->reason, "Why (kept in the history)");
  CLI::App* diff = add("diff",
                       "Compare the plans a store holds for two environments (an upgrade): configurations, stored "
                       "times, keys not re-baked",
                       run_diff);
  diff->add_option("--from", o->from_env, "The old environment's fingerprint key (or 6+ hex digits of it)")->required();
  diff->add_option("--to", o->to_env, "The new environment's fingerprint key (or 6+ hex digits of it)")->required();
  diff->add_flag("--rerun", o->rerun,
                 "Also build both configurations of every key on this GPU, run them on the same inputs, check each "
                 "against the reference and time them side by side");
  diff->add_option("--spec", o->specs, "Spec files giving the graphs of the keys (with --rerun; else the store's)");
  add_seed_option(diff, &o->seed, "Seed of the random inputs of --rerun")->each([o](const std::string&) {
    o->seed_given = true;
  });
  diff->add_flag("--json", o->json, "Machine-readable output");
}

}  // namespace kiln::cli::plans
