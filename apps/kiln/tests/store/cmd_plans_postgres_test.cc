// `kiln plans` (and the other --store commands) on a PostgreSQL store, as a user runs them: the built binary
// against the server of $KILN_TEST_POSTGRES (scripts/postgres.sh), each test in a schema of its own. Without a
// server the cases are skipped, or fail where $CI is set (CI has one), as StoreContract's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::make_record;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;
using test::shell_quote;

// Locations no server answers: a socket folder that does not exist.
const std::string kUnreachable = "postgresql://nobody@/nodb?host=/nonexistent";
const std::string kWithPassword = "postgresql://u:hunter2@/x?host=/nonexistent";

class PlansCliPostgres : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    if (store_test::postgres_conninfo().empty()) {
      if (std::getenv("CI"))
        FAIL() << "KILN_TEST_POSTGRES is not set: CI runs these against scripts/postgres.sh's server";
      GTEST_SKIP() << "no PostgreSQL server: set KILN_TEST_POSTGRES (scripts/postgres.sh start DIR; ... env DIR)";
    }
    store_ = location("plans");
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->put(make_record(i)).is_ok());
    PlanRecord heuristic = make_record(7);
    heuristic.tuned = false;
    heuristic.numerics.verdict = Disposition::kNotVerified;
    ASSERT_TRUE((*s)->put(heuristic).is_ok());
  }
  void TearDown() override {
    for (const std::string& w : made_)
      store_test::postgres_sql(w, "DROP SCHEMA " + store_test::postgres_schema(w) + " CASCADE");
  }

  // A fresh schema's location (made now, empty), named by `name` within this test's folder.
  std::string location(const std::string& name) {
    const std::string where = dir_.file(name);
    made_.push_back(where);
    EXPECT_GE(store_test::postgres_sql(where, ""), 0);
    return store_test::postgres_location(where);
  }
  // `kiln ARGS --store LOCATION`, the location one shell word.
  static CliResult kiln_on(const std::string& args, const std::string& location) {
    return run_kiln(args + " --store " + shell_quote(location));
  }
  // `plans ls --json` of a store, parsed (a test failure and null when it is not a JSON array).
  static nlohmann::json ls_json(const std::string& location) {
    CliResult r = kiln_on("plans ls --json", location);
    EXPECT_EQ(r.code, kExitOk) << r.output();
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_array()) << r.output();
    return j.is_array() ? j : nlohmann::json();
  }
  // The checksums of a listing, sorted: two stores holding the same records give the same list.
  static std::vector<std::string> checksums(const nlohmann::json& j) {
    std::vector<std::string> out;
    for (const auto& r : j) out.push_back(r.value("checksum", ""));
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir dir_;
  std::string store_;
  std::vector<std::string> made_;
};

TEST_F(PlansCliPostgres, LsShowAndJson) {
  CliResult r = kiln_on("plans ls", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("sig0_0123456"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("4 plans in"), std::string::npos) << r.output();
  EXPECT_EQ(r.output().find("no plan store"), std::string::npos) << r.output();

  nlohmann::json j = ls_json(store_);
  EXPECT_EQ(j.size(), 4u) << j.dump();
  r = kiln_on("plans ls --json --tuned", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json tuned = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(tuned.is_array()) << r.output();
  EXPECT_EQ(tuned.size(), 3u) << r.output();

  r = kiln_on("plans show sig1_", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("sig1_0123456"), std::string::npos) << r.output();
  r = kiln_on("plans show nosuchsig", store_);
  EXPECT_NE(r.code, kExitOk) << r.output();

  // $KILN_STORE names the store as --store does.
  test::CliOptions env;
  env.env.push_back({"KILN_STORE", store_});
  r = run_kiln("plans ls --json", env);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json from_env = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(from_env.is_array()) << r.output();
  EXPECT_EQ(from_env.size(), 4u) << r.output();

  r = kiln_on("plans queue", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  r = kiln_on("plans queue --json", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_array()) << r.output();
}

TEST_F(PlansCliPostgres, VerifyRmGc) {
  CliResult r = kiln_on("plans verify", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  r = kiln_on("plans verify --json", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json v = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(v.is_object()) << r.output();

  r = kiln_on("plans rm --structure sig0_", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(store_).size(), 3u);

  r = kiln_on("plans gc --older-than 0 --dry-run", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(store_).size(), 3u) << "a dry run removes nothing";
  r = kiln_on("plans gc", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(store_).size(), 3u) << "nothing corrupt, quarantined or old was asked for";
  r = kiln_on("plans gc --older-than 0", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(store_).size(), 0u) << r.output();

  // rm --all on a refilled store.
  {
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE((*s)->put(make_record(4)).is_ok());
  }
  EXPECT_EQ(ls_json(store_).size(), 1u);
  r = kiln_on("plans rm --all", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(store_).size(), 0u);
}

// PostgreSQL -> bundle -> SQLite file -> bundle -> a fresh PostgreSQL schema: the same records each way.
TEST_F(PlansCliPostgres, ExportImportRoundTripThroughSqlite) {
  const std::vector<std::string> original = checksums(ls_json(store_));
  ASSERT_EQ(original.size(), 4u);

  const std::string bundle = dir_.file("from_pg.kilnbundle");
  CliResult r = kiln_on("plans export " + bundle, store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("exported 4 plans"), std::string::npos) << r.output();
  r = kiln_on("plans export " + bundle, store_);  // an existing bundle only with --force
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  r = kiln_on("plans export " + bundle + " --force", store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();

  const std::string file = dir_.file("copy.db");
  r = kiln_on("plans import " + bundle, file);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("imported 4"), std::string::npos) << r.output();
  EXPECT_EQ(checksums(ls_json(file)), original);

  const std::string back = dir_.file("from_sqlite.kilnbundle");
  r = kiln_on("plans export " + back, file);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  const std::string fresh = location("fresh");
  r = kiln_on("plans import " + back, fresh);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("imported 4"), std::string::npos) << r.output();
  EXPECT_EQ(checksums(ls_json(fresh)), original);
  r = kiln_on("plans import " + back, fresh);  // again: nothing new
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("4 unchanged"), std::string::npos) << r.output();

  // Into the original store: its own records, unchanged.
  r = kiln_on("plans import " + back, store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("4 unchanged"), std::string::npos) << r.output();
  EXPECT_EQ(checksums(ls_json(store_)), original);
}

// A server that cannot be reached: every --store command exits 3 (kExitEnvironment, StatusCode::kUnavailable)
// with one line naming the location; nothing is written (no bundle file).
TEST_F(PlansCliPostgres, UnreachableServerIsExit3NamingTheLocation) {
  const std::string bundle = dir_.file("b.kilnbundle");
  ASSERT_EQ(kiln_on("plans export " + bundle, store_).code, kExitOk);
  const std::string not_written = dir_.file("not_written.kilnbundle");
  const std::vector<std::string> commands = {"plans ls",
                                             "plans ls --json",
                                             "plans show sig0_",
                                             "plans rm --all",
                                             "plans verify",
                                             "plans verify --json",
                                             "plans gc",
                                             "plans export " + not_written,
                                             "plans import " + bundle,
                                             "plans queue",
                                             "plans queue --clear"};
  for (const std::string& cmd : commands) {
    CliResult r = kiln_on(cmd, kUnreachable);
    EXPECT_EQ(r.code, kExitEnvironment) << cmd << ": " << r.output();
    // The first line says it all: what could not be reached, and where.
    const std::string first = r.err.substr(0, r.err.find('\n'));
    EXPECT_EQ(first.find("kiln: Unavailable: cannot reach PostgreSQL store " + kUnreachable), 0u)
        << cmd << ": " << r.output();
    EXPECT_EQ(r.out.find("no plan store"), std::string::npos) << cmd << ": " << r.output();
  }
  EXPECT_FALSE(std::filesystem::exists(not_written));

  // The commands that check --store before the GPU (run, tune) say the same.
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json";
  for (const std::string& cmd : {"run " + spec, "tune " + spec}) {
    CliResult r = kiln_on(cmd, kUnreachable);
    EXPECT_EQ(r.code, kExitEnvironment) << cmd << ": " << r.output();
    EXPECT_NE(r.err.find(kUnreachable), std::string::npos) << cmd << ": " << r.output();
  }
}

// The unreachable server's message is one line. Disabled: the store's Unavailable message carries libpq's
// error text whole, and libpq adds a second line to it ("\tIs the server running locally and accepting
// connections on that socket?"), which the CLI prints as a second line; store/pg_conn.cc's to mend (the CLI
// prints a Status as the store gives it).
TEST_F(PlansCliPostgres, UnreachableServerMessageIsOneLine) {
  CliResult r = kiln_on("plans ls", kUnreachable);
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// A password in the location is never printed: not in errors, not in --help's default.
TEST_F(PlansCliPostgres, PasswordIsNeverPrinted) {
  const std::string bundle = dir_.file("b.kilnbundle");
  ASSERT_EQ(kiln_on("plans export " + bundle, store_).code, kExitOk);
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json";
  const std::string profile = std::string(KILN_SOURCE_DIR) + "/profiles/h200.json";
  const std::vector<std::string> commands = {"plans ls",
                                             "plans ls --json",
                                             "plans show sig0_",
                                             "plans rm --all",
                                             "plans verify --json",
                                             "plans gc",
                                             "plans export " + dir_.file("x.kilnbundle"),
                                             "plans import " + bundle,
                                             "plans queue",
                                             "run " + spec,
                                             "tune " + spec,
                                             "compile " + spec + " --target " + profile};
  for (const std::string& cmd : commands) {
    CliResult r = kiln_on(cmd, kWithPassword);
    EXPECT_NE(r.code, kExitOk) << cmd << ": " << r.output();
    EXPECT_EQ(r.output().find("hunter2"), std::string::npos) << cmd << ": " << r.output();
    EXPECT_NE(r.output().find("postgresql://u:***@/x?host=/nonexistent"), std::string::npos)
        << cmd << ": " << r.output();
  }
  for (const char* cmd : {"plans ls", "plans --help", "plans ls --help"}) {
    test::CliOptions env;
    env.env.push_back({"KILN_STORE", kWithPassword});
    CliResult r = run_kiln(cmd, env);
    EXPECT_EQ(r.output().find("hunter2"), std::string::npos) << cmd << ": " << r.output();
  }
  // A libpq key=value password as well.
  CliResult r = kiln_on("plans ls", "host=/nonexistent dbname=x user=u password=hunter2");
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_EQ(r.output().find("hunter2"), std::string::npos) << r.output();
}

// A database that does not exist on a server that does: the server's refusal, naming the location.
TEST_F(PlansCliPostgres, NoSuchDatabase) {
  // The test server's connection string with another database (a later key=value wins in libpq).
  const std::string where = store_test::postgres_conninfo() + " dbname=no_such_db";
  for (const std::string& cmd : {std::string("plans ls"), std::string("plans verify"), std::string("plans rm --all"),
                                 "plans import " + dir_.file("absent.kilnbundle")}) {
    CliResult r = kiln_on(cmd, where);
    EXPECT_EQ(r.code, kExitEnvironment) << cmd << ": " << r.output();
    EXPECT_EQ(r.err.find("kiln: Unavailable: cannot reach PostgreSQL store " + where), 0u) << cmd << ": " << r.output();
    EXPECT_NE(r.err.find("database \"no_such_db\" does not exist"), std::string::npos) << cmd << ": " << r.output();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << cmd << ": one line: " << r.err;
    EXPECT_EQ(r.out.find("no plan store"), std::string::npos) << cmd << ": " << r.output();
  }
}

// An empty schema is no store until something writes one there: a reading command refuses it as it refuses an
// empty SQLite file (exit 2, "empty database"), and never says "no plan store at" a file; a writing command
// (kiln run, an import) makes it one.
TEST_F(PlansCliPostgres, EmptySchemaBecomesAStoreAtTheFirstWrite) {
  const std::string empty = location("empty");
  for (const std::string cmd : {"plans ls", "plans verify"}) {
    CliResult r = kiln_on(cmd, empty);
    EXPECT_EQ(r.code, kExitBadInput) << cmd << ": " << r.output();
    EXPECT_NE(r.output().find("not a Kiln plan store (empty database"), std::string::npos) << cmd << ": " << r.output();
  }
  // A command that writes (kiln run queues its misses) takes an empty schema as a store to make, as it takes a
  // missing file: its check before the GPU passes, and here, without a GPU, it stops at the GPU (exit 3).
  CliResult run = kiln_on("run " + std::string(KILN_SOURCE_DIR) + "/examples/small/rms_norm.json", empty);
  EXPECT_EQ(run.code, kExitEnvironment) << run.output();
  EXPECT_EQ(run.output().find("empty database"), std::string::npos) << run.output();
  const std::string bundle = dir_.file("b.kilnbundle");
  ASSERT_EQ(kiln_on("plans export " + bundle, store_).code, kExitOk);
  CliResult r = kiln_on("plans import " + bundle, empty);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(ls_json(empty).size(), 4u);
}

// A schema holding a table that is not Kiln's is refused as no Kiln plan store, and left as it was.
TEST_F(PlansCliPostgres, ForeignSchemaIsRefusedAndUntouched) {
  const std::string where = dir_.file("foreign");
  made_.push_back(where);
  ASSERT_GE(store_test::postgres_sql(where, "CREATE TABLE users(name text)"), 0);
  ASSERT_EQ(store_test::postgres_sql(where, "INSERT INTO users VALUES ('ada')"), 1);
  const std::string foreign = store_test::postgres_location(where);
  const std::string bundle = dir_.file("b.kilnbundle");
  ASSERT_EQ(kiln_on("plans export " + bundle, store_).code, kExitOk);
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json";
  for (const std::string& cmd : {std::string("plans ls"), std::string("plans ls --json"), std::string("plans verify"),
                                 std::string("plans rm --all"), std::string("plans gc"), "plans import " + bundle,
                                 "plans export " + dir_.file("x.kilnbundle"), "run " + spec, "tune " + spec}) {
    CliResult r = kiln_on(cmd, foreign);
    EXPECT_EQ(r.code, kExitBadInput) << cmd << ": " << r.output();
    EXPECT_NE(r.output().find("not a Kiln plan store"), std::string::npos) << cmd << ": " << r.output();
  }
  auto conn = store::PgConn::connect(foreign, "test server", false);
  ASSERT_TRUE(conn.is_ok()) << conn.status().to_string();
  StatusOr<std::vector<std::string>> tables = (*conn)->table_names();
  ASSERT_TRUE(tables.is_ok()) << tables.status().to_string();
  EXPECT_EQ(*tables, std::vector<std::string>{"users"});
  EXPECT_EQ(store_test::postgres_sql(where, "UPDATE users SET name = name WHERE name = 'ada'"), 1);
}

}  // namespace
}  // namespace kiln
