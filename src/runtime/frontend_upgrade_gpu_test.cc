// Device tier of the cuDNN Frontend 1.23.0 -> 1.32.0 move (docs/store.md "Upgrades"): the store written
// by the 1.23.0 build (tests/fixtures/store-frontend-1.23.0.db, plans compiled for the H200) goes through
// `kiln run` under each mismatch policy, then `kiln plans retune` and `kiln tune --untuned`; afterwards
// `kiln plans gc --stale` leaves only current records, which run from the store.
#include <gtest/gtest.h>

#include <filesystem>

#include "gpu_test_util.h"
#include "kiln/core/exit_codes.h"
#include "kiln/lower/environment.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using test::run_kiln;
using test::CliResult;
using store_test::TempDir;

const std::string kRoot = KILN_SOURCE_DIR;
const std::string kFixture = kRoot + "/tests/fixtures/store-frontend-1.23.0.db";
const std::string kSpec = kRoot + "/examples/small/conv_bias_relu.json";  // compiled into the fixture

class FrontendUpgradeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    KILN_REQUIRE_GPU();
    EnvReport env = collect_environment(0);
    if (env.fingerprint.gpu_name != "NVIDIA H200") GTEST_SKIP() << "the fixture holds plans for the H200";
    store_ = dir_.file("plans.db");
    std::filesystem::copy_file(kFixture, store_);
  }
  TempDir dir_;
  std::string store_;
};

TEST_F(FrontendUpgradeCli, FailPolicyRefusesNamingTheFrontend) {
  CliResult r = run_kiln("run " + kSpec + " --store " + store_ + " --on-mismatch fail");
  EXPECT_EQ(r.code, kExitStalePlan) << r.output();
  EXPECT_NE(r.output().find("cudnn_frontend_version: recorded 1.23.0, current 1.32.0"), std::string::npos)
      << r.output();
}

TEST_F(FrontendUpgradeCli, DefaultPolicyRunsHeuristicsQueuesAndRetuneBakesAgain) {
  CliResult r = run_kiln("run " + kSpec + " --verify --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find(" from heuristics "), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("queued for re-tune"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("cudnn_frontend_version"), std::string::npos) << r.output();
  CliResult q = run_kiln("plans retune --candidate-budget-ms 20 --budget 120 --store " + store_);
  ASSERT_EQ(q.code, kExitOk) << q.output();
  EXPECT_NE(q.output().find("re-tuned 1 of 1"), std::string::npos) << q.output();
  CliResult again = run_kiln("run " + kSpec + " --verify --store " + store_ + " --on-mismatch fail");
  ASSERT_EQ(again.code, kExitOk) << again.output();
  EXPECT_NE(again.output().find(" from store "), std::string::npos) << again.output();
}

TEST_F(FrontendUpgradeCli, RetunePolicyTunesNowAndTuneUntunedBakesTheRest) {
  CliResult r = run_kiln("run " + kSpec + " --verify --store " + store_ + " --on-mismatch retune --retune-budget 60");
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("re-tuned now"), std::string::npos) << r.output();
  // Every other stale record is baked again from its spec: a stale record counts as not tuned.
  CliResult t =
      run_kiln("tune " + kRoot + "/examples/small/conv_bias_relu.json " + kRoot +
               "/examples/conv_bias_relu.json --untuned --no-unfused --candidate-budget-ms 20 --store " + store_);
  ASSERT_EQ(t.code, kExitOk) << t.output();
  EXPECT_NE(t.output().find("already tuned in the store, skipped"), std::string::npos) << t.output();  // the small one
  CliResult gc = run_kiln("plans gc --stale --store " + store_);
  ASSERT_EQ(gc.code, kExitOk) << gc.output();
  CliResult ls = run_kiln("plans ls --json --store " + store_);
  ASSERT_EQ(ls.code, kExitOk) << ls.output();
  EXPECT_EQ(ls.output().find("\"stale\""), std::string::npos) << ls.output();
  EXPECT_EQ(ls.output().find("12300"), std::string::npos) << "a 1.23 record survived gc --stale: " << ls.output();
  CliResult run =
      run_kiln("run " + kRoot + "/examples/conv_bias_relu.json --verify --store " + store_ + " --on-mismatch fail");
  ASSERT_EQ(run.code, kExitOk) << run.output();
}

}  // namespace
}  // namespace kiln
