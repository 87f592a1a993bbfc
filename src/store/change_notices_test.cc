// Change notices (PlanStore::changed_plans): a process serving from a PostgreSQL store hears of every plan
// another process stores (NOTIFY at commit), not of its own, and not of a write that rolled back; SQLite says
// nothing. Run on both backends.
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
  if (!file_case()) {
    ASSERT_EQ(heard.size(), 1u);
    EXPECT_EQ(heard[0].structure_sig, r.structure_sig);
    EXPECT_EQ(heard[0].shape_key, r.shape_key);
    EXPECT_EQ(heard[0].fingerprint_key, fingerprint_key(h200()));
  } else {
    EXPECT_TRUE(heard.empty()) << "SQLite has no notices";
  }
  // A refused write (a NaN time is bad input) sends nothing.
  PlanRecord bad = make_record(5);
  bad.stats.median_ms = std::nan("");
  EXPECT_FALSE(tuner->put(bad).is_ok());
  auto after = server->changed_plans();
  ASSERT_TRUE(after.is_ok());
  EXPECT_TRUE(after->empty());
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
