// kiln plans: look after the plan store (ls, show, rm, verify, gc, export, import). docs/store.md.
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/env_policy.h"
#include "kiln/hash.h"
#include "kiln/plan_store.h"
#include "kiln/tune_policy.h"

namespace kiln::cli {

// ---- GPU-side verification hook --------------------------------------------------------------------
// `kiln plans verify --deep` (and `import --deep`) pass this validator to the store. The lower layer
// replaces the body with a check that deserializes plan_bytes with cuDNN Frontend on the device (and may
// run the plan once). A validator returns non-OK to mark the record corrupt. Until it is filled in,
// --deep reports NotSupported instead of pretending to check.
PlanValidator make_device_plan_validator() { return nullptr; }

namespace {

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
  std::string file;
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
  if (o.json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const PlanSummary& p : plans) arr.push_back(record_json(p.record, p.plan_size));
    std::printf("%s\n", arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STRUCTURE", "SHAPE", "GPU", "CUDNN", "ENGINE", "TUNED", "MEDIAN", "VERDICT", "AGE"}};
  for (const PlanSummary& p : plans) {
    const PlanRecord& r = p.record;
    rows.push_back({r.structure_sig.substr(0, 12), r.shape_key, r.fingerprint.gpu_name,
                    EnvFingerprint::cudnn_version_string(r.fingerprint.cudnn_version), engine_text(r.engine_id, r.knobs),
                    r.tuned ? "yes" : "no", ms_text(r.stats.median_ms, r.tuned), r.numerics.verdict,
                    age_of(r.created_at)});
  }
  print_table(rows);
  std::printf("%zu plan%s in %s\n", plans.size(), plans.size() == 1 ? "" : "s", o.store.c_str());
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

Status run_verify(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  VerifyOptions vo;
  vo.quarantine = o.quarantine;
  if (o.deep) {
    vo.validator = make_device_plan_validator();
    if (!vo.validator) return not_supported("verify --deep: no device-side plan validator is built into this kiln");
  }
  KILN_ASSIGN_OR_RETURN(VerifyReport rep, store->verify(vo));
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
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    for (const auto& p : rep.problems)
      std::printf("CORRUPT  %s/%s/%s: %s%s\n", p.structure_sig.substr(0, 12).c_str(), p.shape_key.c_str(),
                  p.fingerprint_key.substr(0, 12).c_str(), p.reason.c_str(), o.quarantine ? " (quarantined)" : "");
    std::printf("checked %" PRId64 " plan%s: %" PRId64 " ok, %zu corrupt; database integrity: %s\n", rep.checked,
                rep.checked == 1 ? "" : "s", rep.ok, rep.problems.size(), rep.integrity.c_str());
  }
  if (rep.integrity != "ok") return corruption("plan store " + o.store + " failed integrity_check: " + rep.integrity);
  if (!rep.problems.empty())
    return corruption(std::to_string(rep.problems.size()) + " of " + std::to_string(rep.checked) +
                      " plan records in " + o.store + " are corrupt" +
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
    EnvReport env = collect_environment(0);
    if (!env.device_status.is_ok())
      return unavailable("gc --stale compares plans with this machine's GPU, and there is none: " +
                         env.device_status.message());
    g.current = env.fingerprint;
  }
  KILN_ASSIGN_OR_RETURN(GcReport rep, store->gc(g));
  std::printf("removed %" PRId64 " stale, %" PRId64 " old, %" PRId64 " corrupt plan%s; cleared %" PRId64
              " quarantined\n",
              rep.stale_removed, rep.old_removed, rep.corrupt_removed, rep.corrupt_removed == 1 ? "" : "s",
              rep.quarantine_removed);
  return Status::ok();
}

Status run_export(const PlansOptions& o) {
  KILN_ASSIGN_OR_RETURN(auto store, open_store(o, true));
  ExportOptions eo;
  eo.filter = filter_of(o);
  KILN_ASSIGN_OR_RETURN(ExportReport rep, store->export_bundle(o.file, eo));
  std::printf("exported %" PRId64 " plan%s (%zu environment%s) to %s\n", rep.records, rep.records == 1 ? "" : "s",
              rep.fingerprint_keys.size(), rep.fingerprint_keys.size() == 1 ? "" : "s", o.file.c_str());
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
  if (o.deep) {
    io.validator = make_device_plan_validator();
    if (!io.validator) return not_supported("import --deep: no device-side plan validator is built into this kiln");
  }
  KILN_ASSIGN_OR_RETURN(ImportReport rep, store->import_bundle(o.file, io));
  std::printf("imported %" PRId64 ", replaced %" PRId64 " older, kept %" PRId64 " newer, %" PRId64
              " unchanged, skipped %" PRId64 " for another environment\n",
              rep.imported, rep.replaced, rep.kept_newer, rep.unchanged, rep.skipped_stale);
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

  CLI::App* ls = add("ls", "List stored plans", run_ls);
  add_filter(ls);
  ls->add_flag("--json", o->json, "Machine-readable output");

  CLI::App* show = add("show", "Show every field of the plans matching a structure signature prefix", run_show);
  show->add_option("structure", o->structure, "Structure signature (or a prefix of it)")->required();
  show->add_option("--shape", o->shape, "Shape key");
  show->add_option("--fingerprint", o->fingerprint, "Environment fingerprint key");

  CLI::App* rm = add("rm", "Remove plans", run_rm);
  add_filter(rm);
  rm->add_flag("--all", o->all, "Remove every plan");

  CLI::App* verify = add("verify", "Re-check every record's checksum and the database (exit 4 if corrupt)", run_verify);
  verify->add_flag("--quarantine", o->quarantine, "Move corrupt records to the quarantine table");
  verify->add_flag("--deep", o->deep, "Also check that each plan deserializes on the device");
  verify->add_flag("--json", o->json, "Machine-readable output");

  CLI::App* gc = add("gc", "Drop corrupt, quarantined, stale or old plans", run_gc);
  gc->add_flag("--stale", o->stale, "Drop plans whose environment does not pass the default policy on this GPU");
  gc->add_option("--older-than", o->older_than_days, "Drop plans created more than this many days ago")
      ->check(CLI::NonNegativeNumber);
  gc->add_flag("--keep-quarantine", o->keep_quarantine, "Keep the quarantine table");

  CLI::App* ex = add("export", "Write plans to a bundle file", run_export);
  ex->add_option("file", o->file, "Bundle file to write")->required();
  add_filter(ex);

  CLI::App* im = add("import", "Merge a bundle file into the store (newer existing plans are kept)", run_import);
  im->add_option("file", o->file, "Bundle file to read")->required();
  im->add_flag("--check-env", o->check_env, "Skip plans whose environment does not pass the policy on this GPU");
  im->add_flag("--deep", o->deep, "Also check that each plan deserializes on the device");
}

}  // namespace

KILN_REGISTER_COMMAND("plans", add_plans);

}  // namespace kiln::cli
