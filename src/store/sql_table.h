// Reading and writing one table of the SQLite store, the same for every record kind (its codec says how a
// record maps onto a row: store/tables.h). Private to the store layer.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/log.h"
#include "store/tables.h"
#include "store/record_codec.h"
#include "store/sql.h"

namespace kiln::store {

// Inserts (or replaces, by key) one row, in the caller's transaction.
Status insert_row(Conn* db, const TableCodec& t, const Row& row);
// Inserts (or replaces) one row in a write transaction of its own.
Status put_row(Conn* db, const TableCodec& t, const Row& row);
// Deletes the rows with these values of the first key columns, in a write transaction of its own; returns how
// many went.
StatusOr<int64_t> delete_by_key(Conn* db, const TableCodec& t, std::initializer_list<std::string_view> key);
// The same, in the caller's transaction.
StatusOr<int64_t> delete_by_key_in_txn(Conn* db, const TableCodec& t, std::initializer_list<std::string_view> key);

// Fills a record's created_at (when 0) and checksum: what every put stores.
template <class Record>
Record stamped(const RecordCodec<Record>& codec, Record r) {
  if (r.created_at == 0) r.created_at = unix_now();
  r.checksum = codec.checksum(r);
  return r;
}

// A row read back: the record (when sound), the row's values as read, and the problem ("" when sound).
template <class Record>
struct Found {
  Record record;
  Row row;
  std::string problem;
};

// The rows of `SELECT <columns> FROM <table><tail>`, with ?1..?n bound to `binds`.
template <class Record>
StatusOr<std::vector<Found<Record>>> select_records(Conn* db, const RecordCodec<Record>& codec, const std::string& tail,
                                                    std::initializer_list<std::string_view> binds = {}) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, codec.table.select_sql(tail)));
  bind_texts(st, binds);
  std::vector<Found<Record>> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    Found<Record> f;
    f.row = codec.table.read(st, 0, &f.problem);
    if (f.problem.empty()) f.problem = codec.decode(f.row, &f.record);
    out.push_back(std::move(f));
  }
  return out;
}

// Every sound record of the table, in `order` (an ORDER BY clause); a damaged row is logged ("skipped corrupt
// <what> <name>: <problem>", `name` made from the row as read, may be "") and passed over. Nothing when the
// table is absent (a read-only store written before it existed).
template <class Record>
StatusOr<std::vector<Record>> list_sound(Conn* db, const std::string& store_path, const RecordCodec<Record>& codec,
                                         const char* order, const char* what, std::string (*name)(const Row&)) {
  std::vector<Record> out;
  KILN_ASSIGN_OR_RETURN(bool exists, table_exists(db, codec.table.table));
  if (!exists) return out;
  KILN_ASSIGN_OR_RETURN(std::vector<Found<Record>> rows, select_records(db, codec, std::string(" ") + order));
  for (Found<Record>& f : rows) {
    if (f.problem.empty()) {
      out.push_back(std::move(f.record));
      continue;
    }
    const std::string n = name(f.row);
    KILN_LOG(kWarn, "plan store " << store_path << ": skipped corrupt " << what << (n.empty() ? "" : " ") << n << ": "
                                  << f.problem);
  }
  return out;
}

}  // namespace kiln::store
