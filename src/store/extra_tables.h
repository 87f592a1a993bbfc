// The store's tables beside `plans` and `quarantine`: the re-tune queue, graph specs, fusion decisions, kernel
// caches and first-use verdicts.
// Private to the store layer. All were added to schema version 1 (docs/store.md "Schema"): open() creates them when
// missing, and a Kiln that predates them ignores them.
#pragma once

#include <string>

#include "kiln/store/plan_store.h"
#include "store/sqlite_util.h"

namespace kiln::store {

// CREATE TABLE IF NOT EXISTS text.
std::string retune_queue_table_sql();
std::string graph_specs_table_sql(const char* table);  // the store's `graph_specs`, a bundle's `graph_specs`

std::string fusion_decisions_table_sql(const char* table);  // the store's and a bundle's `fusion_decisions`
std::string kernel_caches_table_sql();                      // the store's `kernel_caches` (never in a bundle)
std::string first_use_verdicts_table_sql();                 // the store's `first_use_verdicts` (never in a bundle)

// Whether the database has a table of this name (a read-only store written before the table existed has
// none).
StatusOr<bool> table_exists(sqlite3* db, const char* table);

// The graph_specs columns in order, and their binding/reading (shared by the store and its bundles).
inline constexpr const char* kGraphSpecColumns =
    "structure_sig, shape_key, graph_name, spec_json, created_at, checksum";
void bind_graph_spec(Stmt& st, int first, const GraphSpecEntry& e);
// Reads the columns of kGraphSpecColumns from column `first`; returns "" when sound, else the problem.
std::string read_graph_spec(const Stmt& st, int first, GraphSpecEntry* out);

// The fusion_decisions columns in order (kiln/store/fusion_record.h), and their binding/reading.
inline constexpr const char* kFusionRecordColumns =
    "structure_sig, shape_key, fingerprint_key, fingerprint_json, materialized, parts_json, policy, fused_ms, "
    "unfused_ms, explanation, created_at, checksum";
void bind_fusion_record(Stmt& st, int first, const FusionRecord& r);
// Reads the columns of kFusionRecordColumns from column `first`; "" when sound (checksum and fingerprint key
// included), else the problem.
std::string read_fusion_record(const Stmt& st, int first, FusionRecord* out);

}  // namespace kiln::store
