// Change notices (PlanStore::changed_plans): a process serving from a store hears of every plan another process
// stores (PostgreSQL: NOTIFY at commit; SQLite: the plan_history rows written since), not of its own, and not of a
// write that rolled back; a rollback or a plan put in shadow elsewhere is heard too. Run on both backends.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

class ChangeNoticesContract : public store_test::StoreContract {};

// Polls `s` until it reports something or a second has passed (a notice crosses the server).
std::vector<StoredPlanKey> poll(PlanStore& s) {
  for (int i = 0; i < 50; ++i) {
    auto got = s.changed_plans();
    EXPECT_TRUE(got.is_ok()) << got.status().to_string();
    if (!got.is_ok() || !got->empty()) return got.is_ok() ? *got : std::vector<StoredPlanKey>();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

TEST_P(ChangeNoticesContract, AServingProcessHearsOfPlansOthersStore) {
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto server = open_store(where);  // a Planner's connection
  auto tuner = open_store(where);   // a worker on another host
  ASSERT_TRUE(server && tuner);
  auto first = server->changed_plans();  // starts listening
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_TRUE(first->empty());
  const PlanRecord r = make_record(3);
  ASSERT_TRUE(tuner->put(r).is_ok());
  ASSERT_TRUE(server->put(make_record(4)).is_ok());  // its own: not reported back to it
  std::vector<StoredPlanKey> heard = poll(*server);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].structure_sig, r.structure_sig);
  EXPECT_EQ(heard[0].shape_key, r.shape_key);
  EXPECT_EQ(heard[0].fingerprint_key, fingerprint_key(h200()));
  // A refused write (a NaN time is bad input) sends nothing.
  PlanRecord bad = make_record(5);
  bad.stats.median_ms = std::nan("");
  EXPECT_FALSE(tuner->put(bad).is_ok());
  auto after = server->changed_plans();
  ASSERT_TRUE(after.is_ok());
  EXPECT_TRUE(after->empty());
}

// Found by a CI run under load: NOTIFY is database-wide, so a store heard the writes of another store (another
// schema) in the same PostgreSQL database. A store now listens on a channel of its own schema.
TEST_P(ChangeNoticesContract, AnotherStoreInTheSameDatabaseIsNotHeard) {
  TempDir dir;
  auto server = open_store(dir.file("a.db"));
  auto other = open_store(dir.file("b.db"));  // PostgreSQL: another schema of the same database
  auto mate = open_store(dir.file("a.db"));
  ASSERT_TRUE(server && other && mate);
  auto first = server->changed_plans();  // starts listening
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_TRUE(other->put(make_record(3)).is_ok());
  const PlanRecord mine = make_record(4);
  ASSERT_TRUE(mate->put(mine).is_ok());
  std::vector<StoredPlanKey> heard = poll(*server);
  ASSERT_EQ(heard.size(), 1u);  // the write to its own store only
  EXPECT_EQ(heard[0].shape_key, mine.shape_key);
  auto after = server->changed_plans();
  ASSERT_TRUE(after.is_ok());
  EXPECT_TRUE(after->empty());
}

StoredPlanKey key_of(const PlanRecord& r) { return {r.structure_sig, r.shape_key, fingerprint_key(h200())}; }

TEST_P(ChangeNoticesContract, ARollbackOrAShadowPlanElsewhereIsHeard) {
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto server = open_store(where);
  auto ops = open_store(where);  // `kiln plans rollback` in another process
  ASSERT_TRUE(server && ops);
  const PlanRecord old_plan = make_record(3);
  PlanRecord new_plan = old_plan;
  new_plan.engine_id = old_plan.engine_id + 1;
  ASSERT_TRUE(ops->put(old_plan).is_ok());
  ASSERT_TRUE(ops->put(new_plan).is_ok());  // the old one retired
  ASSERT_TRUE(server->changed_plans().is_ok());
  auto back = ops->rollback(key_of(old_plan), "test: rolled back");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  std::vector<StoredPlanKey> heard = poll(*server);
  ASSERT_EQ(heard.size(), 1u) << "one key, however many rows its rollback wrote";
  EXPECT_EQ(heard[0].structure_sig, old_plan.structure_sig);
  EXPECT_TRUE(server->changed_plans()->empty()) << "each change is told once";

  PlanRecord candidate = old_plan;
  candidate.engine_id = old_plan.engine_id + 7;
  ASSERT_TRUE(ops->put_candidate(candidate, "test").is_ok());
  ASSERT_TRUE(ops->transition(key_of(candidate), plan_identity(candidate.engine_id, candidate.knobs),
                              PlanState::kShadow, "test")
                  .is_ok());
  heard = poll(*server);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].shape_key, candidate.shape_key);
}

// A Planner's read and write connections to one store: what its writer stores (a promotion) is no news to its
// reader (on PostgreSQL: the writer's server session is skipped; on SQLite: its history rows).
TEST_P(ChangeNoticesContract, AWriterTreatedAsOwnIsNoNews) {
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto reader = open_store(where);
  auto writer = open_store(where);
  auto other = open_store(where);
  ASSERT_TRUE(reader && writer && other);
  reader->treat_writes_as_own(*writer);
  ASSERT_TRUE(reader->changed_plans().is_ok());
  ASSERT_TRUE(writer->put(make_record(3)).is_ok());
  ASSERT_TRUE(other->put(make_record(4)).is_ok());
  ASSERT_TRUE(writer->put(make_record(5)).is_ok());
  std::vector<StoredPlanKey> heard = poll(*reader);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].structure_sig, make_record(4).structure_sig);
}

// Found by a hostile review: a write of ours that rolled back leaves its rowid to the next writer; that writer's row
// is news, though its rowid was once ours. Simulated: our row deleted, another key's row given its rowid.
TEST_P(ChangeNoticesContract, ARowidOnceOursThatAnotherWriterReusedIsHeard) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto reader = open_store(where);
  ASSERT_TRUE(reader && reader->changed_plans().is_ok());
  ASSERT_TRUE(reader->put(make_record(3)).is_ok());  // ours: one history row
  const PlanRecord theirs = make_record(4);
  ASSERT_GE(raw_sql(where, "UPDATE plan_history SET structure_sig = '" + theirs.structure_sig + "'"), 0);
  std::vector<StoredPlanKey> heard = poll(*reader);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].structure_sig, theirs.structure_sig);
}

// A damaged history (a row at the largest rowid makes SQLite pick later rowids at random, below the last one seen;
// rows deleted): the row count no longer adds up, and the store says notices may have been missed.
TEST_P(ChangeNoticesContract, ADamagedHistorySaysNoticesMayHaveBeenMissed) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto reader = open_store(where);
  auto other = open_store(where);
  ASSERT_TRUE(reader && other && reader->changed_plans().is_ok());
  ASSERT_GE(raw_sql(where, "INSERT INTO plan_history(rowid, structure_sig, shape_key, fingerprint_key, seq, config, "
                           "from_state, to_state, reason, evidence, by_whom, at) VALUES (9223372036854775807, 'x', "
                           "'', '', 1, 'eng1', '', 'active', 'damage', '', 'test', 0)"),
            0);
  (void)reader->changed_plans();                    // reads the damaged row itself
  ASSERT_TRUE(other->put(make_record(5)).is_ok());  // at a random rowid below the last one seen
  bool missed = false;
  for (int i = 0; i < 5 && !missed; ++i) {
    auto got = reader->changed_plans();
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    for (const StoredPlanKey& k : *got) missed = missed || k.structure_sig == "*";
  }
  EXPECT_TRUE(missed);
  ASSERT_GE(raw_sql(where, "DELETE FROM plan_history WHERE structure_sig = 'x'"), 0);
  auto after = reader->changed_plans();
  ASSERT_TRUE(after.is_ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].structure_sig, "*") << "a deleted row is told as missed notices too";
}

TEST_P(ChangeNoticesContract, NoticesSurviveAReconnection) {
  KILN_STORE_SERVER_CASE();
  TempDir dir;
  const std::string where = dir.file("p.db");
  auto server = open_store(where);
  auto tuner = open_store(where);
  ASSERT_TRUE(server->changed_plans().is_ok());
  // The server ends every connection of this test's schema but its own: the listener's connection too.
  ASSERT_GE(raw_sql(where, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND "
                           "datname = current_database() AND query LIKE 'LISTEN%'"),
            0);
  // The next calls meet the cut connection, make a new one, and say that notices may have been missed.
  bool told = false;
  for (int i = 0; i < 50 && !told; ++i) {
    auto got = server->changed_plans();
    for (const StoredPlanKey& k : got.is_ok() ? *got : std::vector<StoredPlanKey>())
      told = told || k.structure_sig == "*";
    if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(told) << "a listener that lost its connection says so";
  ASSERT_TRUE(tuner->put(make_record(6)).is_ok());
  std::vector<StoredPlanKey> heard = poll(*server);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].structure_sig, make_record(6).structure_sig);
}

KILN_STORE_CONTRACT_SUITE(ChangeNoticesContract);

}  // namespace
}  // namespace kiln
