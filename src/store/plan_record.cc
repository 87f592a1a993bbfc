// PlanRecord's canonical bytes and checksum, and its mapping onto SQLite rows.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kiln/core/hash.h"
#include "kiln/store/plan_store.h"
#include "store/record_codec.h"

namespace kiln {

using store::put_field;

namespace {

// Exact and platform-independent: the IEEE-754 bits. -0 is written as +0 (SQLite stores both as 0).
std::string double_bits(double v) {
  if (v == 0) v = 0.0;
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return hex64(bits);
}

}  // namespace

std::string canonical_record_bytes(const PlanRecord& r) {
  std::string out = "kiln-plan-record/v1\n";
  out.reserve(out.size() + r.plan_bytes.size() + 1024);
  put_field(out, "structure_sig", r.structure_sig);
  put_field(out, "shape_key", r.shape_key);
  put_field(out, "fingerprint", fingerprint_to_json(r.fingerprint));
  put_field(out, "plan_bytes", r.plan_bytes);
  put_field(out, "engine_id", std::to_string(r.engine_id));
  put_field(out, "knobs", knobs_to_text(r.knobs));
  put_field(out, "workspace_bytes", std::to_string(r.workspace_bytes));
  put_field(out, "tuned", r.tuned ? "1" : "0");
  put_field(out, "median_ms", double_bits(r.stats.median_ms));
  put_field(out, "min_ms", double_bits(r.stats.min_ms));
  put_field(out, "max_ms", double_bits(r.stats.max_ms));
  put_field(out, "noise_rel", double_bits(r.stats.noise_rel));
  put_field(out, "samples", std::to_string(r.stats.samples));
  put_field(out, "runner_up_engine", std::to_string(r.stats.runner_up_engine));
  put_field(out, "runner_up_knobs", knobs_to_text(r.stats.runner_up_knobs));
  put_field(out, "runner_up_median_ms", double_bits(r.stats.runner_up_median_ms));
  put_field(out, "verdict", disposition_name(r.numerics.verdict));
  put_field(out, "max_abs", double_bits(r.numerics.max_abs));
  put_field(out, "max_rel", double_bits(r.numerics.max_rel));
  put_field(out, "nmse", double_bits(r.numerics.nmse));
  put_field(out, "tuned_by", r.tuned_by);
  put_field(out, "created_at", std::to_string(r.created_at));
  put_field(out, "kiln_schema_version", std::to_string(r.kiln_schema_version));
  return out;
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

std::string plans_table_sql(const char* table) {
  return std::string("CREATE TABLE IF NOT EXISTS ") + table +
         "(\n"
         "  structure_sig TEXT NOT NULL,\n"
         "  shape_key TEXT NOT NULL,\n"
         "  fingerprint_key TEXT NOT NULL,\n"
         "  fingerprint_json TEXT NOT NULL,\n"
         "  plan_bytes BLOB NOT NULL,\n"
         "  plan_size INTEGER NOT NULL,\n"
         "  engine_id INTEGER NOT NULL,\n"
         "  knobs TEXT NOT NULL,\n"
         "  workspace_bytes INTEGER NOT NULL,\n"
         "  tuned INTEGER NOT NULL,\n"
         "  median_ms REAL NOT NULL,\n"
         "  min_ms REAL NOT NULL,\n"
         "  max_ms REAL NOT NULL,\n"
         "  noise_rel REAL NOT NULL,\n"
         "  samples INTEGER NOT NULL,\n"
         "  runner_up_engine INTEGER NOT NULL,\n"
         "  runner_up_knobs TEXT NOT NULL,\n"
         "  runner_up_median_ms REAL NOT NULL,\n"
         "  verdict TEXT NOT NULL,\n"
         "  max_abs REAL NOT NULL,\n"
         "  max_rel REAL NOT NULL,\n"
         "  nmse REAL NOT NULL,\n"
         "  tuned_by TEXT NOT NULL,\n"
         "  created_at INTEGER NOT NULL,\n"
         "  kiln_schema_version INTEGER NOT NULL,\n"
         "  checksum TEXT NOT NULL,\n"
         "  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)\n"
         ")";
}

std::string record_columns(bool with_blob) {
  return std::string("structure_sig, shape_key, fingerprint_key, fingerprint_json, ") +
         (with_blob ? "plan_bytes" : "X''") +
         ", plan_size, engine_id, knobs, workspace_bytes, tuned, median_ms, min_ms, max_ms, noise_rel, samples, "
         "runner_up_engine, runner_up_knobs, runner_up_median_ms, verdict, max_abs, max_rel, nmse, tuned_by, "
         "created_at, kiln_schema_version, checksum";
}

void bind_record(Stmt& st, int i, const PlanRecord& r) {
  st.bind(i + 0, r.structure_sig)
      .bind(i + 1, r.shape_key)
      .bind(i + 2, r.fingerprint_key())
      .bind(i + 3, fingerprint_to_json(r.fingerprint))
      .bind_blob(i + 4, r.plan_bytes)
      .bind(i + 5, static_cast<int64_t>(r.plan_bytes.size()))
      .bind(i + 6, r.engine_id)
      .bind(i + 7, knobs_to_text(r.knobs))
      .bind(i + 8, r.workspace_bytes)
      .bind(i + 9, static_cast<int64_t>(r.tuned ? 1 : 0))
      .bind_double(i + 10, r.stats.median_ms)
      .bind_double(i + 11, r.stats.min_ms)
      .bind_double(i + 12, r.stats.max_ms)
      .bind_double(i + 13, r.stats.noise_rel)
      .bind(i + 14, r.stats.samples)
      .bind(i + 15, r.stats.runner_up_engine)
      .bind(i + 16, knobs_to_text(r.stats.runner_up_knobs))
      .bind_double(i + 17, r.stats.runner_up_median_ms)
      .bind(i + 18, std::string_view(disposition_name(r.numerics.verdict)))
      .bind_double(i + 19, r.numerics.max_abs)
      .bind_double(i + 20, r.numerics.max_rel)
      .bind_double(i + 21, r.numerics.nmse)
      .bind(i + 22, r.tuned_by)
      .bind(i + 23, r.created_at)
      .bind(i + 24, static_cast<int64_t>(r.kiln_schema_version))
      .bind(i + 25, r.checksum);
}

namespace {

const char* kColumnNames[kRecordColumnCount] = {
    "structure_sig",
    "shape_key",
    "fingerprint_key",
    "fingerprint_json",
    "plan_bytes",
    "plan_size",
    "engine_id",
    "knobs",
    "workspace_bytes",
    "tuned",
    "median_ms",
    "min_ms",
    "max_ms",
    "noise_rel",
    "samples",
    "runner_up_engine",
    "runner_up_knobs",
    "runner_up_median_ms",
    "verdict",
    "max_abs",
    "max_rel",
    "nmse",
    "tuned_by",
    "created_at",
    "kiln_schema_version",
    "checksum",
};

const char* type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "blob";
    case SQLITE_NULL: return "null";
  }
  return "?";
}

class RowReader {
 public:
  RowReader(const Stmt& st, int first, std::string* problem) : st_(st), first_(first), problem_(problem) {}
  std::string text(int k) {
    expect(k, SQLITE_TEXT, SQLITE_TEXT);
    return st_.text(first_ + k);
  }
  std::string blob(int k) {
    expect(k, SQLITE_BLOB, SQLITE_BLOB);
    return st_.text(first_ + k);
  }
  int64_t integer(int k) {
    expect(k, SQLITE_INTEGER, SQLITE_INTEGER);
    return st_.int64(first_ + k);
  }
  double real(int k) {
    expect(k, SQLITE_FLOAT, SQLITE_INTEGER);
    return st_.real(first_ + k);
  }
  void note(const std::string& p) {
    if (problem_->empty()) *problem_ = p;
  }

 private:
  void expect(int k, int a, int b) {
    int t = st_.type(first_ + k);
    if (t != a && t != b) note(std::string("column ") + kColumnNames[k] + " holds " + type_name(t));
  }
  const Stmt& st_;
  int first_;
  std::string* problem_;
};

}  // namespace

RowRead read_record(const Stmt& st, int first, bool with_blob) {
  RowRead out;
  RowReader rd(st, first, &out.problem);
  PlanRecord& r = out.record;
  r.structure_sig = rd.text(0);
  r.shape_key = rd.text(1);
  out.stored_fingerprint_key = rd.text(2);
  std::string fp_json = rd.text(3);
  if (with_blob) r.plan_bytes = rd.blob(4);
  out.plan_size = rd.integer(5);
  r.engine_id = rd.integer(6);
  std::string knobs = rd.text(7);
  r.workspace_bytes = rd.integer(8);
  r.tuned = rd.integer(9) != 0;
  r.stats.median_ms = rd.real(10);
  r.stats.min_ms = rd.real(11);
  r.stats.max_ms = rd.real(12);
  r.stats.noise_rel = rd.real(13);
  r.stats.samples = rd.integer(14);
  r.stats.runner_up_engine = rd.integer(15);
  std::string ru_knobs = rd.text(16);
  r.stats.runner_up_median_ms = rd.real(17);
  std::string verdict = rd.text(18);
  r.numerics.max_abs = rd.real(19);
  r.numerics.max_rel = rd.real(20);
  r.numerics.nmse = rd.real(21);
  r.tuned_by = rd.text(22);
  r.created_at = rd.integer(23);
  r.kiln_schema_version = static_cast<int>(rd.integer(24));
  r.checksum = rd.text(25);

  StatusOr<EnvFingerprint> fp = fingerprint_from_json(fp_json);
  if (fp.is_ok()) {
    r.fingerprint = *fp;
  } else {
    rd.note(fp.status().message());
  }
  StatusOr<Disposition> v = parse_disposition(verdict);
  if (v.is_ok()) r.numerics.verdict = *v;
  else rd.note("verdict: " + v.status().message());
  StatusOr<Knobs> k = knobs_from_text(knobs);
  if (k.is_ok()) r.knobs = *k;
  else rd.note("knobs: " + k.status().message());
  StatusOr<Knobs> rk = knobs_from_text(ru_knobs);
  if (rk.is_ok()) r.stats.runner_up_knobs = *rk;
  else rd.note("runner_up_knobs: " + rk.status().message());
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
