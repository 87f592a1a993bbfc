// PlanStore's kernel caches (kiln/store/kernel_cache_record.h, docs/store.md "Kernel caches"): one row per
// structure and environment, read back only in that exact environment.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/core/strings.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::Stmt;
using store::Txn;

using store::put_field;

namespace {

constexpr const char* kColumns =
    "structure_sig, fingerprint_key, fingerprint_json, graph_name, cache_json, created_at, checksum";

std::string cache_name(const std::string& sig, const std::string& fp) { return store::record_name(sig, "kernels", fp); }

Status validate_kernel_cache(const KernelCacheRecord& r) {
  if (r.structure_sig.empty()) return invalid_argument("kernel cache: empty structure signature");
  const std::string where = "kernel cache " + cache_name(r.structure_sig, r.fingerprint_key());
  if (r.cache_json.empty()) return invalid_argument(where + ": no cache text");
  if (static_cast<int64_t>(r.cache_json.size()) > kMaxKernelCacheBytes)
    return invalid_argument(where + ": " + std::to_string(r.cache_json.size()) + " bytes, over the " +
                            std::to_string(kMaxKernelCacheBytes) + " a row may hold");
  return Status::ok();
}

// Reads the columns of kColumns; "" when sound (types, fingerprint key, checksum, size), else the problem.
std::string read_kernel_cache(const Stmt& st, KernelCacheRecord* r) {
  static const char* names[] = {"structure_sig", "fingerprint_key", "fingerprint_json", "graph_name",
                                "cache_json",    "created_at",      "checksum"};
  for (int c = 0; c < 7; ++c) {
    const int want = c == 5 ? SQLITE_INTEGER : c == 4 ? SQLITE_BLOB : SQLITE_TEXT;
    if (st.type(c) != want) return std::string("column ") + names[c] + " has the wrong type";
  }
  r->structure_sig = st.text(0);
  const std::string stored_key = st.text(1);
  auto fp = fingerprint_from_json(st.text(2));
  if (!fp.is_ok()) return "fingerprint: " + fp.status().message();
  r->fingerprint = *fp;
  if (r->fingerprint_key() != stored_key)
    return "fingerprint_key " + stored_key + " does not match its fingerprint (" + r->fingerprint_key() + ")";
  r->graph_name = st.text(3);
  r->cache_json = st.text(4);
  r->created_at = st.int64(5);
  r->checksum = st.text(6);
  const std::string sum = compute_kernel_cache_checksum(*r);
  if (sum != r->checksum) return "checksum mismatch (stored " + r->checksum + ", computed " + sum + ")";
  Status valid = validate_kernel_cache(*r);
  if (!valid.is_ok()) return valid.message();
  return std::string();
}

// Reads a cache text through without building it (a cache may hold 256 MiB), keeping the first error.
struct JsonScan : nlohmann::json::json_sax_t {
  std::string error;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    error = e.what();
    return false;
  }
};

// "" when the cache text is one whole JSON document, else why not (a truncated text ends too early).
std::string json_problem(const std::string& text) {
  JsonScan scan;
  try {
    if (nlohmann::json::sax_parse(text, &scan)) return std::string();
  } catch (const std::exception& e) {
    scan.error = e.what();
  }
  return "cache text is not whole JSON (truncated or damaged): " + (scan.error.empty() ? "unreadable" : scan.error);
}

}  // namespace

std::vector<std::string> kernel_cache_mismatches(const EnvFingerprint& kept, const EnvFingerprint& current,
                                                 KernelCacheJudged judged) {
  std::vector<std::string> out;
  auto differ = [&](const char* field, int64_t k, int64_t c, std::string (*text)(int64_t)) {
    if (k == c) return;
    std::string kt = text(k), ct = text(c);
    if (kt == ct) kt = std::to_string(k), ct = std::to_string(c);  // the text form hides the difference
    out.push_back(std::string(field) + ": kept " + kt + ", current " + ct + " (must match exactly)");
  };
  auto number = [](int64_t v) { return std::to_string(v); };
  auto cuda = [](int64_t v) { return EnvFingerprint::cuda_version_string(static_cast<int>(v)); };
  auto cudnn = [](int64_t v) { return EnvFingerprint::cudnn_version_string(v); };
  if (judged != KernelCacheJudged::kLibrariesOnly) {
    if (kept.gpu_name != current.gpu_name)
      out.push_back("gpu_name: kept " + kept.gpu_name + ", current " + current.gpu_name + " (must match exactly)");
    differ("sm_version", kept.sm_version, current.sm_version, number);
  }
  if (judged == KernelCacheJudged::kEverything)
    differ("driver_version", kept.driver_version, current.driver_version, cuda);
  differ("cuda_runtime_version", kept.cuda_runtime_version, current.cuda_runtime_version, cuda);
  differ("cudnn_version", kept.cudnn_version, current.cudnn_version, cudnn);
  differ("cudnn_frontend_version", kept.cudnn_frontend_version, current.cudnn_frontend_version, cudnn);
  return out;
}

std::string kernel_cache_display_name(const std::string& structure_sig, const std::string& fingerprint_key,
                                      int64_t rowid) {
  const std::string name = (structure_sig.empty() ? "?" : structure_sig.substr(0, 12)) + "/" +
                           (fingerprint_key.empty() ? "?" : fingerprint_key.substr(0, 12));
  if (!structure_sig.empty() && !fingerprint_key.empty()) return name;
  return name + " (rowid " + std::to_string(rowid) + ")";
}

bool kernel_cache_environment_matches(const EnvFingerprint& kept, const EnvFingerprint& current) {
  return kernel_cache_mismatches(kept, current, KernelCacheJudged::kEverything).empty();
}

std::string compute_kernel_cache_checksum(const KernelCacheRecord& r) {
  std::string canon = "kiln-kernel-cache/v1\n";
  put_field(canon, "structure_sig", r.structure_sig);
  put_field(canon, "fingerprint", fingerprint_to_json(r.fingerprint));
  put_field(canon, "graph_name", r.graph_name);
  put_field(canon, "cache_json", r.cache_json);
  put_field(canon, "created_at", std::to_string(r.created_at));
  return stable_hash128_hex(canon);
}

namespace store {

std::string kernel_caches_table_sql() {
  return "CREATE TABLE IF NOT EXISTS kernel_caches(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  fingerprint_key TEXT NOT NULL,\n"
         "  fingerprint_json TEXT NOT NULL,\n"
         "  graph_name TEXT NOT NULL,\n"
         "  cache_json BLOB NOT NULL,\n"
         "  created_at INTEGER NOT NULL,\n"
         "  checksum TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, fingerprint_key)\n"
         ")";
}

}  // namespace store

StatusOr<KernelCacheRecord> PlanStore::put_kernel_cache(const KernelCacheRecord& record) {
  KILN_RETURN_IF_ERROR(validate_kernel_cache(record));
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  KernelCacheRecord r = record;
  if (r.created_at == 0) r.created_at = store::unix_now();
  r.checksum = compute_kernel_cache_checksum(r);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO kernel_caches(") + kColumns +
                                                        ") VALUES (?1,?2,?3,?4,?5,?6,?7)"));
  st.bind(1, r.structure_sig)
      .bind(2, r.fingerprint_key())
      .bind(3, fingerprint_to_json(r.fingerprint))
      .bind(4, r.graph_name)
      .bind_blob(5, r.cache_json)
      .bind(6, r.created_at)
      .bind(7, r.checksum);
  KILN_RETURN_IF_ERROR(st.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::optional<KernelCacheRecord>> PlanStore::get_kernel_cache(const std::string& structure_sig,
                                                                       const EnvFingerprint& current) {
  const std::string key = fingerprint_key(current);
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return std::optional<KernelCacheRecord>();
  KernelCacheRecord r;
  std::string problem;
  {
    // The text's size first: an oversized row is refused without reading it into memory.
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + kColumns +
                                                          ", length(cache_json) FROM kernel_caches WHERE "
                                                          "structure_sig=?1 AND fingerprint_key=?2"));
    st.bind(1, structure_sig).bind(2, key);
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<KernelCacheRecord>();
    if (st.int64(7) > kMaxKernelCacheBytes)
      problem = std::to_string(st.int64(7)) + " bytes of cache text, over the " + std::to_string(kMaxKernelCacheBytes) +
                " a row may hold";
    else problem = read_kernel_cache(st, &r);
  }
  if (problem.empty()) {
    // The key matched (major versions); the versions themselves must be this environment's exactly. A row of
    // the same key from another minor version is not damaged, only not this process's: a miss, kept until
    // this environment's first dynamic build replaces it.
    if (kernel_cache_environment_matches(r.fingerprint, current)) return std::optional<KernelCacheRecord>(std::move(r));
    return std::optional<KernelCacheRecord>();
  }
  // A damaged cache is dropped (the next dynamic build compiles, and the Planner keeps, a new one).
  ++counters_.corrupt;
  const std::string name = cache_name(structure_sig, key);
  if (read_only_) {
    KILN_LOG(kWarn, "plan store " << path_ << ": corrupt kernel cache " << name << " (" << problem
                                  << "); read-only, left in place, its kernels are compiled again");
    return std::optional<KernelCacheRecord>();
  }
  KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt kernel cache " << name << ": " << problem);
  KILN_RETURN_IF_ERROR(remove_kernel_cache_locked(structure_sig, key).status());
  return std::optional<KernelCacheRecord>();
}

StatusOr<int64_t> PlanStore::remove_kernel_cache(const std::string& structure_sig, const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  return remove_kernel_cache_locked(structure_sig, fingerprint_key);
}

StatusOr<int64_t> PlanStore::remove_kernel_cache_locked(const std::string& structure_sig,
                                                        const std::string& fingerprint_key) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return int64_t{0};
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt del,
                        Stmt::prepare(db_, "DELETE FROM kernel_caches WHERE structure_sig=?1 AND fingerprint_key=?2"));
  del.bind(1, structure_sig).bind(2, fingerprint_key);
  KILN_RETURN_IF_ERROR(del.run());
  const int64_t n = sqlite3_changes(db_);
  KILN_RETURN_IF_ERROR(txn.commit());
  return n;
}

StatusOr<std::vector<KernelCacheInfo>> PlanStore::list_kernel_caches() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KernelCacheInfo> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT structure_sig, fingerprint_key, graph_name, "
                                                    "length(cache_json), created_at, fingerprint_json, rowid FROM "
                                                    "kernel_caches ORDER BY structure_sig, fingerprint_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    KernelCacheInfo info;
    info.rowid = st.int64(6);
    info.structure_sig = st.text(0);
    info.fingerprint_key = st.text(1);
    info.graph_name = st.text(2);
    info.bytes = st.int64(3);
    // A NULL (or text) created_at is an unknown time, not the epoch.
    if (st.type(4) == SQLITE_INTEGER) info.created_at = st.int64(4);
    StatusOr<EnvFingerprint> fp = fingerprint_from_json(st.text(5));
    if (!fp.is_ok()) info.problem = "fingerprint: " + fp.status().message();
    else if (fingerprint_key(*fp) != info.fingerprint_key)
      info.problem = "fingerprint_key does not match its fingerprint (" + fingerprint_key(*fp) + ")";
    else info.fingerprint = *fp;
    out.push_back(std::move(info));
  }
  return out;
}

Status PlanStore::verify_kernel_caches_locked(VerifyReport* out, std::vector<BadKernelCache>* bad) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return Status::ok();
  // Sizes first: a row's text is read only when it is within the limit (a damaged length could be anything).
  struct Row {
    int64_t rowid, bytes;
    std::string sig, key, checksum;
  };
  std::vector<Row> rows;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid, length(cache_json), structure_sig, "
                                                      "fingerprint_key, checksum FROM kernel_caches ORDER BY "
                                                      "structure_sig, fingerprint_key"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      rows.push_back({st.int64(0), st.int64(1), st.text(2), st.text(3), st.text(4)});
    }
  }
  KILN_ASSIGN_OR_RETURN(Stmt one,
                        Stmt::prepare(db_, std::string("SELECT ") + kColumns + " FROM kernel_caches WHERE rowid=?1"));
  for (const Row& row : rows) {
    ++out->kernel_caches_checked;
    std::string problem;
    if (row.bytes > kMaxKernelCacheBytes) {
      problem = std::to_string(row.bytes) + " bytes of cache text, over the " + std::to_string(kMaxKernelCacheBytes) +
                " a row may hold";
    } else {
      one.bind(1, row.rowid);
      KILN_ASSIGN_OR_RETURN(bool found, one.step());
      KernelCacheRecord r;
      if (!found) problem = "row vanished while it was read";
      else problem = read_kernel_cache(one, &r);
      if (problem.empty()) problem = json_problem(r.cache_json);
      KILN_RETURN_IF_ERROR(one.reset());
    }
    if (problem.empty()) {
      ++out->kernel_caches_ok;
      continue;
    }
    out->kernel_cache_problems.push_back({row.sig, "", row.key, problem, row.rowid});
    bad->push_back({row.rowid, row.checksum});
  }
  return Status::ok();
}

StatusOr<int64_t> PlanStore::drop_kernel_cache_row_locked(const BadKernelCache& bad) {
  // By rowid and the stored checksum's text: a row another process replaced meanwhile stays.
  KILN_ASSIGN_OR_RETURN(
      Stmt del,
      Stmt::prepare(db_, "DELETE FROM kernel_caches WHERE rowid=?1 AND IFNULL(CAST(checksum AS TEXT),'')=?2"));
  del.bind(1, bad.rowid).bind(2, bad.stored_checksum);
  KILN_RETURN_IF_ERROR(del.run());
  return static_cast<int64_t>(sqlite3_changes(db_));
}

Status PlanStore::gc_find_kernel_caches_locked(const GcOptions& options, const std::set<int64_t>& gone,
                                               GcGarbage* out) {
  if (!options.current && !options.older_than) return Status::ok();
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return Status::ok();
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid, structure_sig, fingerprint_key, graph_name, "
                                                    "fingerprint_json, created_at, checksum FROM kernel_caches "
                                                    "ORDER BY structure_sig, fingerprint_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    if (gone.count(st.int64(0))) continue;  // damaged: dropped before this, as corrupt
    StatusOr<EnvFingerprint> fp = fingerprint_from_json(st.text(4));
    if (!fp.is_ok()) continue;  // damaged, not stale: drop_corrupt's business
    KernelCacheRemoval what{st.text(1), st.text(2), st.text(3), "", st.int64(0)};
    if (options.current) {
      std::vector<std::string> why = kernel_cache_mismatches(*fp, *options.current, options.kernel_cache_judged);
      if (!why.empty()) {
        what.why = "kept for another environment: " + join(why, "; ");
        out->kernel_caches.push_back({{st.int64(0), st.text(6)}, std::move(what), true});
        continue;
      }
    }
    // As for plans (created_at < the cut-off): a created_at that is not a number is never old.
    if (options.older_than && st.type(5) == SQLITE_INTEGER && st.int64(5) < *options.older_than) {
      what.why = "kept before the --older-than cut-off";
      out->kernel_caches.push_back({{st.int64(0), st.text(6)}, std::move(what), false});
    }
  }
  return Status::ok();
}

}  // namespace kiln
