// The store's first-use verdicts (kiln/store/first_use_record.h, docs/store.md "First-use verdicts"): whether a
// plan configuration passed the numerics gate on its first use, per key and environment.
#include "kiln/core/log.h"
#include "kiln/core/printable.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_plan_store.h"
#include "store/sql_table.h"

namespace kiln {

namespace {

std::string verdict_name(const std::string& sig, const std::string& shape, const std::string& config,
                         const std::string& fp) {
  return store::record_name(sig, shape, fp) + " " + printable(config);
}

const store::TableCodec& verdicts_table() {
  static const store::TableCodec t{"first_use_verdicts",
                                   {store::text("structure_sig"), store::text("shape_key"), store::text("config"),
                                    store::text("fingerprint_key"), store::integer("passed"), store::text("summary"),
                                    store::integer("created_at"), store::text("checksum", store::kUnchecked)},
                                   {"structure_sig", "shape_key", "config", "fingerprint_key"},
                                   "kiln-first-use-verdict/v1"};
  return t;
}

store::Row encode(const FirstUseRecord& r) {
  return store::row_of(r.structure_sig, r.shape_key, r.config, r.fingerprint_key, int64_t{r.passed}, r.summary,
                       r.created_at, r.checksum);
}

std::string decode(const store::Row& row, FirstUseRecord* r) {
  int64_t passed = 0;
  store::RowCursor(row) >> r->structure_sig >> r->shape_key >> r->config >> r->fingerprint_key >> passed >>
      r->summary >> r->created_at >> r->checksum;
  if (passed != 0 && passed != 1) return "column passed is " + std::to_string(passed) + ", not 0 or 1";
  r->passed = passed == 1;
  return store::checksum_problem(r->checksum, verdicts_table().checksum(row));
}

std::string no_name(const store::Row&) { return std::string(); }

}  // namespace

const store::RecordCodec<FirstUseRecord>& store::first_use_codec() {
  return make_codec(verdicts_table(), encode, decode);
}

std::string compute_first_use_checksum(const FirstUseRecord& r) { return store::first_use_codec().checksum(r); }

StatusOr<FirstUseRecord> SqlPlanStore::put_first_use_verdict(const FirstUseRecord& record) {
  if (record.structure_sig.empty()) return invalid_argument("first-use verdict: empty structure signature");
  if (record.config.empty()) return invalid_argument("first-use verdict: empty configuration");
  if (record.fingerprint_key.empty()) return invalid_argument("first-use verdict: empty fingerprint key");
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  const FirstUseRecord r = store::stamped(store::first_use_codec(), record);
  std::lock_guard<std::mutex> lock(mu_);
  store::Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  // A sound failed verdict stays: the configuration is not served again in this environment.
  KILN_ASSIGN_OR_RETURN(auto old, store::select_records(db_, store::first_use_codec(), verdicts_table().where_key(),
                                                        {r.structure_sig, r.shape_key, r.config, r.fingerprint_key}));
  if (!old.empty() && old[0].problem.empty() && !old[0].record.passed) return old[0].record;  // rolls back
  KILN_RETURN_IF_ERROR(store::insert_row(db_, verdicts_table(), encode(r)));
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::optional<FirstUseRecord>> SqlPlanStore::get_first_use_verdict(const std::string& structure_sig,
                                                                            const std::string& shape_key,
                                                                            const std::string& config,
                                                                            const std::string& fingerprint_key) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "first_use_verdicts"));
  if (!exists) return std::optional<FirstUseRecord>();
  KILN_ASSIGN_OR_RETURN(auto rows, store::select_records(db_, store::first_use_codec(), verdicts_table().where_key(),
                                                         {structure_sig, shape_key, config, fingerprint_key}));
  if (rows.empty()) return std::optional<FirstUseRecord>();
  if (rows[0].problem.empty()) return std::optional<FirstUseRecord>(std::move(rows[0].record));
  // A verdict is made again by checking the plan again: a damaged one is dropped, never trusted.
  ++counters_.corrupt;
  KILN_RETURN_IF_ERROR(drop_corrupt_locked(
      "first-use verdict", verdict_name(structure_sig, shape_key, config, fingerprint_key), rows[0].problem, "", [&] {
        return store::delete_by_key(db_, verdicts_table(), {structure_sig, shape_key, config, fingerprint_key});
      }));
  return std::optional<FirstUseRecord>();
}

StatusOr<std::vector<FirstUseRecord>> SqlPlanStore::list_first_use_verdicts() {
  std::lock_guard<std::mutex> lock(mu_);
  return store::list_sound(db_, path_, store::first_use_codec(),
                           "ORDER BY structure_sig, shape_key, config, fingerprint_key", "first-use verdict", no_name);
}

}  // namespace kiln
