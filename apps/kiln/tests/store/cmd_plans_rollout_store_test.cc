// `kiln plans history / candidates / promote / reject / rollback` as a user runs them on a store with plans in every
// state: what each prints, what each changes, and the refusals (a key not named precisely, a missing --config, a
// transition the states do not allow).
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

class PlansRolloutCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    auto s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    a_ = make_record(1);
    ASSERT_TRUE((*s)->put(a_).is_ok());
    b_ = a_;
    b_.engine_id = 42;
    b_.created_at += 10;
    ASSERT_TRUE((*s)->put(b_).is_ok());  // a retired
    c_ = a_;
    c_.engine_id = 43;
    ASSERT_TRUE((*s)->put_candidate(c_, "tuned on host x").is_ok());
    ASSERT_TRUE((*s)->put(make_record(2)).is_ok());  // another structure
  }
  std::string key_args() const { return " --store " + store_ + " --structure " + a_.structure_sig.substr(0, 10); }
  static std::string config(const PlanRecord& r) { return plan_identity(r.engine_id, r.knobs); }
  std::string active() const {
    auto s = PlanStore::open(store_);
    auto r = (*s)->read(a_.structure_sig, a_.shape_key, a_.fingerprint_key());
    return r.is_ok() ? config(*r) : "";
  }
  TempDir dir_;
  std::string store_;
  PlanRecord a_, b_, c_;
};

TEST_F(PlansRolloutCli, CandidatesListsEveryPlanBesideTheActiveOnes) {
  CliResult r = run_kiln("plans candidates --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find(config(a_)), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("retired"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find(config(c_)), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("candidate"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("tuned on host x"), std::string::npos) << r.output();
  CliResult j = run_kiln("plans candidates --json --store " + store_);
  ASSERT_EQ(j.code, kExitOk) << j.output();
  auto arr = nlohmann::json::parse(j.out);
  ASSERT_EQ(arr.size(), 2u);
  EXPECT_EQ(arr[0]["state"], "candidate");  // newest first
  EXPECT_EQ(arr[1]["state"], "retired");
}

TEST_F(PlansRolloutCli, HistoryShowsEachTransitionInOrder) {
  CliResult r = run_kiln("plans history --json" + key_args());
  ASSERT_EQ(r.code, kExitOk) << r.output();
  auto h = nlohmann::json::parse(r.out)["history"];
  ASSERT_EQ(h.size(), 4u) << r.out;
  EXPECT_EQ(h[0]["to"], "active");
  EXPECT_EQ(h[1]["config"], config(a_));
  EXPECT_EQ(h[1]["to"], "retired");
  EXPECT_EQ(h[2]["config"], config(b_));
  EXPECT_EQ(h[3]["to"], "candidate");
  CliResult text = run_kiln("plans history" + key_args());
  ASSERT_EQ(text.code, kExitOk) << text.output();
  EXPECT_NE(text.output().find("tuned on host x"), std::string::npos) << text.output();
}

TEST_F(PlansRolloutCli, PromoteRejectAndRollback) {
  CliResult p = run_kiln("plans promote --config " + config(c_) + " --reason 'deep verify passed'" + key_args());
  ASSERT_EQ(p.code, kExitOk) << p.output();
  EXPECT_EQ(active(), config(c_));
  CliResult again = run_kiln("plans reject --config " + config(c_) + key_args());  // active: not by reject
  EXPECT_EQ(again.code, kExitStalePlan) << again.output();
  EXPECT_NE(again.output().find("is active"), std::string::npos) << again.output();
  CliResult back = run_kiln("plans rollback --reason 'p99 regressed'" + key_args());
  ASSERT_EQ(back.code, kExitOk) << back.output();
  EXPECT_NE(back.output().find("rolled back to " + config(b_)), std::string::npos) << back.output();
  EXPECT_EQ(active(), config(b_));
  CliResult h = run_kiln("plans history --json" + key_args());
  auto hist = nlohmann::json::parse(h.out)["history"];
  EXPECT_EQ(hist.back()["reason"], "rollback: p99 regressed");
  CliResult rej = run_kiln("plans reject --config " + config(a_) + key_args());  // retired: not rejectable
  EXPECT_EQ(rej.code, kExitStalePlan) << rej.output();
}

TEST_F(PlansRolloutCli, RefusalsNameWhatIsWrong) {
  CliResult no_config = run_kiln("plans promote" + key_args());
  EXPECT_EQ(no_config.code, kExitBadInput) << no_config.output();
  CliResult unknown = run_kiln("plans promote --config eng999" + key_args());
  EXPECT_EQ(unknown.code, kExitBadInput) << unknown.output();
  EXPECT_NE(unknown.output().find("eng999"), std::string::npos) << unknown.output();
  CliResult none = run_kiln("plans history --store " + store_ + " --structure ffffffff");
  EXPECT_EQ(none.code, kExitBadInput) << none.output();
  EXPECT_NE(none.output().find("no plan in"), std::string::npos) << none.output();
  CliResult several = run_kiln("plans history --store " + store_ + " --structure sig");  // both structures
  EXPECT_EQ(several.code, kExitBadInput) << several.output();
  EXPECT_NE(several.output().find("matches 2 keys"), std::string::npos) << several.output();
  CliResult missing = run_kiln("plans rollback --store " + dir_.file("none.db") + " --structure abc");
  EXPECT_EQ(missing.code, kExitBadInput) << missing.output();
}

TEST_F(PlansRolloutCli, VerifyChecksThePlansInOtherStatesAndRmRemovesThemWithTheirKey) {
  CliResult ok = run_kiln("plans verify --store " + store_);
  ASSERT_EQ(ok.code, kExitOk) << ok.output();
  EXPECT_NE(ok.out.find("2 plans in other states: 2 ok, 0 corrupt"), std::string::npos) << ok.out;
  ASSERT_EQ(store_test::raw_sql(store_, "UPDATE plan_rollout SET median_ms = 7.5 WHERE engine_id = 43"), 1);
  CliResult bad = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(bad.code, kExitCorruption) << bad.output();
  EXPECT_NE(bad.out.find("CORRUPT  "), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("plan " + config(c_) + " (candidate): "), std::string::npos) << bad.out;
  EXPECT_NE(bad.err.find("1 of 2 plans in other states"), std::string::npos) << bad.err;
  CliResult j = run_kiln("plans verify --json --store " + store_);
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.output();
  EXPECT_EQ(doc["other_states"]["checked"], 2);
  EXPECT_EQ(doc["other_states"]["problems"].size(), 1u);
  CliResult rm = run_kiln("plans rm" + key_args());
  ASSERT_EQ(rm.code, kExitOk) << rm.output();
  CliResult after = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(after.code, kExitOk) << after.output();
  // The removed key's history stays, read by its whole signature (a prefix names keys that hold plans).
  CliResult h = run_kiln("plans history --json --store " + store_ + " --structure " + a_.structure_sig + " --shape '" +
                         a_.shape_key + "'");
  ASSERT_EQ(h.code, kExitOk) << h.output();
  nlohmann::json hist = nlohmann::json::parse(h.out, nullptr, false);
  ASSERT_TRUE(hist.is_object()) << h.output();
  EXPECT_EQ(hist["history"].size(), 4u) << h.out;  // a, b (a retired), c a candidate
  CliResult prefix = run_kiln("plans history --store " + store_ + " --structure " + a_.structure_sig.substr(0, 10));
  EXPECT_EQ(prefix.code, kExitBadInput) << prefix.output();
  EXPECT_NE(prefix.err.find("whole structure signature"), std::string::npos) << prefix.err;
  CliResult left = run_kiln("plans candidates --json --store " + store_);
  nlohmann::json rows = nlohmann::json::parse(left.out, nullptr, false);
  EXPECT_TRUE(rows.is_array() && rows.empty()) << left.output();
}

TEST_F(PlansRolloutCli, RmTakesTheFingerprintPrefixLsShows) {
  CliResult rm = run_kiln("plans rm --store " + store_ + " --fingerprint " + a_.fingerprint_key().substr(0, 12));
  ASSERT_EQ(rm.code, kExitOk) << rm.output();
  EXPECT_NE(rm.out.find("removed 4 plans"), std::string::npos) << rm.out;  // two active, one retired, one candidate
  CliResult ls = run_kiln("plans ls --json --store " + store_);
  nlohmann::json rows = nlohmann::json::parse(ls.out, nullptr, false);
  EXPECT_TRUE(rows.is_array() && rows.empty()) << ls.output();
}

}  // namespace
}  // namespace kiln
