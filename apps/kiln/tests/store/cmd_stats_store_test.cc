// `kiln stats --store` as a user runs it: a store's plans, job outcomes and winner changes, as text and JSON;
// refusals when nothing is given or the store is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/core/engine_config.h"
#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::make_record;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;

class StatsStoreCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    auto s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    first_ = make_record(1);
    first_.tuned_by = "worker1@a";
    first_.created_at = 1764900000;
    ASSERT_TRUE((*s)->put(first_).is_ok());
    ASSERT_TRUE((*s)->put(make_record(2)).is_ok());  // another key: no change
    PlanRecord faster = first_;
    faster.engine_id = 42;
    faster.stats.median_ms = 0.1;
    faster.tuned_by = "worker2@b";
    faster.created_at = 1764900060;
    ASSERT_TRUE((*s)->put(faster).is_ok());
    ASSERT_TRUE((*s)->put_graph_spec(first_.structure_sig, first_.shape_key, "mlp_up", "{}").is_ok());
  }
  TempDir dir_;
  std::string store_;
  PlanRecord first_;
};

TEST_F(StatsStoreCli, TextSaysThePlansAndEachWinnerChange) {
  CliResult r = run_kiln("stats --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("2 plans (2 tuned) in 1 environment; job log: empty"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("winner changes: 1, over 1 key"), std::string::npos) << r.output();
  const std::string from = plan_identity(first_.engine_id, first_.knobs), to = plan_identity(42, first_.knobs);
  EXPECT_NE(r.output().find(from + " -> " + to), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("mlp_up"), std::string::npos) << r.output();  // the graph's name, from its kept spec
  EXPECT_NE(r.output().find("worker1@a -> worker2@b"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("2025-12-05 02:01:00"), std::string::npos) << r.output();  // 1764900060, UTC
}

TEST_F(StatsStoreCli, JsonCarriesTheChangesWithBothSides) {
  CliResult r = run_kiln("stats --json --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const auto& s = j["store"];
  EXPECT_EQ(s["plans"], 2);
  EXPECT_EQ(s["winner_changes"], 1);
  EXPECT_EQ(s["keys_changed"], 1);
  ASSERT_EQ(s["changes"].size(), 1u);
  const auto& c = s["changes"][0];
  EXPECT_EQ(c["graph"], "mlp_up");
  EXPECT_EQ(c["to"], plan_identity(42, first_.knobs));
  EXPECT_DOUBLE_EQ(c["to_median_ms"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(c["from_median_ms"].get<double>(), first_.stats.median_ms);
  EXPECT_EQ(c["changed_at"], 1764900060);
}

TEST_F(StatsStoreCli, NothingToSummarizeOrAnAbsentStoreIsRefusedNamingIt) {
  CliResult r = run_kiln("stats");
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("needs a recorded-shapes file, --store, or both"), std::string::npos) << r.output();
  r = run_kiln("stats --store ''");
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("--store is empty"), std::string::npos) << r.output();
  r = run_kiln("stats --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("no plan store at " + dir_.file("absent.db")), std::string::npos) << r.output();
}

}  // namespace
}  // namespace kiln
