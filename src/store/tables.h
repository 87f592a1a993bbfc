// The store's tables, each described once as data (store/table_codec.h), and the codec of each record kind
// over its table: encode (record -> Row) and decode (Row -> record, with its own checks). plans' codec is in
// store/record_codec.h. Private to the store layer.
//
// Every table beside `plans` and `quarantine` (re-tune queue, graph specs, fusion decisions, kernel caches,
// first-use verdicts) was added within schema version 1 (docs/store.md "Schema"): open() creates them when
// missing, and a Kiln that predates them ignores them.
#pragma once

#include <string>

#include "kiln/store/first_use_record.h"
#include "kiln/store/fusion_record.h"
#include "kiln/store/graph_spec_entry.h"
#include "kiln/store/kernel_cache_record.h"
#include "kiln/store/plan_rollout.h"
#include "kiln/store/retune_request.h"
#include "kiln/store/winner_change.h"
#include "store/table_codec.h"

namespace kiln::store {

// A record kind over its table. decode returns "" when the row is sound, else the problem (the checksum and
// the record's own checks included); it is only called on a row whose columns are of their declared types.
template <class Record>
struct RecordCodec {
  const TableCodec& table;
  Row (*encode)(const Record&);
  std::string (*decode)(const Row&, Record*);

  void bind(Stmt& st, int first, const Record& r) const { table.bind(st, first, encode(r)); }
  // Reads a row from column `first`: "" when sound, else the problem (column types first).
  std::string read(const Stmt& st, int first, Record* out) const {
    std::string problem;
    Row row = table.read(st, first, &problem);
    return problem.empty() ? decode(row, out) : problem;
  }
  std::string checksum(const Record& r) const { return table.checksum(encode(r)); }
};

// The one codec of a record kind (made on first use).
template <class Record>
const RecordCodec<Record>& make_codec(const TableCodec& table, Row (*encode)(const Record&),
                                      std::string (*decode)(const Row&, Record*)) {
  static const RecordCodec<Record> codec{table, encode, decode};
  return codec;
}

const RecordCodec<GraphSpecEntry>& graph_spec_codec();
const RecordCodec<FusionRecord>& fusion_record_codec();
const RecordCodec<KernelCacheRecord>& kernel_cache_codec();
const RecordCodec<FirstUseRecord>& first_use_codec();
// The re-tune queue keeps no checksum; decode names unreadable columns in RetuneQueueEntry::problem (a row
// is listed whatever it holds).
const RecordCodec<RetuneQueueEntry>& retune_queue_codec();

// The winner changes put() keeps (store/winner_changes.cc; no checksum: a log).
const RecordCodec<WinnerChange>& winner_change_codec();

// Plan states (store/plan_rollout.cc): the non-active plans of each key, whole, and every transition (a log: no
// checksum; the rollout rows keep their records' own checksums).
const RecordCodec<PlanTransition>& plan_history_codec();
const TableCodec& plan_rollout_table();

// The re-tune queue's leases and the log of ended claims (store/retune_leases.cc; no checksum: queue state).
const TableCodec& retune_leases_table();
const TableCodec& retune_log_table();

// Whether the database has a table of this name (a read-only store written before the table existed has
// none).
inline StatusOr<bool> table_exists(Conn* db, const char* table) { return db->table_exists(table); }

}  // namespace kiln::store
