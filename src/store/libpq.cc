#include "store/libpq.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace kiln::store::pq {

namespace {

template <class F>
bool load(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *missing += (missing->empty() ? "" : ", ") + std::string(name);
  return *out != nullptr;
}

Status load_api(Api* a) {
  // RTLD_LOCAL: libpq's own dependencies (OpenSSL, Kerberos) stay out of the process's global namespace.
  // KILN_LIBPQ names the library file where it is not on the loader's path (a libpq unpacked beside Kiln).
  const char* given = std::getenv("KILN_LIBPQ");
  const std::string name = given && *given ? given : "libpq.so.5";
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return unavailable("a PostgreSQL plan store needs libpq (" + name + ": " + (why ? why : "?") +
                       "); install it (Debian: apt-get install libpq5), name its file in KILN_LIBPQ, or use a "
                       "SQLite store path");
  }
  std::string missing;
  load(lib, "PQconnectdb", &a->connectdb, &missing);
  load(lib, "PQstatus", &a->status, &missing);
  load(lib, "PQerrorMessage", &a->error_message, &missing);
  load(lib, "PQfinish", &a->finish, &missing);
  load(lib, "PQreset", &a->reset, &missing);
  load(lib, "PQexec", &a->exec, &missing);
  load(lib, "PQexecParams", &a->exec_params, &missing);
  load(lib, "PQprepare", &a->prepare, &missing);
  load(lib, "PQexecPrepared", &a->exec_prepared, &missing);
  load(lib, "PQresultStatus", &a->result_status, &missing);
  load(lib, "PQresultErrorMessage", &a->result_error_message, &missing);
  load(lib, "PQresultErrorField", &a->result_error_field, &missing);
  load(lib, "PQntuples", &a->ntuples, &missing);
  load(lib, "PQnfields", &a->nfields, &missing);
  load(lib, "PQgetvalue", &a->getvalue, &missing);
  load(lib, "PQgetlength", &a->getlength, &missing);
  load(lib, "PQgetisnull", &a->getisnull, &missing);
  load(lib, "PQftype", &a->ftype, &missing);
  load(lib, "PQcmdTuples", &a->cmd_tuples, &missing);
  load(lib, "PQclear", &a->clear, &missing);
  load(lib, "PQconsumeInput", &a->consume_input, &missing);
  load(lib, "PQnotifies", &a->notifies, &missing);
  load(lib, "PQfreemem", &a->freemem, &missing);
  load(lib, "PQsocket", &a->socket, &missing);
  load(lib, "PQserverVersion", &a->server_version, &missing);
  load(lib, "PQbackendPID", &a->backend_pid, &missing);
  load(lib, "PQsetNoticeProcessor", &a->set_notice_processor, &missing);
  load(lib, "PQconninfoParse", &a->conninfo_parse, &missing);
  load(lib, "PQconninfoFree", &a->conninfo_free, &missing);
  if (!missing.empty()) return unavailable("libpq.so.5 lacks " + missing + " (a libpq older than 9.x?)");
  return Status::ok();  // the library stays loaded for the process's life
}

}  // namespace

StatusOr<const Api*> api() {
  static Api a;
  static Status loaded = load_api(&a);
  if (!loaded.is_ok()) return loaded;
  return &a;
}

}  // namespace kiln::store::pq
