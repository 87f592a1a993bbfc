// PlanRecord's canonical bytes and checksum, and its mapping onto SQLite rows.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kiln/core/hash.h"
#include "kiln/store/plan_store.h"
#include "store/record_codec.h"

namespace kiln {

std::string canonical_record_bytes(const PlanRecord& r) {
  return store::plans_table().canonical_text(store::encode_record(r));
}

std::string compute_record_checksum(const PlanRecord& r) { return stable_hash128_hex(canonical_record_bytes(r)); }

const char* lookup_outcome_name(LookupOutcome o) {
  switch (o) {
    case LookupOutcome::kHit: return "hit";
    case LookupOutcome::kMiss: return "miss";
    case LookupOutcome::kStale: return "stale";
    case LookupOutcome::kCorrupt: return "corrupt";
  }
  return "?";
}

namespace store {

const TableCodec& plans_table() {
  static const TableCodec t{"plans",
                            {{"structure_sig", ColumnType::kText, "structure_sig"},
                             {"shape_key", ColumnType::kText, "shape_key"},
                             {"fingerprint_key", ColumnType::kText},
                             {"fingerprint_json", ColumnType::kText, "fingerprint"},
                             {"plan_bytes", ColumnType::kBlob, "plan_bytes"},
                             {"plan_size", ColumnType::kInteger},
                             {"engine_id", ColumnType::kInteger, "engine_id"},
                             {"knobs", ColumnType::kText, "knobs"},
                             {"workspace_bytes", ColumnType::kInteger, "workspace_bytes"},
                             {"tuned", ColumnType::kInteger, "tuned"},
                             {"median_ms", ColumnType::kReal, "median_ms"},
                             {"min_ms", ColumnType::kReal, "min_ms"},
                             {"max_ms", ColumnType::kReal, "max_ms"},
                             {"noise_rel", ColumnType::kReal, "noise_rel"},
                             {"samples", ColumnType::kInteger, "samples"},
                             {"runner_up_engine", ColumnType::kInteger, "runner_up_engine"},
                             {"runner_up_knobs", ColumnType::kText, "runner_up_knobs"},
                             {"runner_up_median_ms", ColumnType::kReal, "runner_up_median_ms"},
                             {"verdict", ColumnType::kText, "verdict"},
                             {"max_abs", ColumnType::kReal, "max_abs"},
                             {"max_rel", ColumnType::kReal, "max_rel"},
                             {"nmse", ColumnType::kReal, "nmse"},
                             {"tuned_by", ColumnType::kText, "tuned_by"},
                             {"created_at", ColumnType::kInteger, "created_at"},
                             {"kiln_schema_version", ColumnType::kInteger, "kiln_schema_version"},
                             {"checksum", ColumnType::kText}},
                            {"structure_sig", "shape_key", "fingerprint_key"},
                            "kiln-plan-record/v1",
                            RowTyping::kPlanRow,
                            /*checksum_canonical_zero=*/true};
  return t;
}

std::string record_columns() { return plans_table().column_list(); }

Row encode_record(const PlanRecord& r) {
  return {text_value(r.structure_sig),
          text_value(r.shape_key),
          text_value(r.fingerprint_key()),
          text_value(fingerprint_to_json(r.fingerprint)),
          text_value(r.plan_bytes),
          int_value(static_cast<int64_t>(r.plan_bytes.size())),
          int_value(r.engine_id),
          text_value(knobs_to_text(r.knobs)),
          int_value(r.workspace_bytes),
          int_value(r.tuned ? 1 : 0),
          real_value(r.stats.median_ms),
          real_value(r.stats.min_ms),
          real_value(r.stats.max_ms),
          real_value(r.stats.noise_rel),
          int_value(r.stats.samples),
          int_value(r.stats.runner_up_engine),
          text_value(knobs_to_text(r.stats.runner_up_knobs)),
          real_value(r.stats.runner_up_median_ms),
          text_value(disposition_name(r.numerics.verdict)),
          real_value(r.numerics.max_abs),
          real_value(r.numerics.max_rel),
          real_value(r.numerics.nmse),
          text_value(r.tuned_by),
          int_value(r.created_at),
          int_value(r.kiln_schema_version),
          text_value(r.checksum)};
}

void bind_record(Stmt& st, int first, const PlanRecord& r) { plans_table().bind(st, first, encode_record(r)); }

namespace {

// The fields of a plans row that are text in the table and values in the record; the first one that does not
// parse is noted (after any column-type problem).
void decode_parsed(const Row& row, RowRead* out) {
  auto note = [&](const std::string& p) {
    if (out->problem.empty()) out->problem = p;
  };
  PlanRecord& r = out->record;
  StatusOr<EnvFingerprint> fp = fingerprint_from_json(row[3].text);
  if (fp.is_ok()) r.fingerprint = *fp;
  else note(fp.status().message());
  StatusOr<Disposition> v = parse_disposition(row[18].text);
  if (v.is_ok()) r.numerics.verdict = *v;
  else note("verdict: " + v.status().message());
  StatusOr<Knobs> k = knobs_from_text(row[7].text);
  if (k.is_ok()) r.knobs = *k;
  else note("knobs: " + k.status().message());
  StatusOr<Knobs> rk = knobs_from_text(row[16].text);
  if (rk.is_ok()) r.stats.runner_up_knobs = *rk;
  else note("runner_up_knobs: " + rk.status().message());
}

}  // namespace

RowRead read_record(const Stmt& st, int first) {
  RowRead out;
  const Row row = plans_table().read(st, first, &out.problem);
  PlanRecord& r = out.record;
  r.structure_sig = row[0].text;
  r.shape_key = row[1].text;
  out.stored_fingerprint_key = row[2].text;
  r.plan_bytes = row[4].text;
  out.plan_size = row[5].integer;
  r.engine_id = row[6].integer;
  r.workspace_bytes = row[8].integer;
  r.tuned = row[9].integer != 0;
  r.stats = PlanStats{row[10].real,    row[11].real,    row[12].real, row[13].real,
                      row[14].integer, row[15].integer, Knobs{},      row[17].real};
  r.numerics = PlanNumerics{Disposition::kNotVerified, row[19].real, row[20].real, row[21].real};
  r.tuned_by = row[22].text;
  r.created_at = row[23].integer;
  r.kiln_schema_version = static_cast<int>(row[24].integer);
  r.checksum = row[25].text;
  decode_parsed(row, &out);
  return out;
}

std::string record_problem(const RowRead& row) {
  if (!row.problem.empty()) return row.problem;
  const PlanRecord& r = row.record;
  if (static_cast<int64_t>(r.plan_bytes.size()) != row.plan_size)
    return "truncated plan blob (" + std::to_string(r.plan_bytes.size()) + " of " + std::to_string(row.plan_size) +
           " bytes)";
  if (row.stored_fingerprint_key != r.fingerprint_key())
    return "fingerprint key " + row.stored_fingerprint_key + " does not match the stored fingerprint";
  std::string sum = compute_record_checksum(r);
  if (sum != r.checksum) return "checksum mismatch (stored " + r.checksum + ", computed " + sum + ")";
  return std::string();
}

std::string record_name(const std::string& structure_sig, const std::string& shape_key,
                        const std::string& fingerprint_key) {
  return structure_sig.substr(0, 12) + "/" + shape_key + "/" + fingerprint_key.substr(0, 12);
}

Status validate_for_write(const PlanRecord& r) {
  if (r.structure_sig.empty()) return invalid_argument("plan record: empty structure signature");
  // An empty shape key is valid: a graph with no dynamic dimension has one shape (GraphSignature::shape_key).
  auto check_knobs = [](const Knobs& k, const char* what) -> Status {
    for (const auto& [name, v] : k) {
      (void)v;
      if (name.empty() || name.find_first_of("=;") != std::string::npos)
        return invalid_argument(std::string("plan record: ") + what + " name '" + name +
                                "' is empty or contains '=' or ';'");
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(check_knobs(r.knobs, "knob"));
  KILN_RETURN_IF_ERROR(check_knobs(r.stats.runner_up_knobs, "runner-up knob"));
  const std::pair<const char*, double> measures[] = {
      {"median_ms", r.stats.median_ms},
      {"min_ms", r.stats.min_ms},
      {"max_ms", r.stats.max_ms},
      {"noise_rel", r.stats.noise_rel},
      {"runner_up_median_ms", r.stats.runner_up_median_ms},
      {"max_abs", r.numerics.max_abs},
      {"max_rel", r.numerics.max_rel},
      {"nmse", r.numerics.nmse},
  };
  for (const auto& [name, v] : measures)
    if (std::isnan(v))
      return invalid_argument(std::string("plan record: ") + name + " is NaN (SQLite cannot store it)");
  return Status::ok();
}

Status run_validator(const PlanValidator& v, const PlanRecord& r) {
  if (!v) return Status::ok();
  try {
    return v(r);
  } catch (const std::exception& e) {
    return corruption(std::string("validator threw: ") + e.what());
  } catch (...) {
    return corruption("validator threw");
  }
}

}  // namespace store
}  // namespace kiln
