// The store's first-use verdicts (kiln/store/first_use_record.h): what is kept per key, configuration and
// environment, that a failed verdict is never replaced, and what a damaged row or an older store does.
#include <gtest/gtest.h>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::open_store;
using store_test::raw_sql;
using store_test::TempDir;

FirstUseRecord verdict(bool passed, const std::string& config = "eng1_k24=35") {
  FirstUseRecord r;
  r.structure_sig = "0123456789abcdef0123456789abcdef";
  r.shape_key = "batch=8";
  r.config = config;
  r.fingerprint_key = fingerprint_key(h200());
  r.passed = passed;
  r.summary = passed ? "y: Passed max_abs=0" : "y: Incorrect max_abs=3.1e+02";
  return r;
}

StatusOr<std::optional<FirstUseRecord>> get(PlanStore& s, const FirstUseRecord& r) {
  return s.get_first_use_verdict(r.structure_sig, r.shape_key, r.config, r.fingerprint_key);
}

// Whether the verdict kept for `r`'s key passed; a test failure (not an empty optional read) when none is kept.
bool kept_passed(PlanStore& s, const FirstUseRecord& r) {
  auto got = get(s, r);
  EXPECT_TRUE(got.is_ok() && got->has_value()) << "no verdict kept for " << r.config;
  return got.is_ok() && got->has_value() && (*got)->passed;
}

class FirstUseVerdictsContract : public store_test::StoreContract {};

TEST_P(FirstUseVerdictsContract, KeptPerKeyConfigurationAndEnvironment) {
  TempDir d;
  auto s = open_store(d.file("s.db"));
  ASSERT_TRUE(s);
  auto put = s->put_first_use_verdict(verdict(true));
  ASSERT_TRUE(put.is_ok()) << put.status().to_string();
  EXPECT_GT(put->created_at, 0);
  EXPECT_FALSE(put->checksum.empty());
  auto got = get(*s, verdict(true));
  ASSERT_TRUE(got.is_ok() && got->has_value());
  EXPECT_TRUE((*got)->passed);
  EXPECT_EQ((*got)->summary, "y: Passed max_abs=0");
  // Another configuration, another environment, another shape: nothing kept for them.
  EXPECT_FALSE(get(*s, verdict(true, "eng7"))->has_value());
  FirstUseRecord other = verdict(true);
  other.fingerprint_key = "ffffffffffffffff";
  EXPECT_FALSE(get(*s, other)->has_value());
  other = verdict(true);
  other.shape_key = "batch=16";
  EXPECT_FALSE(get(*s, other)->has_value());
  EXPECT_EQ(s->list_first_use_verdicts()->size(), 1u);
}

// "A failed configuration is never served again in that environment": a pass stored later (another
// Planner's check, a flaky device) does not replace a failure; a failure replaces a pass.
TEST_P(FirstUseVerdictsContract, AFailedVerdictIsNeverReplaced) {
  TempDir d;
  auto s = open_store(d.file("s.db"));
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->put_first_use_verdict(verdict(false)).is_ok());
  auto again = s->put_first_use_verdict(verdict(true));
  ASSERT_TRUE(again.is_ok());
  EXPECT_FALSE(again->passed) << "put did not return the failure that stands";
  EXPECT_FALSE(kept_passed(*s, verdict(true)));

  ASSERT_TRUE(s->put_first_use_verdict(verdict(true, "eng7")).is_ok());
  ASSERT_TRUE(s->put_first_use_verdict(verdict(false, "eng7")).is_ok());
  EXPECT_FALSE(kept_passed(*s, verdict(true, "eng7")));
}

TEST_P(FirstUseVerdictsContract, BadInputIsRefusedNamingTheField) {
  TempDir d;
  auto s = open_store(d.file("s.db"));
  ASSERT_TRUE(s);
  FirstUseRecord r = verdict(true);
  r.config.clear();
  EXPECT_EQ(s->put_first_use_verdict(r).status().code(), StatusCode::kInvalidArgument);
  r = verdict(true);
  r.structure_sig.clear();
  EXPECT_NE(s->put_first_use_verdict(r).status().message().find("empty structure signature"), std::string::npos);
  r = verdict(true);
  r.fingerprint_key.clear();
  EXPECT_NE(s->put_first_use_verdict(r).status().message().find("empty fingerprint key"), std::string::npos);
}

// A damaged row is never trusted (a failure edited into a pass would serve a wrong plan): dropped, counted
// corrupt, reported absent, so the plan is checked again.
TEST_P(FirstUseVerdictsContract, ADamagedRowIsDroppedNotTrusted) {
  TempDir d;
  const std::string db = d.file("s.db");
  {
    auto s = open_store(db);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->put_first_use_verdict(verdict(false)).is_ok());
    ASSERT_TRUE(s->put_first_use_verdict(verdict(false, "eng7")).is_ok());
  }
  ASSERT_EQ(raw_sql(db, "UPDATE first_use_verdicts SET passed = 1 WHERE config = 'eng1_k24=35'"), 1);
  ASSERT_EQ(raw_sql(db, "UPDATE first_use_verdicts SET passed = 7 WHERE config = 'eng7'"), 1);
  {
    auto ro = open_store(db, /*read_only=*/true);
    ASSERT_TRUE(ro);
    EXPECT_FALSE(get(*ro, verdict(true))->has_value());
    EXPECT_EQ(ro->counters().corrupt, 1);
    EXPECT_TRUE(ro->list_first_use_verdicts()->empty());  // both skipped
    EXPECT_EQ(ro->put_first_use_verdict(verdict(true, "eng9")).status().code(), StatusCode::kFailedPrecondition);
  }
  auto s = open_store(db);
  ASSERT_TRUE(s);
  EXPECT_FALSE(get(*s, verdict(true))->has_value());
  EXPECT_FALSE(get(*s, verdict(true, "eng7"))->has_value());
  EXPECT_EQ(s->counters().corrupt, 2);
  EXPECT_EQ(raw_sql(db, "DELETE FROM first_use_verdicts"), 0) << "the damaged rows were not dropped";
}

// A store made before the table existed, opened read-only, has no verdicts (and no error); opened
// writable, it gets the table.
TEST_P(FirstUseVerdictsContract, AStoreWithoutTheTable) {
  TempDir d;
  const std::string db = d.file("s.db");
  { ASSERT_TRUE(open_store(db)); }
  raw_sql(db, "DROP TABLE first_use_verdicts");
  {
    auto ro = open_store(db, /*read_only=*/true);
    ASSERT_TRUE(ro);
    auto got = get(*ro, verdict(true));
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_FALSE(got->has_value());
    EXPECT_TRUE(ro->list_first_use_verdicts()->empty());
  }
  auto s = open_store(db);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->put_first_use_verdict(verdict(true)).is_ok());
}

// SQLite's names are case-insensitive: a table written in capitals is Kiln's table, not damage. An index in
// its place is damage, said in English.
TEST_P(FirstUseVerdictsContract, TheSchemaCheckReadsNamesAsSqliteDoes) {
  KILN_STORE_FILE_CASE();
  TempDir d;
  const std::string db = d.file("s.db");
  { ASSERT_TRUE(open_store(db)); }
  raw_sql(db,
          "DROP TABLE first_use_verdicts; CREATE TABLE FIRST_USE_VERDICTS(STRUCTURE_SIG TEXT NOT NULL, SHAPE_KEY TEXT "
          "NOT NULL, CONFIG TEXT NOT NULL, FINGERPRINT_KEY TEXT NOT NULL, PASSED INTEGER NOT NULL, SUMMARY TEXT NOT "
          "NULL, CREATED_AT INTEGER NOT NULL, CHECKSUM TEXT NOT NULL, PRIMARY KEY (STRUCTURE_SIG, SHAPE_KEY, CONFIG, "
          "FINGERPRINT_KEY))");
  {
    auto s = open_store(db);
    ASSERT_TRUE(s);
    auto put = s->put_first_use_verdict(verdict(true));
    ASSERT_TRUE(put.is_ok()) << put.status().to_string();
    auto got = get(*s, verdict(true));
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_TRUE(got->has_value()) << "a verdict in a table written in capitals was read as absent";
    EXPECT_TRUE((*got)->passed);
  }
  raw_sql(db, "DROP TABLE FIRST_USE_VERDICTS; CREATE TABLE t(a); CREATE INDEX first_use_verdicts ON t(a)");
  auto bad = open_impl(db);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'first_use_verdicts' is an index, not a table"), std::string::npos)
      << bad.status().message();
}

KILN_STORE_CONTRACT_SUITE(FirstUseVerdictsContract);

}  // namespace
}  // namespace kiln
