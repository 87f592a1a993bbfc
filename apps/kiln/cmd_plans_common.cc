// The `kiln plans` subcommands' shared helpers (plans.h).
#include <atomic>
#include <cctype>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "kiln/core/read_file.h"
#include "kiln/core/hash.h"
#include "kiln/core/strings.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/retune.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"

#include "plans.h"

namespace kiln::cli::plans {

ListFilter filter_of(const PlansOptions& o) {
  ListFilter f;
  f.structure_prefix = o.structure;
  f.shape_key = o.shape;
  f.fingerprint_key = o.fingerprint;
  f.tuned_only = o.tuned_only;
  return f;
}

StatusOr<bool> said_no_store(const PlansOptions& o) {
  // Only nothing at the path is "no plan store": a store that cannot be reached (a link loop, a folder this
  // user may not enter) is an error with the system's reason. A server location is opened by the caller.
  if (is_server_location(o.store)) return false;
  KILN_ASSIGN_OR_RETURN(bool exists, path_exists(o.store, "plan store"));
  if (exists) return false;
  if (o.json) std::printf("[]\n");
  else std::printf("no plan store at %s\n", printable(o.store).c_str());
  return true;
}

StatusOr<std::unique_ptr<PlanStore>> open_store(const PlansOptions& o, bool must_exist, bool read_only) {
  if (!is_server_location(o.store)) {  // a server has no file to find: connecting says what is there
    KILN_ASSIGN_OR_RETURN(bool exists, path_exists(o.store, "plan store"));
    if (must_exist && !exists) return not_found("no plan store at " + o.store);
  }
  StoreOpenOptions so;
  so.read_only = read_only;
  return PlanStore::open(o.store, so);
}

StatusOr<JudgedAgainst> judged_against(const PlansOptions& o) {
  JudgedAgainst out;
  if (!o.target.empty()) {
    KILN_ASSIGN_OR_RETURN(DeviceProfile profile, load_device_profile(o.target));
    out.fingerprint = fingerprint_for_profile(profile);
    out.basis = "profile " + o.target + " (" + profile.gpu_name + ") with this build's libraries";
    out.kernel_cache_judged = KernelCacheJudged::kWithoutDriver;  // a profile records no driver
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
  out.kernel_cache_judged = KernelCacheJudged::kLibrariesOnly;
  out.basis =
      "this build's libraries only; no GPU here, so GPU, SM and driver are not judged: --target PROFILE judges them";
  return out;
}

namespace {
constexpr size_t kFingerprintKeyDigits = 32;  // fingerprint_key(): XXH3-128 in hex
}  // namespace

StatusOr<std::string> fingerprint_prefix_text(const std::string& given, const char* option) {
  std::string key;
  bool hex = true;
  for (char c : given) {
    hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!hex || key.size() < kMinFingerprintPrefix || key.size() > kFingerprintKeyDigits)
    return invalid_argument(std::string(option) + " takes an environment key (" +
                            std::to_string(kFingerprintKeyDigits) + " hex digits) or a prefix of one of at least " +
                            std::to_string(kMinFingerprintPrefix) + " (ls shows the first 12), got '" +
                            printable(given) + "'");
  return key;
}

StatusOr<std::string> resolve_fingerprint_key(const std::string& given, PlanStore& store) {
  if (given.empty()) return given;
  KILN_ASSIGN_OR_RETURN(std::string prefix, fingerprint_prefix_text(given));
  if (prefix.size() == kFingerprintKeyDigits) return prefix;
  // Every environment key the store files something under (plans and kernel caches).
  std::set<std::string> keys;
  KILN_ASSIGN_OR_RETURN(std::vector<PlanSummary> plans, store.list());
  for (const PlanSummary& p : plans) keys.insert(p.stored_fingerprint_key);
  KILN_ASSIGN_OR_RETURN(std::vector<KernelCacheInfo> caches, store.list_kernel_caches());
  for (const KernelCacheInfo& c : caches) keys.insert(c.fingerprint_key);
  std::vector<std::string> begun;
  for (const std::string& k : keys)
    if (k.compare(0, prefix.size(), prefix) == 0) begun.push_back(k);
  if (begun.empty()) return prefix;  // begins no key: nothing is listed, as for a whole key not in the store
  if (begun.size() == 1) return begun[0];
  return invalid_argument("--fingerprint " + prefix + " is ambiguous: it begins " + std::to_string(begun.size()) +
                          " environment keys in " + store.path() + ": " + printable(join(begun, ", ")) +
                          " (give more of it)");
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
  j["numerics"] = {{"verdict", disposition_name(r.numerics.verdict)},
                   {"max_abs", r.numerics.max_abs},
                   {"max_rel", r.numerics.max_rel},
                   {"nmse", r.numerics.nmse}};
  j["tuned_by"] = r.tuned_by;
  j["created_at"] = r.created_at;
  j["kiln_schema_version"] = r.kiln_schema_version;
  j["checksum"] = r.checksum;
  return j;
}

std::string size_text(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  char buf[32];
  if (bytes < (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

void print_table(const std::vector<std::vector<std::string>>& raw) {
  // Cells come from the store's rows (names, keys): escaped, so that none moves the cursor or forges a line.
  std::vector<std::vector<std::string>> rows = raw;
  for (auto& row : rows)
    for (std::string& cell : row) cell = printable(cell);
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

}  // namespace kiln::cli::plans
