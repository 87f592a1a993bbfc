// libpq, the PostgreSQL client library, loaded at run time (dlopen "libpq.so.5") the first time a store at a
// postgresql:// location is opened: Kiln links nothing for it, a host without libpq runs every SQLite store as
// before, and a PostgreSQL store there fails to open with a message naming the library and the package.
// The few libpq types and constants the store uses are declared here (libpq's ABI has kept them since 9.x;
// libpq_test.cc checks them against <libpq-fe.h> where that header is installed). Private to the store layer.
#pragma once

#include <cstddef>

#include "kiln/core/status.h"

namespace kiln::store::pq {

struct PGconn;  // opaque
struct PGresult;
struct PQconninfoOption;  // opaque
// libpq's PGnotify (a NOTIFY received): its public fields, in libpq's order.
struct PGnotify {
  char* relname;   // the channel
  int be_pid;      // the notifying server process
  char* extra;     // the payload
  PGnotify* next;  // private to libpq
};

inline constexpr int kConnectionOk = 0;    // ConnStatusType CONNECTION_OK
inline constexpr int kCommandOk = 1;       // ExecStatusType PGRES_COMMAND_OK
inline constexpr int kTuplesOk = 2;        // PGRES_TUPLES_OK
inline constexpr int kDiagSqlstate = 'C';  // PG_DIAG_SQLSTATE
inline constexpr unsigned kByteaOid = 17;  // pg_type oids the store binds and reads
inline constexpr unsigned kInt8Oid = 20;
inline constexpr unsigned kInt2Oid = 21;
inline constexpr unsigned kInt4Oid = 23;
inline constexpr unsigned kTextOid = 25;
inline constexpr unsigned kOidOid = 26;
inline constexpr unsigned kFloat4Oid = 700;
inline constexpr unsigned kFloat8Oid = 701;
inline constexpr unsigned kNumericOid = 1700;

// The libpq functions the store calls.
struct Api {
  PGconn* (*connectdb)(const char* conninfo);
  int (*status)(const PGconn* conn);
  char* (*error_message)(const PGconn* conn);
  void (*finish)(PGconn* conn);
  void (*reset)(PGconn* conn);
  PGresult* (*exec)(PGconn* conn, const char* query);
  PGresult* (*exec_params)(PGconn* conn, const char* command, int n, const unsigned* types, const char* const* values,
                           const int* lengths, const int* formats, int result_format);
  PGresult* (*prepare)(PGconn* conn, const char* name, const char* query, int n, const unsigned* types);
  PGresult* (*exec_prepared)(PGconn* conn, const char* name, int n, const char* const* values, const int* lengths,
                             const int* formats, int result_format);
  int (*result_status)(const PGresult* res);
  char* (*result_error_message)(const PGresult* res);
  char* (*result_error_field)(const PGresult* res, int field);
  int (*ntuples)(const PGresult* res);
  int (*nfields)(const PGresult* res);
  char* (*getvalue)(const PGresult* res, int row, int col);
  int (*getlength)(const PGresult* res, int row, int col);
  int (*getisnull)(const PGresult* res, int row, int col);
  unsigned (*ftype)(const PGresult* res, int col);
  char* (*cmd_tuples)(PGresult* res);
  void (*clear)(PGresult* res);
  int (*consume_input)(PGconn* conn);
  PGnotify* (*notifies)(PGconn* conn);
  void (*freemem)(void* p);
  int (*socket)(const PGconn* conn);
  int (*server_version)(const PGconn* conn);
  int (*backend_pid)(const PGconn* conn);
  void* (*set_notice_processor)(PGconn* conn, void (*proc)(void* arg, const char* message), void* arg);
  PQconninfoOption* (*conninfo_parse)(const char* conninfo, char** errmsg);  // null and *errmsg on a bad string
  void (*conninfo_free)(PQconninfoOption* options);
};

// The library, loaded once per process. Unavailable (exit 3: a missing library) naming libpq.so.5 and Debian's libpq5 package
// when it cannot be loaded or lacks a function.
StatusOr<const Api*> api();

}  // namespace kiln::store::pq
