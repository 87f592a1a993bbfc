// `kiln plans diff --from ENV --to ENV`: a store holding plans for an old and a new environment (a cuDNN upgrade),
// compared per key from the stored records: configuration changes, time ratios, keys not re-baked, and the
// environment fields that differ; refusals for a missing or unknown environment; --rerun's refusal without a GPU
// (the re-run itself: src/tools/plan_rerun_gpu_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/core/engine_config.h"
#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;

class PlansDiffCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    auto s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok());
    EnvFingerprint upgraded = h200();
    upgraded.cudnn_version += 100;  // 9.20 beside 9.19
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->put(make_record(i)).is_ok());
    PlanRecord same = make_record(1, upgraded);  // same configuration, 10% slower
    same.stats.median_ms *= 1.1;
    ASSERT_TRUE((*s)->put(same).is_ok());
    PlanRecord other = make_record(2, upgraded);  // another configuration, 20% faster
    other.engine_id = 77;
    other.stats.median_ms *= 0.8;
    ASSERT_TRUE((*s)->put(other).is_ok());
    from_ = make_record(1).fingerprint_key();
    to_ = same.fingerprint_key();
  }
  TempDir dir_;
  std::string store_, from_, to_;
};

TEST_F(PlansDiffCli, ComparesEachKeyAndSaysWhatIsNotReBaked) {
  CliResult r = run_kiln("plans diff --json --store " + store_ + " --from " + from_.substr(0, 8) + " --to " + to_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["compared"], 2);
  EXPECT_EQ(j["configuration_changes"], 1);
  EXPECT_EQ(j["not_rebaked"], 1);
  EXPECT_EQ(j["only_in_to"], 0);
  EXPECT_NEAR(j["geomean_time_ratio"].get<double>(), std::sqrt(1.1 * 0.8), 1e-9);
  ASSERT_EQ(j["environment_changes"].size(), 1u);
  EXPECT_NE(j["environment_changes"][0].get<std::string>().find("cudnn_version"), std::string::npos);
  int changed = 0;
  for (const auto& k : j["keys"])
    if (k.contains("configuration_changed") && k["configuration_changed"].get<bool>()) {
      ++changed;
      EXPECT_EQ(k["to_config"], plan_identity(77, make_record(2).knobs));
    }
  EXPECT_EQ(changed, 1);
  CliResult text = run_kiln("plans diff --store " + store_ + " --from " + from_ + " --to " + to_);
  ASSERT_EQ(text.code, kExitOk) << text.output();
  EXPECT_NE(text.output().find("not re-baked"), std::string::npos) << text.output();
  EXPECT_NE(text.output().find("cudnn_version"), std::string::npos) << text.output();
}

// --rerun builds both configurations on this machine's GPU: without one it is refused as an environment problem (exit
// 3) naming the GPU; with one, keys whose graph the store does not keep are reported as such, never run blind.
TEST_F(PlansDiffCli, RerunNeedsAGpuAndAGraphPerKey) {
  CliResult r =
      run_kiln("plans diff --rerun --json --store " + store_ + " --from " + from_ + " --to " + to_ + " --seed 3");
  if (r.code == kExitEnvironment) {
    EXPECT_NE(r.output().find("--rerun runs both plans of every key on this machine's GPU"), std::string::npos)
        << r.output();
    EXPECT_TRUE(r.out.empty()) << "nothing printed before the refusal: " << r.out;
    return;
  }
  ASSERT_EQ(r.code, kExitOk) << r.output();
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rerun"]["no_graph"], 2);
  EXPECT_EQ(j["rerun"]["rerun"], 0);
  for (const auto& k : j["keys"]) {
    if (k.contains("rerun")) {
      EXPECT_NE(k["rerun"]["why"].get<std::string>().find("no graph"), std::string::npos);
    }
  }
}

TEST_F(PlansDiffCli, RefusesMissingOrUnknownEnvironments) {
  CliResult none = run_kiln("plans diff --store " + store_ + " --from " + from_ + " --to abcdef12");
  EXPECT_EQ(none.code, kExitBadInput) << none.output();
  EXPECT_NE(none.output().find("--to abcdef12"), std::string::npos) << none.output();
  CliResult missing = run_kiln("plans diff --store " + store_ + " --from " + from_);
  EXPECT_EQ(missing.code, kExitBadInput) << missing.output();
  CliResult bad = run_kiln("plans diff --store " + store_ + " --from xyz --to " + to_);
  EXPECT_EQ(bad.code, kExitBadInput) << bad.output();
  // The re-run's options without --rerun (found by a hostile review: they were accepted and ignored).
  for (const std::string& extra : {std::string("--seed 5"), std::string("--spec /nonexistent.json")}) {
    CliResult r = run_kiln("plans diff --store " + store_ + " --from " + from_ + " --to " + to_ + " " + extra);
    EXPECT_EQ(r.code, kExitBadInput) << extra << ": " << r.output();
    EXPECT_NE(r.output().find("add --rerun"), std::string::npos) << r.output();
  }
}

}  // namespace
}  // namespace kiln
