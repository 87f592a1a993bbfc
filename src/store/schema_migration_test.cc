// Schema versions and migrations (store/database.h Schema::migrations), on a schema of the test's own: a writable
// open runs the steps from the file's version in one transaction and records the version reached; a failing step
// leaves the file as it was; a read-only open of a file with steps to run is refused naming both versions; a
// version with no step stays as it is; a newer file is refused.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/store/plan_store.h"
#include "store/database.h"
#include "store/schema_check.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store::Conn;
using store::Database;
using store::Migration;
using store::Schema;
using store_test::TempDir;

constexpr const char* kV1Table = "CREATE TABLE IF NOT EXISTS t(a TEXT NOT NULL)";
constexpr const char* kV2Table = "CREATE TABLE IF NOT EXISTS t(a TEXT NOT NULL, b TEXT NOT NULL DEFAULT '')";

Schema schema_v1() {
  return Schema{1,
                "test store",
                [](Conn* db) { return store::check_table_schema(db, "t", kV1Table, true); },
                [](Conn* db) { return store::exec(db, kV1Table); },
                {}};
}

Schema schema_v2(bool step_fails = false) {
  Schema s{2,
           "test store",
           [](Conn* db) { return store::check_table_schema(db, "t", kV2Table, true); },
           [](Conn* db) { return store::exec(db, kV2Table); },
           {}};
  s.migrations.push_back(Migration{1, "t gains column b", [step_fails](Conn* db) -> Status {
                                     KILN_RETURN_IF_ERROR(
                                         store::exec(db, "ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT ''"));
                                     if (step_fails) return internal_error("injected failure after the ALTER");
                                     return Status::ok();
                                   }});
  return s;
}

class SchemaMigration : public store_test::StoreContract {
 protected:
  // The database at `where` (a file, or a PostgreSQL schema of that name) opened with schema `s`.
  StatusOr<Database> open(const std::string& where, const Schema& s, bool read_only = false) {
    StoreOpenOptions o;
    o.read_only = read_only;
    if (file_case()) return Database::open(where, o, s);
    if (store_test::postgres_sql(where, "") < 0) return unavailable("no PostgreSQL schema for " + where);
    return Database::open_postgres(store_test::postgres_location(where), "test server", o, s);
  }
  // A v1 database with one row.
  std::string v1_file(const TempDir& dir) {
    const std::string path = dir.file("v1.db");
    auto db = open(path, schema_v1());
    EXPECT_TRUE(db.is_ok()) << db.status().to_string();
    if (db.is_ok()) {
      EXPECT_TRUE(store::exec(db->handle(), "INSERT INTO t(a) VALUES ('kept')").is_ok());
    }
    return path;
  }
};

std::string version_of(const Database& db) {
  auto st = store::Stmt::prepare(db.handle(), "SELECT value FROM meta WHERE key='schema_version'");
  if (!st.is_ok()) return "?";
  auto row = st->step();
  return row.is_ok() && *row ? st->text(0) : "?";
}

bool has_column_b(const Database& db) {
  auto cols = db.handle()->columns_of("t");
  return cols.is_ok() && std::find(cols->begin(), cols->end(), "b") != cols->end();
}

TEST_P(SchemaMigration, AWritableOpenRunsTheStepsAndRecordsTheVersion) {
  TempDir dir;
  const std::string path = v1_file(dir);
  auto db = open(path, schema_v2());
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  EXPECT_EQ(version_of(*db), "2");
  EXPECT_TRUE(has_column_b(*db));
  auto st = store::Stmt::prepare(db->handle(), "SELECT a, b FROM t");
  ASSERT_TRUE(st.is_ok());
  auto row = st->step();
  ASSERT_TRUE(row.is_ok() && *row);
  EXPECT_EQ(st->text(0), "kept");  // the row survived the step
  EXPECT_EQ(st->text(1), "");
  // Opened again: nothing left to run.
  auto again = open(path, schema_v2());
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(version_of(*again), "2");
}

TEST_P(SchemaMigration, AFailingStepLeavesTheFileAsItWas) {
  TempDir dir;
  const std::string path = v1_file(dir);
  auto db = open(path, schema_v2(/*step_fails=*/true));
  ASSERT_FALSE(db.is_ok());
  EXPECT_NE(db.status().message().find("migrating the test store from schema version 1 (t gains column b)"),
            std::string::npos)
      << db.status().to_string();
  auto v1 = open(path, schema_v1(), /*read_only=*/true);
  ASSERT_TRUE(v1.is_ok()) << v1.status().to_string();
  EXPECT_EQ(version_of(*v1), "1");
  EXPECT_FALSE(has_column_b(*v1)) << "the ALTER of the failed step was not rolled back";
}

TEST_P(SchemaMigration, AReadOnlyOpenOfAFileWithStepsToRunIsRefusedNamingBothVersions) {
  TempDir dir;
  const std::string path = v1_file(dir);
  auto db = open(path, schema_v2(), /*read_only=*/true);
  ASSERT_FALSE(db.is_ok());
  EXPECT_EQ(db.status().code(), StatusCode::kFailedPrecondition) << db.status().to_string();
  EXPECT_NE(db.status().message().find("store schema version 1, which this Kiln (2) migrates"), std::string::npos)
      << db.status().to_string();
}

TEST_P(SchemaMigration, AVersionWithoutAStepStaysAsItIsAndANewerFileIsRefused) {
  TempDir dir;
  const std::string path = v1_file(dir);
  Schema same_tables = schema_v1();
  same_tables.version = 2;  // v2 without a step from 1: v1 files are read as they are
  auto db = open(path, same_tables);
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  EXPECT_EQ(version_of(*db), "1");
  auto ro = open(path, same_tables, /*read_only=*/true);
  EXPECT_TRUE(ro.is_ok()) << ro.status().to_string();
  const std::string v2 = dir.file("v2.db");
  { ASSERT_TRUE(open(v2, schema_v2()).is_ok()); }
  auto old = open(v2, schema_v1());
  ASSERT_FALSE(old.is_ok());
  EXPECT_EQ(old.status().code(), StatusCode::kNewerVersion) << old.status().to_string();
}

KILN_STORE_CONTRACT_SUITE(SchemaMigration);

}  // namespace
}  // namespace kiln
