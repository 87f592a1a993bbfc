// kiln plans queue (docs/store.md): one subcommand of `kiln plans` (cmd_plans.cc registers them).
#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "kiln/core/read_file.h"
#include "kiln/core/hash.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

namespace {

nlohmann::ordered_json queue_entry_json(const RetuneQueueEntry& e) {
  nlohmann::ordered_json j;
  j["structure_sig"] = e.structure_sig;
  j["shape_key"] = e.shape_key;
  j["fingerprint_key"] = e.fingerprint_key;
  j["fingerprint"] = nlohmann::ordered_json::parse(fingerprint_to_json(e.fingerprint), nullptr, false);
  j["graph_name"] = e.graph_name;
  j["reasons"] = e.reasons;
  j["request_count"] = e.request_count;
  j["first_seen"] = e.first_seen;
  j["last_seen"] = e.last_seen;
  j["requested_by"] = e.requested_by;
  nlohmann::ordered_json spec = nlohmann::ordered_json::parse(e.spec_json, nullptr, false);
  if (spec.is_discarded()) j["spec_json"] = e.spec_json;
  else j["spec"] = spec;
  if (!e.problem.empty()) j["problem"] = e.problem;
  return j;
}

}  // namespace

Status run_queue(const PlansOptions& o) {
  if (o.clear && !is_server_location(o.store)) {
    KILN_ASSIGN_OR_RETURN(bool exists, path_exists(o.store, "plan store"));
    if (!exists) return not_found("no plan store at " + o.store);
  }
  KILN_ASSIGN_OR_RETURN(bool no_store, said_no_store(o));
  if (no_store) return Status::ok();
  // --fingerprint: a key or a prefix of one (at least 6 hex digits, any case), as other subcommands take it.
  std::string prefix;
  if (!o.fingerprint.empty()) {
    KILN_ASSIGN_OR_RETURN(prefix, fingerprint_prefix_text(o.fingerprint));
  }
  // A listing only reads: a read-only role or a hot standby can list the queue.
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true, /*read_only=*/!o.clear));
  // Each row with its job state (queued, claimed, expired, retry, dead: kiln/store/retune_request.h).
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneJobState> jobs, store->list_retune_jobs());
  if (jobs.empty()) {  // a read-only store from before the leases: its rows, each queued
    KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queue, store->list_retune_queue());
    for (auto& e : queue) {
      RetuneJobState j;
      j.entry = std::move(e);
      jobs.push_back(std::move(j));
    }
  }
  {
    std::vector<RetuneJobState> kept;
    for (auto& j : jobs)
      if (j.entry.structure_sig.compare(0, o.structure.size(), o.structure) == 0 &&
          j.entry.fingerprint_key.compare(0, prefix.size(), prefix) == 0)
        kept.push_back(std::move(j));
    jobs = std::move(kept);
  }
  if (o.clear) {
    int64_t removed = 0;
    for (const auto& j : jobs) {
      const RetuneQueueEntry& e = j.entry;
      KILN_ASSIGN_OR_RETURN(bool r, store->remove_from_retune_queue(e.structure_sig, e.shape_key, e.fingerprint_key));
      removed += r ? 1 : 0;
    }
    std::printf("removed %" PRId64 " queued re-tune%s\n", removed, removed == 1 ? "" : "s");
    return Status::ok();
  }
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& j : jobs) {
      nlohmann::ordered_json row = queue_entry_json(j.entry);
      row["state"] = j.state;
      if (j.state != "queued") {
        row["worker"] = j.worker;
        row["attempts"] = j.attempts;
        row["lease_expires_at"] = j.lease_expires_at;
        row["next_attempt_at"] = j.next_attempt_at;
        row["last_error"] = j.last_error;
      }
      arr.push_back(row);
    }
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "GRAPH", "GPU", "CUDNN", "REQUESTS", "FIRST", "LAST", "STATE", "REASON"}};
  size_t dead = 0;
  for (const auto& j : jobs) {
    const RetuneQueueEntry& e = j.entry;
    std::string reason = e.reasons.empty() ? "-" : e.reasons.back();
    if (e.reasons.size() > 1) reason += " (+" + std::to_string(e.reasons.size() - 1) + " more)";
    if (!e.problem.empty()) reason += " [unreadable: " + e.problem + "]";
    std::string state = j.state;
    if (j.state == "claimed" || j.state == "expired") state += " by " + j.worker;
    if (j.state == "retry" || j.state == "dead")
      state += " after " + std::to_string(j.attempts) + " attempt" + (j.attempts == 1 ? "" : "s") + ": " + j.last_error;
    dead += j.state == "dead" ? 1 : 0;
    rows.push_back({e.structure_sig.substr(0, 12), e.shape_key.empty() ? "-" : e.shape_key, printable(e.graph_name),
                    printable(e.fingerprint.gpu_name),
                    EnvFingerprint::cudnn_version_string(e.fingerprint.cudnn_version), std::to_string(e.request_count),
                    age_of(e.first_seen), age_of(e.last_seen), printable(state), printable(reason)});
  }
  if (!jobs.empty()) print_table(rows);
  std::printf("%zu queued re-tune%s in %s%s\n", jobs.size(), jobs.size() == 1 ? "" : "s",
              printable(shown_store(o)).c_str(),
              dead ? (", " + std::to_string(dead) +
                      " dead-lettered (never claimed again; --clear removes them, "
                      "and a key queued again later is a new job)")
                         .c_str()
                   : "");
  return Status::ok();
}

}  // namespace kiln::cli::plans
