// `kiln plans queue`, `plans retune` and `plans verify/import --deep` as a user runs them: output, exit codes
// and messages (the GPU side of retune and --deep is covered by src/runtime/retune_gpu_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using test::run_kiln;
using test::CliResult;
using store_test::TempDir;

const char* kSpec =
    R"({"name":"tiny","tensors":{"x":{"dims":[2,4]}},"nodes":[{"name":"r","op":"relu","inputs":["x"],"outputs":["y"]}],"outputs":["y"]})";

class PlansQueueCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE((*s)->put(make_record(0)).is_ok());
    RetuneRequest r;
    r.structure_sig = "sig0_0123456789abcdef0123456789abcdef";
    r.shape_key = "batch=8";
    r.fingerprint = h200();
    r.fingerprint.cudnn_version = 92000;
    r.graph_name = "conv_small";
    r.spec_json = kSpec;
    r.reason = "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)";
    ASSERT_TRUE((*s)->enqueue_retune(r).is_ok());
    ASSERT_TRUE((*s)->enqueue_retune(r).is_ok());
    r.structure_sig = "sig1_0123456789abcdef0123456789abcdef";
    r.shape_key = "";
    r.graph_name = "matmul_small";
    r.reason = "store miss";
    ASSERT_TRUE((*s)->enqueue_retune(r).is_ok());
  }
  TempDir dir_;
  std::string store_;
};

TEST_F(PlansQueueCli, QueuePrintsATable) {
  CliResult r = run_kiln("plans queue --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("STRUCTURE"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("REQUESTS"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("sig0_0123456"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("conv_small"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("9.20.0"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)"),
            std::string::npos)
      << r.output();
  EXPECT_NE(r.output().find("store miss"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("2 queued re-tunes in " + store_), std::string::npos) << r.output();
}

TEST_F(PlansQueueCli, QueueJsonCarriesCountsReasonsAndTheSpec) {
  CliResult r = run_kiln("plans queue --json --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json j = nlohmann::json::parse(r.output(), nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.output();
  ASSERT_EQ(j.size(), 2u);
  const nlohmann::json& conv = j[0]["graph_name"] == "conv_small" ? j[0] : j[1];
  EXPECT_EQ(conv["request_count"], 2);
  EXPECT_EQ(conv["shape_key"], "batch=8");
  EXPECT_EQ(conv["fingerprint"]["cudnn_version"], 92000);
  ASSERT_TRUE(conv["reasons"].is_array());
  EXPECT_EQ(conv["reasons"].size(), 1u);
  EXPECT_EQ(conv["spec"]["nodes"][0]["op"], "relu");
  EXPECT_LE(conv["first_seen"].get<int64_t>(), conv["last_seen"].get<int64_t>());
}

TEST_F(PlansQueueCli, QueueOfAMissingStoreAndClear) {
  CliResult r = run_kiln("plans queue --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("no plan store at"), std::string::npos) << r.output();
  r = run_kiln("plans queue --json --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_EQ(r.output(), "[]\n");
  EXPECT_FALSE(std::filesystem::exists(dir_.file("absent.db")));

  r = run_kiln("plans queue --clear --structure sig1 --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("removed 1 queued re-tune"), std::string::npos) << r.output();
  r = run_kiln("plans queue --store " + store_);
  EXPECT_NE(r.output().find("1 queued re-tune in"), std::string::npos) << r.output();
  EXPECT_EQ(r.output().find("matmul_small"), std::string::npos) << r.output();
}

TEST_F(PlansQueueCli, RetuneNeedsAGpu) {
  CliResult r = run_kiln("plans retune --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("no plan store at"), std::string::npos) << r.output();
  r = run_kiln("plans retune --budget -5 --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  // The host tier hides the GPU from kiln, so this holds on any machine (with one, retune is covered by
  // runtime.gpu.Retune*).
  r = run_kiln("plans retune --budget 10 --candidate-budget-ms 50 --store " + store_);
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_NE(r.output().find("plans retune tunes each queued graph on this machine's GPU, and there is none"),
            std::string::npos)
      << r.output();
  // Nothing was taken off the queue.
  r = run_kiln("plans queue --store " + store_);
  EXPECT_NE(r.output().find("2 queued re-tunes"), std::string::npos) << r.output();
}

TEST_F(PlansQueueCli, DeepVerifyAndImportNeedAGpuAndCheckTheirSpecs) {
  // --spec without --deep, and a spec that does not exist, are usage errors whatever the machine.
  CliResult r = run_kiln("plans verify --spec " + std::string(KILN_SOURCE_DIR) +
                         "/examples/small/rms_norm.json --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("--spec gives the graphs for --deep; add --deep"), std::string::npos) << r.output();
  r = run_kiln("plans verify --deep --spec " + dir_.file("nosuch.json") + " --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("nosuch.json: cannot open spec file"), std::string::npos) << r.output();

  // The host tier hides the GPU from kiln, so this holds on any machine (with one, --deep is covered by
  // runtime.gpu.Retune*).
  r = run_kiln("plans verify --deep --spec " + std::string(KILN_SOURCE_DIR) + "/examples/small/rms_norm.json --store " +
               store_);
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_NE(r.output().find("verify --deep runs each plan on this machine's GPU, and there is none"), std::string::npos)
      << r.output();
  std::string bundle = dir_.file("b.kilnbundle");
  r = run_kiln("plans export " + bundle + " --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  r = run_kiln("plans import --deep " + bundle + " --store " + dir_.file("other.db"));
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_NE(r.output().find("import --deep runs each plan on this machine's GPU, and there is none"), std::string::npos)
      << r.output();
}

}  // namespace
}  // namespace kiln
