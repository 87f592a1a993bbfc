// How a PlanRecord maps onto a row of the `plans` table (shared by the store and its bundles), and the
// checks a row read back must pass. Private to the store layer.
#pragma once

#include <string>
#include <string_view>

#include "kiln/store/plan_lookup.h"
#include "kiln/store/plan_record.h"
#include "store/sql.h"
#include "store/table_codec.h"

namespace kiln::store {

// The plans table (the store's `plans`, a bundle's `plans`), described once (store/table_codec.h).
const TableCodec& plans_table();
// plans_table().create_sql(table): CREATE TABLE text for a plans table called `table`.
inline std::string plans_table_sql(const char* table) { return plans_table().create_sql(table); }
// The record columns in order, comma-separated.
std::string record_columns();

// A record as a plans row, and its binding to parameters first..first+25 (order of record_columns).
Row encode_record(const PlanRecord& r);
void bind_record(Stmt& st, int first, const PlanRecord& r);

// A row read back. `problem` is empty when every column had its type and parsed; otherwise the record
// is corrupt and `problem` says why. The raw key and checksum column values are kept for quarantining.
struct RowRead {
  PlanRecord record;
  int64_t plan_size = 0;
  std::string stored_fingerprint_key;
  std::string problem;
};
// Reads the record columns starting at column `first`.
RowRead read_record(const Stmt& st, int first);

// Full check of a row read with its blob: column problems, fingerprint key, truncated blob, checksum.
// Returns "" when the record is sound, else the reason.
std::string record_problem(const RowRead& row);

// "0123456789ab/shape/fedcba987654": a short name of a record for messages.
std::string record_name(const std::string& structure_sig, const std::string& shape_key,
                        const std::string& fingerprint_key);

// WHERE clause for a ListFilter, parameters ?1..?4 bound by bind_filter.
inline constexpr const char* kFilterWhere =
    " WHERE (?1 = '' OR substr(structure_sig, 1, length(?1)) = ?1) AND (?2 = '' OR shape_key = ?2)"
    " AND (?3 = '' OR fingerprint_key = ?3) AND (?4 = 0 OR tuned = 1)";
inline void bind_filter(Stmt& st, const ListFilter& f) {
  st.bind(1, f.structure_prefix).bind(2, f.shape_key).bind(3, f.fingerprint_key).bind(4, int64_t{f.tuned_only});
}

// Checks a record before it is written: InvalidArgument naming the field.
Status validate_for_write(const PlanRecord& r);
// The record as a write stores it: tuned_by (user@host) and created_at (now) filled when empty, this schema's
// version, and its checksum.
PlanRecord stamped_for_write(const PlanRecord& r);

// "user@host" of this process, and the time in unix seconds.
std::string user_at_host();
int64_t unix_now();

// Runs a validator without letting an exception escape.
Status run_validator(const PlanValidator& v, const PlanRecord& r);

}  // namespace kiln::store
