// Helpers shared by the store tests: a fake H200 fingerprint, records, corruption. The temporary folder and
// the kiln binary's runs are tests/cli_test_util.h's.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "kiln/store/plan_store.h"
#include "store/pg_conn.h"

namespace kiln::store_test {

using ::kiln::test::TempDir;  // tests/cli_test_util.h

// The store at `path`, opened (read-only when asked); a failure fails the test and gives null.
inline std::unique_ptr<PlanStore> open_store(const std::string& path, bool read_only = false) {
  StoreOpenOptions o;
  o.read_only = read_only;
  auto s = PlanStore::open(path, o);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

// Runs one SQL statement on a store file directly (to inject corruption); returns the rows changed.
inline int raw_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err ? err : "");
  sqlite3_free(err);
  int changes = sqlite3_changes(db);
  sqlite3_close(db);
  return changes;
}

// ---- The store's contract: tests written against PlanStore&, run once per implementation ----
// An implementation of PlanStore: how to open one at a location, and how to damage its rows behind its back
// (SQL on the store's own tables, for the corruption tests). A test names its store by a file path in its own
// temporary folder (`where`); an implementation maps it to its own kind of location.
struct StoreImplementation {
  std::string name;  // the test parameter's name: "sqlite", "postgresql"
  std::function<StatusOr<std::unique_ptr<PlanStore>>(const std::string& where, const StoreOpenOptions&)> open;
  std::function<int(const std::string& where, const std::string& sql)> raw_sql;
  bool files = true;  // the store is the file at `where` (SQLite): the file-format cases apply
};

// What a test's name and its failure messages call the implementation.
inline void PrintTo(const StoreImplementation& impl, std::ostream* os) { *os << impl.name; }

// ---- PostgreSQL: the server named by $KILN_TEST_POSTGRES (scripts/postgres.sh starts one for the tests) ----
inline std::string postgres_conninfo() {
  const char* c = std::getenv("KILN_TEST_POSTGRES");
  return c ? c : "";
}
// Each test location is a schema of its own in the test database: "t_" and a hash of the path.
inline std::string postgres_schema(const std::string& where) {
  return "t_" + std::to_string(std::hash<std::string>{}(where));
}
inline std::string postgres_location(const std::string& where) {
  return postgres_conninfo() + " options='-csearch_path=" + postgres_schema(where) + "'";
}
// The schemas this process made (dropped when its test ends: StoreContract::TearDown).
inline std::set<std::string>& postgres_schemas_made() {
  static std::set<std::string> made;
  return made;
}
// Runs SQL in the location's schema (made when missing); returns the rows the last statement changed, -1 (and
// a test failure) on an error.
inline int postgres_sql(const std::string& where, const std::string& sql) {
  auto conn = store::PgConn::connect(postgres_location(where), "test server", false);
  EXPECT_TRUE(conn.is_ok()) << conn.status().to_string();
  if (!conn.is_ok()) return -1;
  // Under a lock: two processes making one schema at once would otherwise collide in the catalog.
  // (each its own statement: one multi-statement text is one transaction, whose catalog view predates the lock).
  Status s = (*conn)->exec("SELECT pg_advisory_lock(7)");
  if (s.is_ok()) s = (*conn)->exec(("CREATE SCHEMA IF NOT EXISTS " + postgres_schema(where)).c_str());
  if (s.is_ok()) postgres_schemas_made().insert(postgres_schema(where));
  if (s.is_ok()) s = (*conn)->exec("SELECT pg_advisory_unlock(7)");
  if (s.is_ok() && !sql.empty()) s = (*conn)->exec(sql.c_str());
  EXPECT_TRUE(s.is_ok()) << sql << ": " << s.to_string();
  return s.is_ok() ? static_cast<int>((*conn)->changes()) : -1;
}

inline std::vector<StoreImplementation> store_implementations() {
  return {{"sqlite", [](const std::string& p, const StoreOpenOptions& o) { return PlanStore::open(p, o); },
           [](const std::string& p, const std::string& sql) { return store_test::raw_sql(p, sql); }},
          {"postgresql",
           [](const std::string& w, const StoreOpenOptions& o) -> StatusOr<std::unique_ptr<PlanStore>> {
             if (postgres_sql(w, "") < 0) return unavailable("no PostgreSQL schema for " + w);
             return PlanStore::open(postgres_location(w), o);
           },
           // A path that is a file is a bundle (always SQLite); any other is the store's schema.
           [](const std::string& w, const std::string& sql) {
             return std::filesystem::exists(w) ? store_test::raw_sql(w, sql) : postgres_sql(w, sql);
           },
           /*files=*/false}};
}

// The fixture of a contract test: open_store, open_impl and raw_sql go to the implementation under test.
// Without $KILN_TEST_POSTGRES the PostgreSQL cases are skipped, or fail where $CI is set (CI has a server).
class StoreContract : public ::testing::TestWithParam<StoreImplementation> {
 protected:
  void SetUp() override {
    if (GetParam().name != "postgresql" || !postgres_conninfo().empty()) return;
    if (std::getenv("CI"))
      FAIL() << "KILN_TEST_POSTGRES is not set: CI runs these against scripts/postgres.sh's server";
    GTEST_SKIP() << "no PostgreSQL server: set KILN_TEST_POSTGRES (scripts/postgres.sh start DIR; ... env DIR)";
  }
  // A test's schemas go with it, so that a long-lived test server does not fill with them.
  void TearDown() override {
    if (postgres_schemas_made().empty()) return;
    auto conn = store::PgConn::connect(postgres_conninfo(), "test server", false);
    for (const std::string& schema : postgres_schemas_made())
      if (conn.is_ok()) (void)(*conn)->exec(("DROP SCHEMA IF EXISTS " + schema + " CASCADE").c_str());
    postgres_schemas_made().clear();
  }
  // The case is about the store's file (SQLite's format); other implementations skip it.
  bool file_case() const { return GetParam().files; }
  // What the store's messages call the store at `where`.
  std::string location(const std::string& where) const {
    return file_case() ? where : store::redact_location(postgres_location(where));
  }
  StatusOr<std::unique_ptr<PlanStore>> open_impl(const std::string& where, const StoreOpenOptions& o = {}) {
    return GetParam().open(where, o);
  }
  std::unique_ptr<PlanStore> open_store(const std::string& where, const StoreOpenOptions& o) {
    auto s = open_impl(where, o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<PlanStore> open_store(const std::string& where, bool read_only = false) {
    StoreOpenOptions o;
    o.read_only = read_only;
    return open_store(where, o);
  }
  int raw_sql(const std::string& where, const std::string& sql) { return GetParam().raw_sql(where, sql); }
  // The same damage in each backend's words, where their SQL differs (blob functions, casts).
  const std::string& sql_for(const std::string& sqlite_sql, const std::string& postgres_sql) const {
    return file_case() ? sqlite_sql : postgres_sql;
  }
};

// A case about a server's connections (PostgreSQL): reported as skipped (not passed) for a file store.
#define KILN_STORE_SERVER_CASE()                                               \
  do {                                                                         \
    if (file_case()) GTEST_SKIP() << "a case of a server store's connections"; \
  } while (0)

// A case about SQLite's file or its loose column types (a PostgreSQL column holds only its type): run for the
// file-backed implementation, reported as skipped (not passed) for the others.
#define KILN_STORE_FILE_CASE()                                                                \
  do {                                                                                        \
    if (!file_case()) GTEST_SKIP() << "a case of SQLite's file format or loose column types"; \
  } while (0)

// Runs the contract suite `fixture` (a class derived from StoreContract) over every implementation.
#define KILN_STORE_CONTRACT_SUITE(fixture)                                              \
  INSTANTIATE_TEST_SUITE_P(                                                             \
      Store, fixture, ::testing::ValuesIn(::kiln::store_test::store_implementations()), \
      [](const ::testing::TestParamInfo<::kiln::store_test::StoreImplementation>& i) { return i.param.name; })

inline EnvFingerprint h200() {
  EnvFingerprint f;
  f.gpu_name = "NVIDIA H200";
  f.sm_version = 90;
  f.sm_count = 132;
  f.device_uuid = "GPU-0d9f7a3e-1111-2222-3333-444455556666";
  f.driver_version = 13000;
  f.driver_release = "580.159.04";
  f.cuda_runtime_version = 13000;
  f.cudnn_version = 91900;
  f.cudnn_header_version = 91900;
  f.cudnn_library_path = "/usr/lib/x86_64-linux-gnu/libcudnn.so.9";
  f.cudnn_frontend_version = 12300;
  f.kiln_version = "0.1.0";
  f.kiln_git_revision = "abcdef123456";
  f.has_device = true;
  return f;
}

inline PlanRecord make_record(int i, const EnvFingerprint& fp = h200(), const std::string& sig_prefix = "sig") {
  PlanRecord r;
  r.structure_sig = sig_prefix + std::to_string(i) + "_0123456789abcdef0123456789abcdef";
  r.shape_key = "b=" + std::to_string(8 * (i % 4 + 1)) + ";s=128";
  r.fingerprint = fp;
  r.plan_bytes = std::string(200 + i % 50, '\0');
  for (size_t k = 0; k < r.plan_bytes.size(); ++k) r.plan_bytes[k] = static_cast<char>((k * 31 + i) & 0xff);
  r.engine_id = 7 + i % 5;
  r.knobs = {{"TILE_SIZE", 2}, {"SPLIT_K", i % 3}};
  r.workspace_bytes = 1 << 20;
  r.tuned = true;
  r.stats.median_ms = 0.125 + i * 0.001;
  r.stats.min_ms = 0.120;
  r.stats.max_ms = 0.140;
  r.stats.noise_rel = 0.02;
  r.stats.samples = 50;
  r.stats.runner_up_engine = 3;
  r.stats.runner_up_knobs = {{"TILE_SIZE", 1}};
  r.stats.runner_up_median_ms = 0.131;
  r.numerics.verdict = Disposition::kPassed;
  r.numerics.max_abs = 1e-3;
  r.numerics.max_rel = 2e-3;
  r.numerics.nmse = 1e-7;
  r.tuned_by = "tester@host";
  r.created_at = 1700000000 + i;
  return r;
}

// Flips (XORs with 0xff) one byte of the plan blob of the row whose structure_sig is `sig`, in place, with
// SQLite's incremental blob I/O: the length and type stay the same.
inline void flip_blob_byte(const std::string& path, const std::string& sig, int offset = 0) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT rowid FROM plans WHERE structure_sig = ?1", -1, &st, nullptr), SQLITE_OK);
  sqlite3_bind_text(st, 1, sig.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW) << sig;
  sqlite3_int64 rowid = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_blob* blob = nullptr;
  ASSERT_EQ(sqlite3_blob_open(db, "main", "plans", "plan_bytes", rowid, 1, &blob), SQLITE_OK) << sqlite3_errmsg(db);
  unsigned char b = 0;
  ASSERT_EQ(sqlite3_blob_read(blob, &b, 1, offset), SQLITE_OK);
  b ^= 0xff;
  ASSERT_EQ(sqlite3_blob_write(blob, &b, 1, offset), SQLITE_OK);
  sqlite3_blob_close(blob);
  sqlite3_close(db);
}

}  // namespace kiln::store_test
