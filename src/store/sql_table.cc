// One row's insert, put and delete by key in a table of the SQLite store (store/sql_table.h).
#include "store/sql_table.h"

namespace kiln::store {

Status insert_row(Conn* db, const TableCodec& t, const Row& row) {
  KILN_ASSIGN_OR_RETURN(Stmt st, Stmt::prepare(db, t.insert_sql()));
  t.bind(st, 1, row);
  return st.run();
}

Status put_row(Conn* db, const TableCodec& t, const Row& row) {
  Txn txn(db);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_RETURN_IF_ERROR(insert_row(db, t, row));
  return txn.commit();
}

StatusOr<int64_t> delete_by_key_in_txn(Conn* db, const TableCodec& t, std::initializer_list<std::string_view> key) {
  KILN_ASSIGN_OR_RETURN(Stmt del, Stmt::prepare(db, std::string("DELETE FROM ") + t.table + t.where_key(key.size())));
  bind_texts(del, key);
  KILN_RETURN_IF_ERROR(del.run());
  return db->changes();
}

StatusOr<int64_t> delete_by_key(Conn* db, const TableCodec& t, std::initializer_list<std::string_view> key) {
  Txn txn(db);
  KILN_RETURN_IF_ERROR(txn.begin());
  KILN_ASSIGN_OR_RETURN(int64_t n, delete_by_key_in_txn(db, t, key));
  KILN_RETURN_IF_ERROR(txn.commit());
  return n;
}

}  // namespace kiln::store
