// PlanStore's kernel caches (kiln/store/kernel_cache_record.h, docs/store.md "Kernel caches"): one row per
// structure and environment, read back only in that exact environment.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/core/strings.h"
#include "kiln/store/env_policy.h"
#include "store/sql_plan_store.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_table.h"
#include "store/sql.h"

namespace kiln {

using store::Stmt;
using store::Txn;

namespace {

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

namespace {

const store::TableCodec& caches_table() {
  static const store::TableCodec t{
      "kernel_caches",
      {store::text("structure_sig"), store::text("fingerprint_key", store::kUnchecked),
       store::text("fingerprint_json", "fingerprint"), store::text("graph_name"), store::blob("cache_json"),
       store::integer("created_at"), store::text("checksum", store::kUnchecked)},
      {"structure_sig", "fingerprint_key"},
      "kiln-kernel-cache/v1"};
  return t;
}

store::Row encode(const KernelCacheRecord& r) {
  return store::row_of(r.structure_sig, r.fingerprint_key(), fingerprint_to_json(r.fingerprint), r.graph_name,
                       r.cache_json, r.created_at, r.checksum);
}

// "" when sound (fingerprint key, checksum, size), else the problem.
std::string decode(const store::Row& row, KernelCacheRecord* r) {
  std::string stored_key, fingerprint;
  store::RowCursor(row) >> r->structure_sig >> stored_key >> fingerprint >> r->graph_name >> r->cache_json >>
      r->created_at >> r->checksum;
  auto fp = fingerprint_from_json(fingerprint);
  if (!fp.is_ok()) return "fingerprint: " + fp.status().message();
  r->fingerprint = *fp;
  if (r->fingerprint_key() != stored_key)
    return "fingerprint_key " + stored_key + " does not match its fingerprint (" + r->fingerprint_key() + ")";
  const std::string problem = store::checksum_problem(r->checksum, caches_table().checksum(encode(*r)));
  if (!problem.empty()) return problem;
  Status valid = validate_kernel_cache(*r);
  if (!valid.is_ok()) return valid.message();
  return std::string();
}

// What a row's cache text holds past the limit (read without the text), "" within it.
std::string oversize_problem(int64_t bytes) {
  if (bytes <= kMaxKernelCacheBytes) return std::string();
  return std::to_string(bytes) + " bytes of cache text, over the " + std::to_string(kMaxKernelCacheBytes) +
         " a row may hold";
}

}  // namespace

const store::RecordCodec<KernelCacheRecord>& store::kernel_cache_codec() {
  return make_codec(caches_table(), encode, decode);
}

std::string compute_kernel_cache_checksum(const KernelCacheRecord& r) {
  return store::kernel_cache_codec().checksum(r);
}

StatusOr<KernelCacheRecord> SqlPlanStore::put_kernel_cache(const KernelCacheRecord& record) {
  KILN_RETURN_IF_ERROR(validate_kernel_cache(record));
  return put_stamped(store::kernel_cache_codec(), record);
}

StatusOr<std::optional<KernelCacheRecord>> SqlPlanStore::get_kernel_cache(const std::string& structure_sig,
                                                                          const EnvFingerprint& current) {
  const std::string key = fingerprint_key(current);
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return std::optional<KernelCacheRecord>();
  KernelCacheRecord r;
  std::string problem;
  {
    // The text's size first: an oversized row is refused without reading it into memory.
    KILN_ASSIGN_OR_RETURN(
        Stmt st, Stmt::prepare(db_, "SELECT " + caches_table().column_list() +
                                        ", length(cache_json) FROM kernel_caches" + caches_table().where_key()));
    store::bind_texts(st, {structure_sig, key});
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return std::optional<KernelCacheRecord>();
    problem = oversize_problem(st.int64(7));
    if (problem.empty()) problem = store::kernel_cache_codec().read(st, 0, &r);
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
  KILN_RETURN_IF_ERROR(drop_corrupt_locked("kernel cache", cache_name(structure_sig, key), problem,
                                           ", its kernels are compiled again",
                                           [&] { return remove_kernel_cache_locked(structure_sig, key); }));
  return std::optional<KernelCacheRecord>();
}

StatusOr<int64_t> SqlPlanStore::remove_kernel_cache(const std::string& structure_sig,
                                                    const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  return remove_kernel_cache_locked(structure_sig, fingerprint_key);
}

StatusOr<int64_t> SqlPlanStore::remove_kernel_cache_locked(const std::string& structure_sig,
                                                           const std::string& fingerprint_key) {
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return int64_t{0};
  return store::delete_by_key(db_, caches_table(), {structure_sig, fingerprint_key});
}

StatusOr<std::vector<KernelCacheInfo>> SqlPlanStore::list_kernel_caches() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KernelCacheInfo> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "kernel_caches"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT structure_sig, fingerprint_key, graph_name, "
                                                    "length(cache_json), created_at, fingerprint_json, rowid FROM "
                                                    "kernel_caches ORDER BY structure_sig, fingerprint_key"));
  KILN_RETURN_IF_ERROR(store::for_each_row(st, [&]() -> Status {
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
    return Status::ok();
  }));
  return out;
}

Status SqlPlanStore::verify_kernel_caches_locked(VerifyReport* out, std::vector<BadKernelCache>* bad) {
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
    KILN_RETURN_IF_ERROR(store::for_each_row(st, [&] {
      rows.push_back({st.int64(0), st.int64(1), st.text(2), st.text(3), st.text(4)});
      return Status::ok();
    }));
  }
  KILN_ASSIGN_OR_RETURN(Stmt one, Stmt::prepare(db_, caches_table().select_sql(" WHERE rowid=?1")));
  for (const Row& row : rows) {
    ++out->kernel_caches_checked;
    std::string problem;
    problem = oversize_problem(row.bytes);
    if (problem.empty()) {
      one.bind(1, row.rowid);
      KILN_ASSIGN_OR_RETURN(bool found, one.step());
      KernelCacheRecord r;
      if (!found) problem = "row vanished while it was read";
      else problem = store::kernel_cache_codec().read(one, 0, &r);
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

StatusOr<int64_t> SqlPlanStore::drop_kernel_cache_row_locked(const BadKernelCache& bad) {
  // By rowid and the stored checksum's text: a row another process replaced meanwhile stays.
  KILN_ASSIGN_OR_RETURN(
      Stmt del,
      Stmt::prepare(db_, "DELETE FROM kernel_caches WHERE rowid=?1 AND COALESCE(CAST(checksum AS TEXT),'')=?2"));
  del.bind(1, bad.rowid).bind(2, bad.stored_checksum);
  KILN_RETURN_IF_ERROR(del.run());
  return static_cast<int64_t>(db_->changes());
}

Status SqlPlanStore::gc_find_kernel_caches_locked(const GcOptions& options, const std::set<int64_t>& gone,
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
