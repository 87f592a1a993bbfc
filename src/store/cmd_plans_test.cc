// `kiln plans` as a user runs it: the built binary on a temporary store, checking exit codes and messages.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/device.h"
#include "kiln/exit_codes.h"
#include "kiln/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

using store_test::run_kiln;
using store_test::RunResult;

class PlansCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->put(make_record(i)).is_ok());
    PlanRecord heuristic = make_record(7);
    heuristic.tuned = false;
    heuristic.numerics.verdict = "NotVerified";
    ASSERT_TRUE((*s)->put(heuristic).is_ok());
  }
  TempDir dir_;
  std::string store_;
};

TEST_F(PlansCli, LsPrintsATable) {
  RunResult r = run_kiln("plans ls --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("STRUCTURE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sig0_0123456"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NVIDIA H200"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("9.19.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 plans in"), std::string::npos) << r.output;
}

TEST_F(PlansCli, LsJsonParses) {
  RunResult r = run_kiln("plans ls --json --tuned --store " + store_);
  ASSERT_EQ(r.exit_code, kExitOk) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.output;
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["fingerprint"]["gpu_name"], "NVIDIA H200");
  EXPECT_EQ(j[0]["knobs"], "SPLIT_K=0;TILE_SIZE=2");
}

TEST_F(PlansCli, ShowAndRm) {
  RunResult r = run_kiln("plans show sig1 --store " + store_);
  ASSERT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("\"checksum_ok\": true"), std::string::npos) << r.output;
  r = run_kiln("plans show nosuch --store " + store_);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  r = run_kiln("plans rm --store " + store_);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  r = run_kiln("plans rm --structure sig1 --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("removed 1 plan"), std::string::npos) << r.output;
}

TEST_F(PlansCli, VerifyReportsCorruptionWithExit4) {
  RunResult r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("4 ok, 0 corrupt"), std::string::npos) << r.output;

  store_test::flip_blob_byte(store_, make_record(2).structure_sig, 3);
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.exit_code, kExitCorruption) << r.output;
  EXPECT_NE(r.output.find("CORRUPT  sig2_0123456"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checksum mismatch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 4 plan records"), std::string::npos) << r.output;

  r = run_kiln("plans verify --quarantine --store " + store_);
  EXPECT_EQ(r.exit_code, kExitCorruption) << r.output;
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;

  // --deep runs the plans on this GPU: without one it says so (exit 3) rather than passing silently; with
  // one, these fake records have no graph and are reported as not deep-checked.
  r = run_kiln("plans verify --deep --store " + store_);
  StatusOr<int> gpus = device_count();
  if (gpus.is_ok() && *gpus > 0) {
    EXPECT_EQ(r.exit_code, kExitOk) << r.output;
    EXPECT_NE(r.output.find("not deep-checked"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.exit_code, kExitEnvironment) << r.output;
    EXPECT_NE(r.output.find("verify --deep runs each plan on this machine's GPU, and there is none"),
              std::string::npos) << r.output;
  }
}

TEST_F(PlansCli, ExportImportRoundTrip) {
  std::string bundle = dir_.file("plans.kilnbundle");
  RunResult r = run_kiln("plans export " + bundle + " --store " + store_);
  ASSERT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("exported 4 plans"), std::string::npos) << r.output;

  std::string other = dir_.file("other/plans.db");
  r = run_kiln("plans import " + bundle + " --store " + other);
  ASSERT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("imported 4"), std::string::npos) << r.output;
  r = run_kiln("plans import " + bundle + " --store " + other);
  EXPECT_NE(r.output.find("4 unchanged"), std::string::npos) << r.output;

  RunResult a = run_kiln("plans ls --json --store " + store_);
  RunResult b = run_kiln("plans ls --json --store " + other);
  nlohmann::json ja = nlohmann::json::parse(a.output, nullptr, false);
  nlohmann::json jb = nlohmann::json::parse(b.output, nullptr, false);
  ASSERT_TRUE(ja.is_array() && jb.is_array());
  ASSERT_EQ(ja.size(), jb.size());
  for (size_t i = 0; i < ja.size(); ++i) EXPECT_EQ(ja[i]["checksum"], jb[i]["checksum"]);

  // A damaged bundle is refused with exit 4 and the record's name.
  store_test::flip_blob_byte(bundle, make_record(1).structure_sig, 0);
  r = run_kiln("plans import " + bundle + " --store " + dir_.file("third.db"));
  EXPECT_EQ(r.exit_code, kExitCorruption) << r.output;
  EXPECT_NE(r.output.find("record sig1_0123456"), std::string::npos) << r.output;
}

TEST_F(PlansCli, DamagedStoreAndMissingFiles) {
  RunResult r = run_kiln("plans ls --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("no plan store at"), std::string::npos) << r.output;
  r = run_kiln("plans verify --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  r = run_kiln("plans import " + dir_.file("absent.kilnbundle") + " --store " + store_);
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;

  std::string junk = dir_.file("junk.db");
  {
    FILE* f = std::fopen(junk.c_str(), "wb");
    ASSERT_TRUE(f);
    for (int i = 0; i < 2000; ++i) std::fprintf(f, "junk %d ", i);
    std::fclose(f);
  }
  r = run_kiln("plans ls --store " + junk);
  EXPECT_EQ(r.exit_code, kExitCorruption) << r.output;
  EXPECT_NE(r.output.find("is not a SQLite database"), std::string::npos) << r.output;
}

TEST_F(PlansCli, GcClearsQuarantine) {
  store_test::flip_blob_byte(store_, make_record(0).structure_sig, 1);
  RunResult r = run_kiln("plans gc --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_NE(r.output.find("1 corrupt plan"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cleared 1 quarantined"), std::string::npos) << r.output;
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
}

}  // namespace
}  // namespace kiln
