// The plans table's codec (store/record_codec.h): PlanRecord's canonical bytes and checksum, and its mapping onto
// SQLite rows.
#include "store/record_codec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kiln/core/hash.h"
#include "kiln/store/plan_record.h"

namespace kiln {

std::string canonical_record_bytes(const PlanRecord& r) {
  return store::plans_table().canonical_text(store::encode_record(r));
}

std::string compute_record_checksum(const PlanRecord& r) { return stable_hash128_hex(canonical_record_bytes(r)); }

namespace store {

const TableCodec& plans_table() {
  static const TableCodec t{"plans",
                            {text("structure_sig"),
                             text("shape_key"),
                             text("fingerprint_key", kUnchecked),
                             text("fingerprint_json", "fingerprint"),
                             blob("plan_bytes"),
                             integer("plan_size", kUnchecked),
                             integer("engine_id"),
                             text("knobs"),
                             integer("workspace_bytes"),
                             integer("tuned"),
                             real("median_ms"),
                             real("min_ms"),
                             real("max_ms"),
                             real("noise_rel"),
                             integer("samples"),
                             integer("runner_up_engine"),
                             text("runner_up_knobs"),
                             real("runner_up_median_ms"),
                             text("verdict"),
                             real("max_abs"),
                             real("max_rel"),
                             real("nmse"),
                             text("tuned_by"),
                             integer("created_at"),
                             integer("kiln_schema_version"),
                             text("checksum", kUnchecked)},
                            {"structure_sig", "shape_key", "fingerprint_key"},
                            "kiln-plan-record/v1",
                            RowTyping::kPlanRow,
                            /*checksum_canonical_zero=*/true};
  return t;
}

std::string record_columns() { return plans_table().column_list(); }

Row encode_record(const PlanRecord& r) {
  const PlanStats& t = r.stats;
  const PlanNumerics& n = r.numerics;
  return row_of(r.structure_sig, r.shape_key, r.fingerprint_key(), fingerprint_to_json(r.fingerprint), r.plan_bytes,
                static_cast<int64_t>(r.plan_bytes.size()), r.engine_id, knobs_to_text(r.knobs), r.workspace_bytes,
                int64_t{r.tuned}, t.median_ms, t.min_ms, t.max_ms, t.noise_rel, t.samples, t.runner_up_engine,
                knobs_to_text(t.runner_up_knobs), t.runner_up_median_ms, disposition_name(n.verdict), n.max_abs,
                n.max_rel, n.nmse, r.tuned_by, r.created_at, int64_t{r.kiln_schema_version}, r.checksum);
}

void bind_record(Stmt& st, int first, const PlanRecord& r) { plans_table().bind(st, first, encode_record(r)); }

namespace {

// The fields of a plans row that are text in the table and values in the record; the first one that does not
// parse is noted (after any column-type problem).
void decode_parsed(const std::string& fingerprint, const std::string& verdict, const std::string& knobs,
                   const std::string& runner_up_knobs, RowRead* out) {
  auto note = [&](const std::string& p) {
    if (out->problem.empty()) out->problem = p;
  };
  PlanRecord& r = out->record;
  StatusOr<EnvFingerprint> fp = fingerprint_from_json(fingerprint);
  if (fp.is_ok()) r.fingerprint = *fp;
  else note(fp.status().message());
  StatusOr<Disposition> v = parse_disposition(verdict);
  if (v.is_ok()) r.numerics.verdict = *v;
  else note("verdict: " + v.status().message());
  StatusOr<Knobs> k = knobs_from_text(knobs);
  if (k.is_ok()) r.knobs = *k;
  else note("knobs: " + k.status().message());
  StatusOr<Knobs> rk = knobs_from_text(runner_up_knobs);
  if (rk.is_ok()) r.stats.runner_up_knobs = *rk;
  else note("runner_up_knobs: " + rk.status().message());
}

}  // namespace

RowRead read_record(const Stmt& st, int first) {
  RowRead out;
  const Row row = plans_table().read(st, first, &out.problem);
  PlanRecord& r = out.record;
  PlanStats& t = r.stats;
  PlanNumerics& n = r.numerics;
  std::string fingerprint, knobs, verdict, runner_up_knobs;
  int64_t tuned = 0, version = 0;
  RowCursor(row) >> r.structure_sig >> r.shape_key >> out.stored_fingerprint_key >> fingerprint >> r.plan_bytes >>
      out.plan_size >> r.engine_id >> knobs >> r.workspace_bytes >> tuned >> t.median_ms >> t.min_ms >> t.max_ms >>
      t.noise_rel >> t.samples >> t.runner_up_engine >> runner_up_knobs >> t.runner_up_median_ms >> verdict >>
      n.max_abs >> n.max_rel >> n.nmse >> r.tuned_by >> r.created_at >> version >> r.checksum;
  r.tuned = tuned != 0;
  r.kiln_schema_version = static_cast<int>(version);
  decode_parsed(fingerprint, verdict, knobs, runner_up_knobs, &out);
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

PlanRecord stamped_for_write(const PlanRecord& record) {
  PlanRecord r = record;
  if (r.tuned_by.empty()) r.tuned_by = user_at_host();
  if (r.created_at == 0) r.created_at = unix_now();
  r.kiln_schema_version = kStoreSchemaVersion;
  r.checksum = compute_record_checksum(r);
  return r;
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
