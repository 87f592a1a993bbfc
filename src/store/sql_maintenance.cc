// The SQLite store's upkeep (kiln/store/store_maintenance.h): verify, gc and the quarantine. Bundles: bundle.cc.
#include <map>
#include <set>

#include "kiln/core/log.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_plan_store.h"
#include "store/sql.h"

namespace kiln {

using store::exec;
using store::RowRead;
using store::Stmt;
using store::Txn;

StatusOr<VerifyReport> SqlPlanStore::verify(const VerifyOptions& options) {
  if (options.quarantine && read_only_) return failed_precondition("verify --quarantine needs a writable store");
  std::lock_guard<std::mutex> lock(mu_);
  return verify_locked(options);
}

StatusOr<VerifyReport> SqlPlanStore::verify_locked(const VerifyOptions& options, std::vector<BadPlan>* bad_plans,
                                                   std::vector<BadKernelCache>* bad_caches) {
  VerifyReport out;
  KILN_ASSIGN_OR_RETURN(out.integrity, database_.integrity_check());
  struct Bad {
    int64_t rowid;
    RowRead row;
    std::string reason;
  };
  std::vector<Bad> bad;
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid, " + store::record_columns() +
                                                          " FROM plans ORDER BY structure_sig, shape_key"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      const int64_t rowid = st.int64(0);
      RowRead r = store::read_record(st, 1);
      ++out.checked;
      std::string problem = store::record_problem(r);
      if (problem.empty()) {
        Status v = store::run_validator(options.validator, r.record);
        if (!v.is_ok()) problem = "validator refused the plan: " + v.message();
      }
      if (problem.empty()) {
        ++out.ok;
        continue;
      }
      out.problems.push_back({r.record.structure_sig, r.record.shape_key, r.stored_fingerprint_key, problem, rowid});
      r.record.plan_bytes.clear();
      bad.push_back({rowid, std::move(r), problem});
    }
  }
  counters_.corrupt += static_cast<int64_t>(bad.size());
  if (options.quarantine)
    for (auto& b : bad)
      quarantine_row(b.row.record.structure_sig, b.row.record.shape_key, b.row.stored_fingerprint_key,
                     b.row.record.checksum, b.reason);
  if (bad_plans)
    for (const Bad& b : bad)
      bad_plans->push_back({b.rowid, b.row.record.structure_sig, b.row.record.shape_key, b.row.stored_fingerprint_key,
                            b.row.record.checksum, b.reason});

  KILN_RETURN_IF_ERROR(verify_rollout_locked(&out));
  std::vector<BadKernelCache> caches;
  KILN_RETURN_IF_ERROR(verify_kernel_caches_locked(&out, &caches));
  counters_.corrupt += static_cast<int64_t>(caches.size());
  if (options.quarantine)
    for (size_t i = 0; i < caches.size(); ++i) {
      // A damaged cache is dropped, as get_kernel_cache drops one: its kernels are compiled again.
      const VerifyProblem& p = out.kernel_cache_problems[i];
      std::string name = store::record_name(p.structure_sig, "kernels", p.fingerprint_key);
      if (p.structure_sig.empty() || p.fingerprint_key.empty()) name += " (rowid " + std::to_string(p.rowid) + ")";
      StatusOr<int64_t> gone = drop_kernel_cache_row_locked(caches[i]);
      if (!gone.is_ok())
        KILN_LOG(kWarn, "plan store " << path_ << ": corrupt kernel cache " << name << " (" << p.reason
                                      << "); could not drop it: " << gone.status().message());
      else if (*gone > 0)
        KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt kernel cache " << name << ": " << p.reason);
    }
  if (bad_caches) bad_caches->insert(bad_caches->end(), caches.begin(), caches.end());
  return out;
}

StatusOr<GcReport> SqlPlanStore::gc(const GcOptions& options) {
  // A dry run only reads: it works on a store opened read-only, and leaves the file as it was.
  if (read_only_ && !options.dry_run) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  GcReport out;
  out.dry_run = options.dry_run;
  // A dry run reads one snapshot: what it reports is one state of the store, whatever other processes write.
  // A real run writes in a transaction begun below, after the verify's quarantine (its own transaction).
  Txn txn(db_);
  if (options.dry_run) KILN_RETURN_IF_ERROR(txn.begin_read());
  std::vector<BadPlan> bad_plans;
  std::vector<BadKernelCache> bad_caches;
  if (options.drop_corrupt) {
    // A real run moves the corrupt plans to quarantine and drops the damaged caches here; a dry run leaves
    // them in place, and passes over them below, so that every count is the one a real run gives.
    VerifyOptions vo;
    vo.quarantine = !options.dry_run;
    KILN_ASSIGN_OR_RETURN(VerifyReport vr, verify_locked(vo, &bad_plans, &bad_caches));
    out.corrupt_removed = static_cast<int64_t>(vr.problems.size());
    out.kernel_caches_corrupt_removed = static_cast<int64_t>(vr.kernel_cache_problems.size());
    for (const VerifyProblem& p : vr.kernel_cache_problems)
      out.kernel_caches_removed.push_back({p.structure_sig, p.fingerprint_key, "", "corrupt: " + p.reason, p.rowid});
  }
  std::set<int64_t> gone_plans, gone_caches;
  if (options.dry_run) {
    for (const BadPlan& b : bad_plans) gone_plans.insert(b.rowid);
    for (const BadKernelCache& b : bad_caches) gone_caches.insert(b.rowid);
  }
  if (!options.dry_run) KILN_RETURN_IF_ERROR(txn.begin());
  GcGarbage garbage;
  KILN_RETURN_IF_ERROR(gc_find_locked(options, gone_plans, gone_caches, &garbage));
  out.stale_removed = static_cast<int64_t>(garbage.stale_plans.size());
  out.old_removed = static_cast<int64_t>(garbage.old_plans.size());
  if (options.drop_quarantine)
    out.quarantine_removed = garbage.quarantined + (options.dry_run ? static_cast<int64_t>(bad_plans.size()) : 0);
  out.graph_specs_removed = static_cast<int64_t>(garbage.graph_specs.size());
  out.fusion_records_removed = static_cast<int64_t>(garbage.fusion_records.size());
  for (const KernelCacheGarbage& k : garbage.kernel_caches) {
    ++(k.stale ? out.kernel_caches_stale_removed : out.kernel_caches_old_removed);
    out.kernel_caches_removed.push_back(k.what);
  }
  if (options.dry_run) return out;  // nothing written

  // What was found, removed in the same write transaction (nothing else wrote in between).
  auto delete_rows = [&](const char* table, const std::vector<int64_t>& rowids) -> Status {
    if (rowids.empty()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, std::string("DELETE FROM ") + table + " WHERE rowid=?1"));
    for (int64_t rowid : rowids) {
      del.bind(1, rowid);
      KILN_RETURN_IF_ERROR(del.run());
      KILN_RETURN_IF_ERROR(del.reset());
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(delete_rows("plans", garbage.stale_plans));
  KILN_RETURN_IF_ERROR(delete_rows("plans", garbage.old_plans));
  if (garbage.quarantined > 0) KILN_RETURN_IF_ERROR(exec(db_, "DELETE FROM quarantine"));
  KILN_RETURN_IF_ERROR(delete_rows("graph_specs", garbage.graph_specs));
  KILN_RETURN_IF_ERROR(delete_rows("fusion_decisions", garbage.fusion_records));
  for (const KernelCacheGarbage& k : garbage.kernel_caches)
    KILN_RETURN_IF_ERROR(drop_kernel_cache_row_locked(k.row).status());
  KILN_RETURN_IF_ERROR(txn.commit());
  return out;
}

Status SqlPlanStore::gc_find_locked(const GcOptions& options, const std::set<int64_t>& gone_plans,
                                    const std::set<int64_t>& gone_caches, GcGarbage* out) {
  // The plan rows gone by each step, as a real run removes them in turn: corrupt, then stale, then old.
  std::set<int64_t> gone = gone_plans;
  if (options.current) {
    KILN_ASSIGN_OR_RETURN(Stmt st,
                          Stmt::prepare(db_, "SELECT rowid, fingerprint_json, kiln_schema_version FROM plans"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      const int64_t rowid = st.int64(0);
      if (gone.count(rowid)) continue;
      StatusOr<EnvFingerprint> fp = fingerprint_from_json(st.text(1));
      if (!fp.is_ok()) continue;  // corrupt, not stale: drop_corrupt's business
      bool pass = check_fingerprint(*fp, *options.current, options.policy).pass && st.int64(2) <= kStoreSchemaVersion;
      if (!pass) out->stale_plans.push_back(rowid);
    }
    gone.insert(out->stale_plans.begin(), out->stale_plans.end());
  }
  if (options.older_than) {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT rowid FROM plans WHERE created_at < ?1"));
    st.bind(1, *options.older_than);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      if (!gone.count(st.int64(0))) out->old_plans.push_back(st.int64(0));
    }
    gone.insert(out->old_plans.begin(), out->old_plans.end());
  }
  // A table an older store lacks (a read-only dry run adds none) holds nothing to remove.
  KILN_ASSIGN_OR_RETURN(bool has_quarantine, store::table_exists(db_, "quarantine"));
  if (options.drop_quarantine && has_quarantine) {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT count(*) FROM quarantine"));
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    out->quarantined = row ? st.int64(0) : 0;
  }
  // Graph specs that no plan left and no queued re-tune refers to (matched as SQL compares the columns).
  KILN_ASSIGN_OR_RETURN(bool has_specs, store::table_exists(db_, "graph_specs"));
  if (has_specs) {
    KILN_ASSIGN_OR_RETURN(bool has_queue, store::table_exists(db_, "retune_queue"));
    KILN_ASSIGN_OR_RETURN(
        Stmt st, Stmt::prepare(db_, std::string("SELECT g.rowid, p.rowid FROM graph_specs g LEFT JOIN plans p ON "
                                                "p.structure_sig = g.structure_sig AND p.shape_key = g.shape_key") +
                                        (has_queue ? " WHERE NOT EXISTS (SELECT 1 FROM retune_queue q WHERE "
                                                     "q.structure_sig = g.structure_sig AND q.shape_key = g.shape_key)"
                                                   : "") +
                                        " ORDER BY g.rowid"));
    std::map<int64_t, bool> referred;  // graph spec rowid -> whether a plan left refers to it
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      bool& r = referred[st.int64(0)];
      r = r || (st.type(1) != SQLITE_NULL && !gone.count(st.int64(1)));
    }
    for (const auto& [rowid, r] : referred)
      if (!r) out->graph_specs.push_back(rowid);
  }
  // Fusion decisions that could not serve any more: a part's record (same environment) is gone, or the row
  // does not read back (damaged).
  KILN_ASSIGN_OR_RETURN(bool has_fusions, store::table_exists(db_, "fusion_decisions"));
  if (has_fusions) {
    KILN_ASSIGN_OR_RETURN(
        Stmt st, Stmt::prepare(db_, std::string("SELECT rowid, ") + store::fusion_record_codec().table.column_list() +
                                        " FROM fusion_decisions"));
    KILN_ASSIGN_OR_RETURN(Stmt has, Stmt::prepare(db_, "SELECT rowid FROM plans WHERE structure_sig=?1 AND "
                                                       "shape_key=?2 AND fingerprint_key=?3"));
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      FusionRecord fr;
      bool alive = store::fusion_record_codec().read(st, 1, &fr).empty();
      for (size_t i = 0; alive && i < fr.parts.size(); ++i) {
        has.bind(1, fr.parts[i].structure_sig).bind(2, fr.parts[i].shape_key).bind(3, st.text(3));
        bool found = false;
        while (true) {
          KILN_ASSIGN_OR_RETURN(bool part, has.step());
          if (!part) break;
          found = found || !gone.count(has.int64(0));
        }
        KILN_RETURN_IF_ERROR(has.reset());
        alive = found;
      }
      if (!alive) out->fusion_records.push_back(st.int64(0));
    }
  }
  return gc_find_kernel_caches_locked(options, gone_caches, out);
}

StatusOr<std::vector<QuarantineEntry>> SqlPlanStore::quarantine() {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, "SELECT id, structure_sig, shape_key, fingerprint_key, reason, "
                                                    "quarantined_at FROM quarantine ORDER BY id"));
  std::vector<QuarantineEntry> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    out.push_back({st.int64(0), st.text(1), st.text(2), st.text(3), st.text(4), st.int64(5)});
  }
  return out;
}

}  // namespace kiln
