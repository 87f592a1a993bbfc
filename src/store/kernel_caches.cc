// PlanStore's kernel caches (kiln/store/kernel_cache_record.h, docs/store.md "Kernel caches"): one row per
// structure and environment, read back only in that exact environment.
#include <nlohmann/json.hpp>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::Stmt;
using store::WriteTxn;

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

}  // namespace

bool kernel_cache_environment_matches(const EnvFingerprint& kept, const EnvFingerprint& current) {
  return kept.gpu_name == current.gpu_name && kept.sm_version == current.sm_version &&
         kept.driver_version == current.driver_version && kept.cuda_runtime_version == current.cuda_runtime_version &&
         kept.cudnn_version == current.cudnn_version && kept.cudnn_frontend_version == current.cudnn_frontend_version;
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
  WriteTxn txn(db_);
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
  WriteTxn txn(db_);
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
                                                    "length(cache_json), created_at FROM kernel_caches ORDER BY "
                                                    "structure_sig, fingerprint_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back({st.text(0), st.text(1), st.text(2), st.int64(3), st.int64(4)});
  }
  return out;
}

}  // namespace kiln
