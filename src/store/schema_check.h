// Checks that a table Kiln reads (in a store or a bundle) is the table Kiln made: a table, not a view, with
// every column its CREATE statement gives. A damaged schema is Corruption (exit 4), found when the file is
// opened, rather than a SQL error at the first query that touches it. Private to the store layer.
#pragma once

#include <string>

#include "kiln/core/status.h"
#include "store/sql.h"

namespace kiln::store {

// `create_sql` is the table's CREATE TABLE IF NOT EXISTS text (plans_table_sql(...) and the like); the
// expected columns are read from it. Absent table: Corruption when `required`, else OK. Extra columns are
// allowed (a later Kiln of the same schema version may add some). Messages name the table and the damage
// ("table 'plans' lacks column 'engine_id' (damaged schema)"); the caller names the file.
Status check_table_schema(Conn* db, const std::string& table, const std::string& create_sql, bool required);

}  // namespace kiln::store
