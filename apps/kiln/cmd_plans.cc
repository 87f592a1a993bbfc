// kiln plans: look after the plan store (ls, show, rm, verify, gc, export, import, queue, retune).
// docs/store.md.
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
#include "kiln/deep_verify.h"
#include "kiln/env_policy.h"
#include "kiln/hash.h"
#include "kiln/lower.h"
#include "kiln/plan_bridge.h"
#include "kiln/plan_store.h"
#include "kiln/retune.h"
#include "kiln/tune_policy.h"

namespace kiln::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_retune_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct PlansOptions {
  std::string store;
  bool json = false;
  std::string structure;
  std::string shape;
  std::string fingerprint;
  bool tuned_only = false;
  bool all = false;
  bool quarantine = false;
  bool deep = false;
  bool stale = false;
  double older_than_days = -1;
  bool keep_quarantine = false;
  bool check_env = false;
  bool force = false;                   // export: write over an existing bundle file
  std::string file;
  std::vector<std::string> specs;       // verify/import --deep: graphs of the records
  uint64_t seed = 1;                    // verify --deep: random inputs
  bool clear = false;                   // queue --clear
  double budget_s = 0;                  // retune: whole run
  double candidate_budget_ms = 1000;    // retune: sampling per candidate
  int top_k = 0;                        // retune: only the heuristic's first k configurations
  std::string target;                   // ls, gc --stale: judge against this device profile
};

ListFilter filter_of(const PlansOptions& o) {
  ListFilter f;
  f.structure_prefix = o.structure;
  f.shape_key = o.shape;
  f.fingerprint_key = o.fingerprint;
  f.tuned_only = o.tuned_only;
  return f;
}

StatusOr<std::unique_ptr<PlanStore>> open_store(const PlansOptions& o, bool must_exist) {
  std::error_code ec;
  if (must_exist && !std::filesystem::exists(o.store, ec)) return not_found("no plan store at " + o.store);
  return PlanStore::open(o.store);
}

// What `ls` and `gc --stale` judge records against, under the default policy: a recorded device
// (--target PROFILE, with this build's libraries), else this machine's GPU, else, without a GPU, this
// build's libraries alone (cuDNN, frontend, CUDA runtime; the device fields are not judged).
struct JudgedAgainst {
  EnvFingerprint fingerprint;
  EnvPolicy policy;
  std::string basis;  // for people: "this GPU (NVIDIA H200)", ...
  bool device_judged = true;
};

StatusOr<JudgedAgainst> judged_against(const PlansOptions& o) {
  JudgedAgainst out;
  if (!o.target.empty()) {
    KILN_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(o.target));
    out.fingerprint = fingerprint_for_profile(profile);
    out.basis = "profile " + o.target + " (" + profile.gpu_name + ") with this build's libraries";
    return out;
  }
  EnvReport env = collect_environment(0);
  out.fingerprint = env.fingerprint;
  if (env.device_status.is_ok()) {
    out.basis = "this GPU (" + env.fingerprint.gpu_name + ")";
    return out;
  }
  out.policy = without_device_fields(out.policy);
  out.device_judged = false;
  out.basis = "this build's libraries only; no GPU here, so GPU, SM and driver are not judged: --target PROFILE judges them";
  return out;
}

std::string age_of(int64_t created_at) {
  int64_t d = static_cast<int64_t>(std::time(nullptr)) - created_at;
  if (d < 0) d = 0;
  if (d < 120) return std::to_string(d) + "s";
  if (d < 7200) return std::to_string(d / 60) + "m";
  if (d < 172800) return std::to_string(d / 3600) + "h";
  return std::to_string(d / 86400) + "d";
}

// The plan identity text that `kiln tune` prints and `--pin` accepts ("eng10_k2=4_k13=0").
std::string engine_text(int64_t engine, const Knobs& knobs) {
  return plan_identity(engine, knobs);
}

std::string ms_text(double ms, bool tuned) {
  if (!tuned) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f ms", ms);
  return buf;
}

nlohmann::ordered_json record_json(const PlanRecord& r, int64_t plan_size) {
  nlohmann::ordered_json j;
  j["structure_sig"] = r.structure_sig;
  j["shape_key"] = r.shape_key;
  j["fingerprint_key"] = r.fingerprint_key();
  j["fingerprint"] = nlohmann::ordered_json::parse(fingerprint_to_json(r.fingerprint), nullptr, false);
  j["plan_size"] = plan_size;
  j["engine_id"] = r.engine_id;
  j["knobs"] = knobs_to_text(r.knobs);
  j["workspace_bytes"] = r.workspace_bytes;
  j["tuned"] = r.tuned;
  j["stats"] = {{"median_ms", r.stats.median_ms},
                {"min_ms", r.stats.min_ms},
                {"max_ms", r.stats.max_ms},
                {"noise_rel", r.stats.noise_rel},
                {"samples", r.stats.samples},
                {"runner_up_engine", r.stats.runner_up_engine},
                {"runner_up_knobs", knobs_to_text(r.stats.runner_up_knobs)},
                {"runner_up_median_ms", r.stats.runner_up_median_ms}};
  j["numerics"] = {{"verdict", r.numerics.verdict},
                   {"max_abs", r.numerics.max_abs},
                   {"max_rel", r.numerics.max_rel},
                   {"nmse", r.numerics.nmse}};
  j["tuned_by"] = r.tuned_by;
  j["created_at"] = r.created_at;
  j["kiln_schema_version"] = r.kiln_schema_version;
  j["checksum"] = r.checksum;
  return j;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i)
      line += row[i] + (i + 1 < row.size() ? std::string(w[i] - row[i].size() + 2, ' ') : "");
    std::printf("%s\n", line.c_str());
  }
}

Status run_ls(const PlansOptions& o) {
  std::error_code ec;
  if (!std::filesystem::exists(o.store, ec)) {
    if (o.json)
      std::printf("[]\n");
    else
      std::printf("no plan store at %s\n", o.store.c_str());
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store->list(filter_of(o)));
  KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
  std::vector<FingerprintCheck> checks;
  for (const PlanSummary& p : plans) checks.push_back(check_fingerprint(p.record.fingerprint, env.fingerprint, env.policy));
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (size_t i = 0; i < plans.size(); ++i) {
      nlohmann::ordered_json j = record_json(plans[i].record, plans[i].plan_size);
      j["status"] = checks[i].pass ? "current" : "stale";
      j["stale_reasons"] = checks[i].reasons;
      j["judged_against"] = env.basis;
      arr.push_back(std::move(j));
    }
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "GPU", "CUDNN", "FRONTEND", "ENGINE", "TUNED", "MEDIAN", "VERDICT", "AGE", "STATUS"}};
  size_t stale = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanRecord& r = plans[i].record;
    stale += checks[i].pass ? 0 : 1;
    rows.push_back({r.structure_sig.substr(0, 12), r.shape_key, r.fingerprint.gpu_name,
                    EnvFingerprint::cudnn_version_string(r.fingerprint.cudnn_version),
                    EnvFingerprint::cudnn_version_string(r.fingerprint.cudnn_frontend_version),
                    engine_text(r.engine_id, r.knobs), r.tuned ? "yes" : "no", ms_text(r.stats.median_ms, r.tuned),
                    r.numerics.verdict, age_of(r.created_at), checks[i].pass ? "current" : "STALE"});
  }
  print_table(rows);
  for (size_t i = 0; i < plans.size(); ++i) {
    if (checks[i].pass) continue;
    std::string why;
    for (const std::string& reason : checks[i].reasons) why += (why.empty() ? "" : "; ") + reason;
    std::printf("stale %s/%s: %s\n", plans[i].record.structure_sig.substr(0, 12).c_str(),
                plans[i].record.shape_key.c_str(), why.c_str());
  }
  std::printf("%zu plan%s in %s, %zu stale (judged against %s)\n", plans.size(), plans.size() == 1 ? "" : "s",
              o.store.c_str(), stale, env.basis.c_str());
  if (stale > 0)
    std::printf("(a stale plan is never run: `kiln plans retune` or `kiln tune --untuned` bakes it again on the "
                "GPU, `kiln compile --target` ahead of time; `kiln plans gc --stale` drops it)\n");
  return Status::ok();
}

Status run_show(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store->list(filter_of(o)));
  if (plans.empty()) return not_found("no plan matches structure '" + o.structure + "'" +
                                      (o.shape.empty() ? "" : " shape '" + o.shape + "'"));
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const PlanSummary& p : plans) {
    StatusOr<PlanRecord> full = store->read(p.record.structure_sig, p.record.shape_key, p.record.fingerprint_key());
    nlohmann::ordered_json j = record_json(p.record, p.plan_size);
    if (full.is_ok()) {
      j["plan_bytes_xxh128"] = stable_hash128_hex(full->plan_bytes);
      std::string sum = compute_record_checksum(*full);
      j["checksum_ok"] = sum == full->checksum;
    } else {
      j["error"] = full.status().message();
    }
    arr.push_back(j);
  }
  std::printf("%s\n", (arr.size() == 1 ? arr[0] : arr)
                          .dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                          .c_str());
  return Status::ok();
}

Status run_rm(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(int64_t n, store->remove(filter_of(o), o.all));
  std::printf("removed %" PRId64 " plan%s\n", n, n == 1 ? "" : "s");
  return Status::ok();
}

// The deep verifier of `verify --deep` / `import --deep`: graphs from --spec files and the store, checks on
// this machine's GPU (Unavailable, exit 3, without one).
StatusOr<std::unique_ptr<DeepPlanVerifier>> make_deep_verifier(const PlansOptions& o, PlanStore& store,
                                                               const char* command) {
  GraphCatalog catalog;
  for (const std::string& spec : o.specs) KILN_RETURN_IF_ERROR(catalog.add_spec_file(spec));
  KILN_RETURN_IF_ERROR(catalog.add_store(store));
  DeepVerifyOptions dvo;
  dvo.check.seed = o.seed;
  StatusOr<std::unique_ptr<DeepPlanVerifier>> v = DeepPlanVerifier::create(std::move(catalog), dvo);
  if (!v.is_ok() && v.status().code() == StatusCode::kUnavailable)
    return unavailable(std::string(command) + " --deep runs each plan on this machine's GPU, and there is none: " +
                       collect_environment(0).device_status.message());
  return v;
}

std::string short_key(const std::string& sig, const std::string& shape, const std::string& fp) {
  return sig.substr(0, 12) + "/" + shape + "/" + fp.substr(0, 12);
}

std::string deep_status(const DeepVerifyRow& r) {
  if (!r.checked) return "not deep-checked";
  return verdict_name(r.result.verdict);
}

Status run_verify(const PlansOptions& o) {
  if (!o.specs.empty() && !o.deep) return invalid_argument("verify: --spec gives the graphs for --deep; add --deep");
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  VerifyOptions vo;
  vo.quarantine = o.quarantine;
  std::unique_ptr<DeepPlanVerifier> deep;
  if (o.deep) {
    KILN_ASSIGN_OR_RETURN(deep, make_deep_verifier(o, *store, "verify"));
    vo.validator = deep->validator();
  }
  KILN_ASSIGN_OR_RETURN(VerifyReport rep, store->verify(vo));
  // Records the deep check refused: reported as deep problems (exit 1), not as corrupt ones (exit 4).
  std::map<std::tuple<std::string, std::string, std::string>, const DeepVerifyRow*> deep_problem;
  if (deep)
    for (const DeepVerifyRow& r : deep->rows())
      if (r.checked && r.result.problem()) deep_problem[{r.structure_sig, r.shape_key, r.fingerprint_key}] = &r;
  std::vector<const VerifyProblem*> corrupt;
  for (const auto& p : rep.problems)
    if (!deep_problem.count({p.structure_sig, p.shape_key, p.fingerprint_key})) corrupt.push_back(&p);
  size_t passed = 0, not_checked = 0, not_verified = 0;
  if (deep)
    for (const DeepVerifyRow& r : deep->rows()) {
      if (!r.checked) ++not_checked;
      else if (r.result.verdict == Verdict::kPassed) ++passed;
      else if (r.result.verdict == Verdict::kNotVerified) ++not_verified;
    }

  if (o.json) {
    nlohmann::ordered_json j;
    j["store"] = o.store;
    j["integrity"] = rep.integrity;
    j["checked"] = rep.checked;
    j["ok"] = rep.ok;
    nlohmann::ordered_json probs = nlohmann::ordered_json::array();
    for (const auto& p : rep.problems)
      probs.push_back({{"structure_sig", p.structure_sig},
                       {"shape_key", p.shape_key},
                       {"fingerprint_key", p.fingerprint_key},
                       {"reason", p.reason}});
    j["problems"] = probs;
    if (deep) {
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const DeepVerifyRow& r : deep->rows()) {
        nlohmann::ordered_json row = {{"structure_sig", r.structure_sig}, {"shape_key", r.shape_key},
                                      {"fingerprint_key", r.fingerprint_key}, {"plan", r.plan},
                                      {"status", deep_status(r)}};
        if (r.checked) {
          row["message"] = r.result.message;
          row["reference"] = r.result.reference_kind;
          row["max_abs"] = r.result.max_abs;
          row["max_rel"] = r.result.max_rel;
          row["nmse"] = r.result.nmse;
          row["graph"] = r.graph_source;
        } else {
          row["reason"] = r.reason;
        }
        rows.push_back(row);
      }
      j["deep"] = rows;
    }
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    for (const VerifyProblem* p : corrupt)
      std::printf("CORRUPT  %s: %s%s\n", short_key(p->structure_sig, p->shape_key, p->fingerprint_key).c_str(),
                  p->reason.c_str(), o.quarantine ? " (quarantined)" : "");
    if (deep)
      for (const DeepVerifyRow& r : deep->rows()) {
        std::string key = short_key(r.structure_sig, r.shape_key, r.fingerprint_key);
        if (!r.checked) {
          std::printf("NOT DEEP-CHECKED  %s %s: %s\n", key.c_str(), r.plan.c_str(), r.reason.c_str());
          continue;
        }
        std::string line = std::string(verdict_name(r.result.verdict)) + "  " + key + " " + r.plan;
        char measures[160];
        std::snprintf(measures, sizeof measures, " max_abs=%.3g max_rel=%.3g nmse=%.3g (%s reference)", r.result.max_abs,
                      r.result.max_rel, r.result.nmse, r.result.reference_kind.c_str());
        if (r.result.verdict == Verdict::kPassed || r.result.verdict == Verdict::kIncorrect) line += measures;
        line += "; graph: " + r.graph_source;
        if (r.result.verdict != Verdict::kPassed) line += "\n    " + r.result.message;
        if (r.result.problem() && o.quarantine) line += " (quarantined)";
        std::printf("%s\n", line.c_str());
      }
    std::printf("checked %" PRId64 " plan%s: %" PRId64 " ok, %zu corrupt", rep.checked, rep.checked == 1 ? "" : "s",
                rep.ok, corrupt.size());
    if (deep)
      std::printf("; deep: %zu passed, %zu failed the check, %zu not verified (no reference), %zu not deep-checked", passed,
                  deep_problem.size(), not_verified, not_checked);
    std::printf("; database integrity: %s\n", rep.integrity.c_str());
  }
  if (rep.integrity != "ok") return corruption("plan store " + o.store + " failed integrity_check: " + rep.integrity);
  if (!corrupt.empty())
    return corruption(std::to_string(corrupt.size()) + " of " + std::to_string(rep.checked) +
                      " plan records in " + o.store + " are corrupt" +
                      (o.quarantine ? " (moved to quarantine)" : " (run with --quarantine to set them aside)"));
  if (!deep_problem.empty())
    return check_failed(std::to_string(deep_problem.size()) + " of " + std::to_string(rep.checked) + " plans in " +
                        o.store + " failed the deep check on this GPU" +
                        (o.quarantine ? " (moved to quarantine)" : " (run with --quarantine to set them aside)"));
  return Status::ok();
}

Status run_gc(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  GcOptions g;
  g.drop_quarantine = !o.keep_quarantine;
  if (o.older_than_days >= 0)
    g.older_than = static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(o.older_than_days * 86400);
  if (o.stale) {
    KILN_ASSIGN_OR_RETURN(JudgedAgainst env, judged_against(o));
    if (!env.device_judged)
      return unavailable("gc --stale compares plans with this machine's GPU, and there is none: name the "
                         "device with --target PROFILE (e.g. profiles/h200.json)");
    g.current = env.fingerprint;
    g.policy = env.policy;
  }
  KILN_ASSIGN_OR_RETURN(GcReport rep, store->gc(g));
  std::printf("removed %" PRId64 " stale, %" PRId64 " old, %" PRId64 " corrupt plan%s; cleared %" PRId64
              " quarantined; dropped %" PRId64 " unused graph spec%s\n",
              rep.stale_removed, rep.old_removed, rep.corrupt_removed, rep.corrupt_removed == 1 ? "" : "s",
              rep.quarantine_removed, rep.graph_specs_removed, rep.graph_specs_removed == 1 ? "" : "s");
  return Status::ok();
}

Status run_export(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  ExportOptions eo;
  eo.filter = filter_of(o);
  eo.overwrite = o.force;
  KILN_ASSIGN_OR_RETURN(ExportReport rep, store->export_bundle(o.file, eo));
  std::printf("exported %" PRId64 " plan%s (%zu environment%s, %" PRId64 " graph spec%s) to %s\n", rep.records,
              rep.records == 1 ? "" : "s", rep.fingerprint_keys.size(), rep.fingerprint_keys.size() == 1 ? "" : "s",
              rep.graph_specs, rep.graph_specs == 1 ? "" : "s", o.file.c_str());
  return Status::ok();
}

Status run_import(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, false));
  ImportOptions io;
  if (o.check_env) {
    EnvReport env = collect_environment(0);
    if (!env.device_status.is_ok())
      return unavailable("import --check-env needs this machine's GPU: " + env.device_status.message());
    io.current = env.fingerprint;
  }
  if (!o.specs.empty() && !o.deep) return invalid_argument("import: --spec gives the graphs for --deep; add --deep");
  std::unique_ptr<DeepPlanVerifier> deep;
  if (o.deep) {
    KILN_ASSIGN_OR_RETURN(deep, make_deep_verifier(o, *store, "import"));
    io.validator = deep->validator();
  }
  KILN_ASSIGN_OR_RETURN(ImportReport rep, store->import_bundle(o.file, io));
  std::printf("imported %" PRId64 ", replaced %" PRId64 " older, kept %" PRId64 " newer, %" PRId64
              " unchanged, skipped %" PRId64 " for another environment; %" PRId64 " graph spec%s added\n",
              rep.imported, rep.replaced, rep.kept_newer, rep.unchanged, rep.skipped_stale, rep.graph_specs,
              rep.graph_specs == 1 ? "" : "s");
  if (deep) {
    size_t checked = 0;
    for (const DeepVerifyRow& r : deep->rows()) checked += r.checked ? 1 : 0;
    std::printf("deep-checked %zu of %zu plans on this GPU (the others: no graph, pass --spec, or another "
                "environment)\n", checked, deep->rows().size());
  }
  return Status::ok();
}

// ---- the re-tune queue -------------------------------------------------------------------------------

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
  if (spec.is_discarded())
    j["spec_json"] = e.spec_json;
  else
    j["spec"] = spec;
  if (!e.problem.empty()) j["problem"] = e.problem;
  return j;
}

Status run_queue(const PlansOptions& o) {
  std::error_code ec;
  if (!std::filesystem::exists(o.store, ec)) {
    if (o.clear) return not_found("no plan store at " + o.store);
    if (o.json)
      std::printf("[]\n");
    else
      std::printf("no plan store at %s\n", o.store.c_str());
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queue, store->list_retune_queue(o.fingerprint));
  if (!o.structure.empty()) {
    std::vector<RetuneQueueEntry> kept;
    for (auto& e : queue)
      if (e.structure_sig.compare(0, o.structure.size(), o.structure) == 0) kept.push_back(std::move(e));
    queue = std::move(kept);
  }
  if (o.clear) {
    int64_t removed = 0;
    for (const auto& e : queue) {
      KILN_ASSIGN_OR_RETURN(bool r, store->remove_from_retune_queue(e.structure_sig, e.shape_key, e.fingerprint_key));
      removed += r ? 1 : 0;
    }
    std::printf("removed %" PRId64 " queued re-tune%s\n", removed, removed == 1 ? "" : "s");
    return Status::ok();
  }
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& e : queue) arr.push_back(queue_entry_json(e));
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "GRAPH", "GPU", "CUDNN", "REQUESTS", "FIRST", "LAST", "REASON"}};
  for (const auto& e : queue) {
    std::string reason = e.reasons.empty() ? "-" : e.reasons.back();
    if (e.reasons.size() > 1) reason += " (+" + std::to_string(e.reasons.size() - 1) + " more)";
    if (!e.problem.empty()) reason += " [unreadable: " + e.problem + "]";
    rows.push_back({e.structure_sig.substr(0, 12), e.shape_key.empty() ? "-" : e.shape_key, e.graph_name,
                    e.fingerprint.gpu_name, EnvFingerprint::cudnn_version_string(e.fingerprint.cudnn_version),
                    std::to_string(e.request_count), age_of(e.first_seen), age_of(e.last_seen), reason});
  }
  if (!queue.empty()) print_table(rows);
  std::printf("%zu queued re-tune%s in %s\n", queue.size(), queue.size() == 1 ? "" : "s", o.store.c_str());
  return Status::ok();
}

Status run_retune(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("plans retune tunes each queued graph on this machine's GPU, and there is none: " +
                       env.device_status.message());
  RetuneOptions ro;
  ro.current = env.fingerprint;
  ro.budget_s = o.budget_s;
  ro.tune.measure.stopping.time_budget_ms = o.candidate_budget_ms;
  ro.tune.top_k = o.top_k;
  ro.cancel = &g_interrupted;
  ro.on_row = [&](const RetuneRowReport& r) {
    if (o.json) return;
    std::string key = r.entry.structure_sig.substr(0, 12) + (r.entry.shape_key.empty() ? "" : "/" + r.entry.shape_key);
    std::string line = std::string(retune_outcome_name(r.outcome)) + "  " + key + " '" + r.entry.graph_name + "'";
    if (r.outcome == RetuneOutcome::kTuned || r.outcome == RetuneOutcome::kAlreadyTuned) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": %s %.4f ms %s", r.winner.c_str(), r.median_ms, r.verdict.c_str());
      line += buf;
    }
    if (r.outcome != RetuneOutcome::kTuned && !r.message.empty()) line += ": " + r.message;
    char secs[32];
    std::snprintf(secs, sizeof secs, " (%.1f s)", r.seconds);
    if (r.outcome == RetuneOutcome::kTuned || r.outcome == RetuneOutcome::kFailed) line += secs;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  g_interrupted = false;
  std::signal(SIGINT, on_retune_sigint);
  StatusOr<RetuneReport> rep = retune_queued(*store, ro);
  std::signal(SIGINT, SIG_DFL);
  if (!rep.is_ok()) return rep.status();
  if (o.json) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const RetuneRowReport& r : rep->rows)
      rows.push_back({{"structure_sig", r.entry.structure_sig}, {"shape_key", r.entry.shape_key},
                      {"fingerprint_key", r.entry.fingerprint_key}, {"graph_name", r.entry.graph_name},
                      {"outcome", retune_outcome_name(r.outcome)}, {"message", r.message}, {"winner", r.winner},
                      {"median_ms", r.median_ms}, {"verdict", r.verdict}, {"seconds", r.seconds}});
    nlohmann::ordered_json j = {{"store", o.store}, {"tuned", rep->tuned}, {"already_tuned", rep->already_tuned},
                                {"failed", rep->failed}, {"other_environment", rep->other_environment},
                                {"not_reached", rep->not_reached}, {"budget_exhausted", rep->budget_exhausted},
                                {"cancelled", rep->cancelled}, {"rows", rows}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::printf("re-tuned %" PRId64 " of %zu queued (%" PRId64 " already tuned, %" PRId64 " failed, %" PRId64
                " for other environments, %" PRId64 " not reached%s) in %s\n",
                rep->tuned, rep->rows.size(), rep->already_tuned, rep->failed, rep->other_environment,
                rep->not_reached, rep->budget_exhausted ? ": the time budget ran out" : "", o.store.c_str());
  }
  if (rep->cancelled) return cancelled("interrupted: re-tuned plans were stored, the rest stay queued");
  if (rep->failed > 0)
    return check_failed(std::to_string(rep->failed) + " queued re-tune" + (rep->failed == 1 ? "" : "s") +
                        " failed (kept in the queue; `kiln plans queue` lists them)");
  return Status::ok();
}

void add_plans(CLI::App& app, Runner* run) {
  auto o = std::make_shared<PlansOptions>();
  o->store = default_store_path();
  CLI::App* plans = app.add_subcommand("plans", "Look after the plan store (" + o->store + ")");
  plans->require_subcommand(1);

  auto add = [&](const char* name, const char* help, Status (*fn)(const PlansOptions&)) {
    CLI::App* sub = plans->add_subcommand(name, help);
    sub->add_option("--store", o->store, "Plan store file (default: $KILN_STORE, $XDG_CACHE_HOME/kiln/plans.db "
                                         "or ~/.cache/kiln/plans.db)");
    sub->callback([run, o, fn] { *run = [o, fn] { return fn(*o); }; });
    return sub;
  };
  auto add_filter = [&](CLI::App* sub) {
    sub->add_option("--structure", o->structure, "Structure signature (or a prefix of it)");
    sub->add_option("--shape", o->shape, "Shape key");
    sub->add_option("--fingerprint", o->fingerprint, "Environment fingerprint key");
    sub->add_flag("--tuned", o->tuned_only, "Only tuned plans");
  };

  CLI::App* ls = add("ls", "List stored plans, each current or stale for this environment", run_ls);
  add_filter(ls);
  ls->add_flag("--json", o->json, "Machine-readable output");
  ls->add_option("--target", o->target, "Judge staleness against this device profile (default: this GPU)");

  CLI::App* show = add("show", "Show every field of the plans matching a structure signature prefix", run_show);
  show->add_option("structure", o->structure, "Structure signature (or a prefix of it)")->required();
  show->add_option("--shape", o->shape, "Shape key");
  show->add_option("--fingerprint", o->fingerprint, "Environment fingerprint key");

  CLI::App* rm = add("rm", "Remove plans", run_rm);
  add_filter(rm);
  rm->add_flag("--all", o->all, "Remove every plan");

  CLI::App* verify = add("verify", "Re-check every record's checksum and the database (exit 4 if corrupt)", run_verify);
  verify->add_flag("--quarantine", o->quarantine, "Move corrupt records (and with --deep, failing plans) to the quarantine table");
  verify->add_flag("--deep", o->deep,
                   "Also run each plan on this GPU and check its outputs against a reference (exit 1 if one fails)");
  verify->add_option("--spec", o->specs, "Spec files giving the graphs of the records to deep-check (with --deep)");
  verify->add_option("--seed", o->seed, "Seed of the random inputs of --deep")->capture_default_str();
  verify->add_flag("--json", o->json, "Machine-readable output");

  CLI::App* gc = add("gc", "Drop corrupt, quarantined, stale or old plans", run_gc);
  gc->add_flag("--stale", o->stale, "Drop plans whose environment does not pass the default policy on this GPU");
  gc->add_option("--target", o->target, "With --stale: judge against this device profile instead of this GPU");
  gc->add_option("--older-than", o->older_than_days, "Drop plans created more than this many days ago")
      ->check(CLI::NonNegativeNumber);
  gc->add_flag("--keep-quarantine", o->keep_quarantine, "Keep the quarantine table");

  CLI::App* ex = add("export", "Write plans to a bundle file", run_export);
  ex->add_option("file", o->file, "Bundle file to write (never the store itself)")->required();
  ex->add_flag("--force", o->force, "Write over an existing bundle file");
  add_filter(ex);

  CLI::App* im = add("import", "Merge a bundle file into the store (newer existing plans are kept)", run_import);
  im->add_option("file", o->file, "Bundle file to read")->required();
  im->add_flag("--check-env", o->check_env, "Skip plans whose environment does not pass the policy on this GPU");
  im->add_flag("--deep", o->deep, "Also run each plan whose graph is known on this GPU and check its outputs");
  im->add_option("--spec", o->specs, "Spec files giving the graphs of the records to deep-check (with --deep)");

  CLI::App* queue = add("queue", "List the graphs queued for re-tuning (by runs that could not use a tuned plan)", run_queue);
  queue->add_flag("--json", o->json, "Machine-readable output (with each graph's spec)");
  queue->add_option("--structure", o->structure, "Only this structure signature (or a prefix of it)");
  queue->add_option("--fingerprint", o->fingerprint, "Only this environment fingerprint key");
  queue->add_flag("--clear", o->clear, "Remove the listed rows instead of printing them");

  CLI::App* retune = add("retune", "Tune the queued graphs of this environment on this GPU and store the winners", run_retune);
  retune->add_option("--budget", o->budget_s, "Time budget for the whole run, seconds (0: none)")
      ->check(CLI::NonNegativeNumber);
  retune->add_option("--candidate-budget-ms", o->candidate_budget_ms, "Sampling budget per candidate, ms")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  retune->add_option("--top-k", o->top_k, "Only the heuristic's first k configurations (quick tuning)")
      ->check(CLI::NonNegativeNumber);
  retune->add_flag("--json", o->json, "Machine-readable report");
}

}  // namespace

KILN_REGISTER_COMMAND("plans", add_plans);

}  // namespace kiln::cli
