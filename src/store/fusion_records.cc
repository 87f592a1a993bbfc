// PlanStore's fusion decisions (kiln/store/fusion_record.h, docs/store.md "Fusion decisions"): which keys run as
// the unfused chain of their parts, per environment.
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kiln/store/env_policy.h"
#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "kiln/graph/graph.h"
#include "kiln/store/plan_store.h"
#include "store/extra_tables.h"
#include "store/record_codec.h"
#include "store/sqlite_util.h"

namespace kiln {

using store::Stmt;
using store::Txn;

using store::put_field;

namespace {

std::string double_bits(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(bits));
  return buf;
}

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

std::string compute_fusion_record_checksum(const FusionRecord& r) {
  std::string canon = "kiln-fusion-decision/v1\n";
  put_field(canon, "structure_sig", r.structure_sig);
  put_field(canon, "shape_key", r.shape_key);
  put_field(canon, "fingerprint", fingerprint_to_json(r.fingerprint));
  put_field(canon, "materialized", r.materialized);
  put_field(canon, "parts", fusion_parts_to_json(r.parts));
  put_field(canon, "policy", r.policy);
  put_field(canon, "fused_ms", double_bits(r.fused_ms));
  put_field(canon, "unfused_ms", double_bits(r.unfused_ms));
  put_field(canon, "explanation", r.explanation);
  put_field(canon, "created_at", std::to_string(r.created_at));
  return stable_hash128_hex(canon);
}

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

namespace store {

std::string fusion_decisions_table_sql(const char* table) {
  return std::string("CREATE TABLE IF NOT EXISTS ") + table +
         "(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  shape_key TEXT NOT NULL,\n"
         "  fingerprint_key TEXT NOT NULL,\n"
         "  fingerprint_json TEXT NOT NULL,\n"
         "  materialized TEXT NOT NULL,\n"
         "  parts_json TEXT NOT NULL,\n"
         "  policy TEXT NOT NULL,\n"
         "  fused_ms REAL NOT NULL,\n"
         "  unfused_ms REAL NOT NULL,\n"
         "  explanation TEXT NOT NULL,\n"
         "  created_at INTEGER NOT NULL,\n"
         "  checksum TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)\n"
         ")";
}

void bind_fusion_record(Stmt& st, int i, const FusionRecord& r) {
  st.bind(i + 0, r.structure_sig)
      .bind(i + 1, r.shape_key)
      .bind(i + 2, r.fingerprint_key())
      .bind(i + 3, fingerprint_to_json(r.fingerprint))
      .bind(i + 4, r.materialized)
      .bind(i + 5, fusion_parts_to_json(r.parts))
      .bind(i + 6, r.policy)
      .bind_double(i + 7, r.fused_ms)
      .bind_double(i + 8, r.unfused_ms)
      .bind(i + 9, r.explanation)
      .bind(i + 10, r.created_at)
      .bind(i + 11, r.checksum);
}

std::string read_fusion_record(const Stmt& st, int i, FusionRecord* r) {
  static const char* names[] = {"structure_sig", "shape_key",   "fingerprint_key", "fingerprint_json",
                                "materialized",  "parts_json",  "policy",          "fused_ms",
                                "unfused_ms",    "explanation", "created_at",      "checksum"};
  for (int c = 0; c < 12; ++c) {
    const int want = c == 10 ? SQLITE_INTEGER : (c == 7 || c == 8) ? SQLITE_FLOAT : SQLITE_TEXT;
    if (st.type(i + c) != want) return std::string("column ") + names[c] + " has the wrong type";
  }
  r->structure_sig = st.text(i + 0);
  r->shape_key = st.text(i + 1);
  const std::string stored_key = st.text(i + 2);
  auto fp = fingerprint_from_json(st.text(i + 3));
  if (!fp.is_ok()) return "fingerprint: " + fp.status().message();
  r->fingerprint = *fp;
  if (r->fingerprint_key() != stored_key)
    return "fingerprint_key " + stored_key + " does not match its fingerprint (" + r->fingerprint_key() + ")";
  r->materialized = st.text(i + 4);
  auto parts = fusion_parts_from_json(st.text(i + 5));
  if (!parts.is_ok()) return "parts: " + parts.status().message();
  r->parts = std::move(parts).value();
  r->policy = st.text(i + 6);
  r->fused_ms = st.real(i + 7);
  r->unfused_ms = st.real(i + 8);
  r->explanation = st.text(i + 9);
  r->created_at = st.int64(i + 10);
  r->checksum = st.text(i + 11);
  const std::string sum = compute_fusion_record_checksum(*r);
  if (sum != r->checksum) return "checksum mismatch (stored " + r->checksum + ", computed " + sum + ")";
  // Sound as written, too: a row with a matching checksum may still have been forged (the checksum is not a
  // key), so what put_fusion_record refuses is corrupt here.
  Status valid = validate_fusion_record(*r);
  if (!valid.is_ok()) return valid.message();
  if (!parse_dtype(r->materialized).is_ok()) return "unknown dtype '" + r->materialized + "' for the intermediates";
  return std::string();
}

}  // namespace store

StatusOr<FusionRecord> PlanStore::put_fusion_record(const FusionRecord& record) {
  KILN_RETURN_IF_ERROR(validate_fusion_record(record));
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  FusionRecord r = record;
  if (r.created_at == 0) r.created_at = store::unix_now();
  r.checksum = compute_fusion_record_checksum(r);
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("INSERT OR REPLACE INTO fusion_decisions(") +
                                                        store::kFusionRecordColumns +
                                                        ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"));
  store::bind_fusion_record(st, 1, r);
  KILN_RETURN_IF_ERROR(st.run());
  KILN_RETURN_IF_ERROR(txn.commit());
  return r;
}

StatusOr<std::optional<FusionRecord>> PlanStore::get_fusion_record(const std::string& structure_sig,
                                                                   const std::string& shape_key,
                                                                   const EnvFingerprint& current,
                                                                   const EnvPolicy& policy) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "fusion_decisions"));
  if (!exists) return std::optional<FusionRecord>();
  std::vector<FusionRecord> sound;
  std::vector<std::pair<std::string, std::string>> corrupt;  // fingerprint key column, problem
  {
    KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + store::kFusionRecordColumns +
                                                          " FROM fusion_decisions WHERE structure_sig=?1 AND "
                                                          "shape_key=?2"));
    st.bind(1, structure_sig).bind(2, shape_key);
    while (true) {
      KILN_ASSIGN_OR_RETURN(bool row, st.step());
      if (!row) break;
      FusionRecord r;
      std::string problem = store::read_fusion_record(st, 0, &r);
      if (problem.empty()) sound.push_back(std::move(r));
      else corrupt.push_back({st.text(2), problem});
    }
  }
  // A damaged decision is dropped (the next tune writes it again): the fused plan serves meanwhile.
  for (const auto& [fp, problem] : corrupt) {
    const std::string name = decision_name(structure_sig, shape_key, fp);
    ++counters_.corrupt;
    if (read_only_) {
      KILN_LOG(kWarn, "plan store " << path_ << ": corrupt fusion decision " << name << " (" << problem
                                    << "); read-only, left in place, the fused plan serves");
      continue;
    }
    KILN_LOG(kWarn, "plan store " << path_ << ": dropped corrupt fusion decision " << name << ": " << problem);
    Txn txn(db_);
    KILN_RETURN_IF_ERROR(txn.begin());
    KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, "DELETE FROM fusion_decisions WHERE structure_sig=?1 AND "
                                                       "shape_key=?2 AND fingerprint_key=?3"));
    del.bind(1, structure_sig).bind(2, shape_key).bind(3, fp);
    KILN_RETURN_IF_ERROR(del.run());
    KILN_RETURN_IF_ERROR(txn.commit());
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

StatusOr<int64_t> PlanStore::remove_fusion_record(const std::string& structure_sig, const std::string& shape_key,
                                                  const std::string& fingerprint_key) {
  if (read_only_) return failed_precondition("plan store " + path_ + " was opened read-only");
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db_, "DELETE FROM fusion_decisions WHERE structure_sig=?1 AND "
                                                     "shape_key=?2 AND fingerprint_key=?3"));
  del.bind(1, structure_sig).bind(2, shape_key).bind(3, fingerprint_key);
  KILN_RETURN_IF_ERROR(del.run());
  const int64_t n = sqlite3_changes(db_);
  KILN_RETURN_IF_ERROR(txn.commit());
  return n;
}

StatusOr<std::vector<FusionRecord>> PlanStore::list_fusion_records() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FusionRecord> out;
  KILN_ASSIGN_OR_RETURN(bool exists, store::table_exists(db_, "fusion_decisions"));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db_, std::string("SELECT ") + store::kFusionRecordColumns +
                                                        " FROM fusion_decisions ORDER BY structure_sig, shape_key, "
                                                        "fingerprint_key"));
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    FusionRecord r;
    std::string problem = store::read_fusion_record(st, 0, &r);
    if (!problem.empty()) {
      KILN_LOG(kWarn, "plan store " << path_ << ": skipped corrupt fusion decision "
                                    << decision_name(st.text(0), st.text(1), st.text(2)) << ": " << problem);
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
