// The store's SQL, written once in SQLite's dialect, as PostgreSQL runs it. A pure text translation (no
// server): private to the store layer, used by PgConn for every statement, tested in pg_sql_test.cc.
//   ?N                                  -> $N (outside quoted text and names)
//   INSERT OR REPLACE INTO t(c1, ...)   -> INSERT INTO t(c1, ...) ... ON CONFLICT ON CONSTRAINT t_pkey
//                                          DO UPDATE SET c1 = EXCLUDED.c1, ... (an upsert by the primary key)
//   INSERT OR IGNORE INTO t(...) ...    -> INSERT INTO t(...) ... ON CONFLICT DO NOTHING
//   CREATE TABLE IF NOT EXISTS t(       -> the same, with a first column `rowid BIGSERIAL` (the rows' handle
//                                          SQLite has built in), and the types: INTEGER -> BIGINT, REAL ->
//                                          DOUBLE PRECISION, BLOB -> BYTEA, TEXT -> TEXT COLLATE "C" (bytewise
//                                          order, as SQLite's), INTEGER PRIMARY KEY AUTOINCREMENT -> BIGSERIAL
//                                          PRIMARY KEY
// Everything else (SELECT, UPDATE, DELETE, COALESCE, CAST, substr, length) is the same in both.
#pragma once

#include <string>
#include <string_view>

namespace kiln::store {

std::string postgres_sql(std::string_view sqlite_sql);

}  // namespace kiln::store
