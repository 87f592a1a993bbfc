// PlanStore's fusion decisions (kiln/store/fusion_record.h, docs/store.md "Fusion decisions"): which keys run as
// the unfused chain of their parts, per environment.
#include <cmath>
#include <nlohmann/json.hpp>

#include "kiln/store/env_policy.h"
#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/graph/graph.h"
#include "store/sql_plan_store.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql_table.h"
#include "store/sql.h"

namespace kiln {

namespace {

std::string decision_name(const std::string& sig, const std::string& shape, const std::string& fp) {
  return store::record_name(sig, shape, fp);
}

Status validate_fusion_record(const FusionRecord& r) {
  const std::string where = "fusion decision " + decision_name(r.structure_sig, r.shape_key, r.fingerprint_key());
  if (r.structure_sig.empty()) return invalid_argument("fusion decision: empty structure signature");
  if (r.parts.size() < 2)
    return invalid_argument(where + ": a chain needs at least two parts (it has " + std::to_string(r.parts.size()) +
                            ")");
  for (size_t i = 0; i < r.parts.size(); ++i)
    if (r.parts[i].structure_sig.empty())
      return invalid_argument(where + ": part " + std::to_string(i) + " ('" + r.parts[i].name +
                              "') has no structure signature");
  if (r.materialized.empty()) return invalid_argument(where + ": no dtype for the intermediates");
  for (double v : {r.fused_ms, r.unfused_ms})
    if (!std::isfinite(v) || v < 0) return invalid_argument(where + ": a median that is negative or not finite");
  return Status::ok();
}

}  // namespace

std::string fusion_parts_to_json(const std::vector<FusionPartRef>& parts) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const FusionPartRef& p : parts)
    a.push_back({{"name", p.name}, {"structure_sig", p.structure_sig}, {"shape_key", p.shape_key}});
  return a.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

StatusOr<std::vector<FusionPartRef>> fusion_parts_from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return invalid_argument("the parts are not a JSON list");
  std::vector<FusionPartRef> out;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("name") || !e.contains("structure_sig") || !e.contains("shape_key") ||
        !e["name"].is_string() || !e["structure_sig"].is_string() || !e["shape_key"].is_string())
      return invalid_argument("a part is not {name, structure_sig, shape_key} strings");
    out.push_back(
        {e["name"].get<std::string>(), e["structure_sig"].get<std::string>(), e["shape_key"].get<std::string>()});
  }
  return out;
}

namespace {

const store::TableCodec& fusion_table() {
  static const store::TableCodec t{
      "fusion_decisions",
      {store::text("structure_sig"), store::text("shape_key"), store::text("fingerprint_key", store::kUnchecked),
       store::text("fingerprint_json", "fingerprint"), store::text("materialized"), store::text("parts_json", "parts"),
       store::text("policy"), store::real("fused_ms"), store::real("unfused_ms"), store::text("explanation"),
       store::integer("created_at"), store::text("checksum", store::kUnchecked)},
      {"structure_sig", "shape_key", "fingerprint_key"},
      "kiln-fusion-decision/v1"};
  return t;
}

store::Row encode(const FusionRecord& r) {
  return store::row_of(r.structure_sig, r.shape_key, r.fingerprint_key(), fingerprint_to_json(r.fingerprint),
                       r.materialized, fusion_parts_to_json(r.parts), r.policy, r.fused_ms, r.unfused_ms, r.explanation,
                       r.created_at, r.checksum);
}

std::string decode(const store::Row& row, FusionRecord* r) {
  std::string stored_key, fingerprint, parts;
  store::RowCursor(row) >> r->structure_sig >> r->shape_key >> stored_key >> fingerprint >> r->materialized >> parts >>
      r->policy >> r->fused_ms >> r->unfused_ms >> r->explanation >> r->created_at >> r->checksum;
  auto fp = fingerprint_from_json(fingerprint);
  if (!fp.is_ok()) return "fingerprint: " + fp.status().message();
  r->fingerprint = *fp;
  if (r->fingerprint_key() != stored_key)
    return "fingerprint_key " + stored_key + " does not match its fingerprint (" + r->fingerprint_key() + ")";
  auto chain = fusion_parts_from_json(parts);
  if (!chain.is_ok()) return "parts: " + chain.status().message();
  r->parts = std::move(chain).value();
  const std::string problem = store::checksum_problem(r->checksum, fusion_table().checksum(encode(*r)));
  if (!problem.empty()) return problem;
  // Sound as written, too: a row with a matching checksum may still have been forged (the checksum is not a
  // key), so what put_fusion_record refuses is corrupt here.
  Status valid = validate_fusion_record(*r);
  if (!valid.is_ok()) return valid.message();
  if (!parse_dtype(r->materialized).is_ok()) return "unknown dtype '" + r->materialized + "' for the intermediates";
  return std::string();
}

std::string row_name(const store::Row& row) { return decision_name(row[0].text, row[1].text, row[2].text); }

}  // namespace

const store::RecordCodec<FusionRecord>& store::fusion_record_codec() {
  return make_codec(fusion_table(), encode, decode);
}

std::string compute_fusion_record_checksum(const FusionRecord& r) { return store::fusion_record_codec().checksum(r); }

StatusOr<FusionRecord> SqlPlanStore::put_fusion_record(const FusionRecord& record) {
  KILN_RETURN_IF_ERROR(validate_fusion_record(record));
  return put_stamped(store::fusion_record_codec(), record);
}

StatusOr<std::optional<FusionRecord>> SqlPlanStore::get_fusion_record(const std::string& structure_sig,
                                                                      const std::string& shape_key,
                                                                      const EnvFingerprint& current,
                                                                      const EnvPolicy& policy) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "fusion_decisions"));
  if (!exists) return std::optional<FusionRecord>();
  KILN_ASSIGN_OR_RETURN(auto rows, store::select_records(db_, store::fusion_record_codec(), fusion_table().where_key(2),
                                                         {structure_sig, shape_key}));
  // A damaged decision is dropped (the next tune writes it again): the fused plan serves meanwhile.
  std::vector<FusionRecord> sound;
  for (auto& f : rows) {
    if (f.problem.empty()) {
      sound.push_back(std::move(f.record));
      continue;
    }
    const std::string& fp = f.row[2].text;
    ++counters_.corrupt;
    KILN_RETURN_IF_ERROR(drop_corrupt_locked(
        "fusion decision", decision_name(structure_sig, shape_key, fp), f.problem, ", the fused plan serves", [&] {
          return store::delete_by_key(db_, fusion_table(), {structure_sig, shape_key, fp});
        }));
  }
  // The exact environment first, then the newest that passes the policy (as get() prefers records).
  const std::string key = fingerprint_key(current);
  const FusionRecord* best = nullptr;
  for (const FusionRecord& r : sound) {
    if (!check_fingerprint(r.fingerprint, current, policy).pass) continue;
    const bool exact = r.fingerprint_key() == key;
    if (!best || (exact && best->fingerprint_key() != key) ||
        (exact == (best->fingerprint_key() == key) && r.created_at > best->created_at))
      best = &r;
  }
  if (!best) return std::optional<FusionRecord>();
  return std::optional<FusionRecord>(*best);
}

StatusOr<int64_t> SqlPlanStore::remove_fusion_record(const std::string& structure_sig, const std::string& shape_key,
                                                     const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  return store::delete_by_key(db_, fusion_table(), {structure_sig, shape_key, fingerprint_key});
}

StatusOr<std::vector<FusionRecord>> SqlPlanStore::list_fusion_records() {
  std::lock_guard<std::mutex> lock(mu_);
  return store::list_sound(db_, path_, store::fusion_record_codec(),
                           "ORDER BY structure_sig, shape_key, fingerprint_key", "fusion decision", row_name);
}

}  // namespace kiln
