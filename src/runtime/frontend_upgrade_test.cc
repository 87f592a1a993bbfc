// The cuDNN Frontend 1.23.0 -> 1.32.0 move, as a store sees it (docs/store.md "Upgrades"). The fixture
// tests/fixtures/store-frontend-1.23.0.db was written by the last 1.23.0 build of Kiln (`kiln compile
// examples/*.json --target profiles/h200.json`, deviceless, plus graph specs) before the pin moved; this
// build reads it. Every step of the upgrade path runs here without a GPU; the GPU tier runs the same
// store through `kiln run` under each mismatch policy and `kiln plans retune`
// (frontend_upgrade_gpu_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kiln/core/exit_codes.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/spec/spec.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using test::run_kiln;
using test::CliResult;
using store_test::TempDir;

const std::string kRoot = KILN_SOURCE_DIR;
const std::string kFixture = kRoot + "/tests/fixtures/store-frontend-1.23.0.db";
constexpr int64_t kOldFrontend = 12300;

// CUDNN_FRONTEND_VERSION of this build (kiln doctor's), without including the frontend here.
int64_t this_build_frontend() { return collect_environment(0).fingerprint.cudnn_frontend_version; }

class FrontendUpgrade : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kFixture)) << kFixture;
    ASSERT_GE(this_build_frontend(), 13200) << "this test is about a build past frontend 1.23";
    store_ = dir_.file("plans.db");
    std::filesystem::copy_file(kFixture, store_);
    auto p = load_device_profile(kRoot + "/profiles/h200.json");
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    profile_ = *p;
    current_ = fingerprint_for_profile(profile_);
  }
  std::vector<PlanSummary> list() {
    auto s = PlanStore::open(store_);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    auto l = (*s)->list();
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    return *l;
  }
  TempDir dir_;
  std::string store_;
  DeviceProfile profile_;
  EnvFingerprint current_;
};

TEST_F(FrontendUpgrade, FixtureHoldsOnlyFrontend123Records) {
  std::vector<PlanSummary> plans = list();
  ASSERT_GE(plans.size(), 2u);
  for (const PlanSummary& p : plans) {
    EXPECT_EQ(p.record.fingerprint.cudnn_frontend_version, kOldFrontend);
    EXPECT_EQ(p.record.fingerprint.gpu_name, "NVIDIA H200");
  }
}

TEST_F(FrontendUpgrade, LsMarksEveryOldRecordStaleAndNamesTheFrontend) {
  // Without a GPU (CI): judged on this build's libraries; with --target: on the profile too.
  for (const std::string& extra : {std::string(), " --target " + kRoot + "/profiles/h200.json"}) {
    CliResult r = run_kiln("plans ls --store " + store_ + extra);
    ASSERT_EQ(r.code, kExitOk) << r.output();
    size_t n = list().size();
    size_t stale_lines = 0;
    for (size_t at = r.output().find("\nstale "); at != std::string::npos; at = r.output().find("\nstale ", at + 1)) {
      size_t end = r.output().find('\n', at + 1);
      std::string line = r.output().substr(at + 1, end - at - 1);
      EXPECT_NE(line.find("cudnn_frontend_version: recorded 1.23.0, current 1.32.0 (must match)"), std::string::npos)
          << line;
      ++stale_lines;
    }
    EXPECT_EQ(stale_lines, n) << r.output();
    EXPECT_NE(r.output().find(std::to_string(n) + " stale"), std::string::npos) << r.output();
    EXPECT_NE(r.output().find("STALE"), std::string::npos) << r.output();
  }
  CliResult j = run_kiln("plans ls --json --store " + store_);
  ASSERT_EQ(j.code, kExitOk) << j.output();
  nlohmann::json arr = nlohmann::json::parse(j.output(), nullptr, false);
  ASSERT_TRUE(arr.is_array()) << j.output();
  for (const auto& rec : arr) {
    EXPECT_EQ(rec["status"], "stale") << rec.dump();
    ASSERT_FALSE(rec["stale_reasons"].empty());
    EXPECT_EQ(rec["stale_reasons"][0].get<std::string>().rfind("cudnn_frontend_version:", 0), 0u) << rec.dump();
  }
}

TEST_F(FrontendUpgrade, NoPolicyGetsTheOldBytes) {
  auto s = PlanStore::open(store_);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  for (const PlanSummary& p : list()) {
    for (MismatchPolicy mp : {MismatchPolicy::kRetune, MismatchPolicy::kHeuristicsAndQueue, MismatchPolicy::kFail}) {
      EnvPolicy policy;
      policy.on_mismatch = mp;
      auto look = (*s)->get(p.record.structure_sig, p.record.shape_key, current_, policy);
      if (mp == MismatchPolicy::kFail) {
        ASSERT_FALSE(look.is_ok()) << mismatch_policy_name(mp);
        EXPECT_EQ(look.status().code(), StatusCode::kFailedPrecondition);
        EXPECT_NE(look.status().message().find("cudnn_frontend_version"), std::string::npos) << look.status().message();
        continue;
      }
      ASSERT_TRUE(look.is_ok()) << look.status().to_string();
      EXPECT_EQ(look->outcome, LookupOutcome::kStale) << mismatch_policy_name(mp);
      EXPECT_FALSE(look->runnable());
      ASSERT_TRUE(look->record.has_value());
      EXPECT_TRUE(look->record->plan_bytes.empty()) << "a stale record's bytes were handed out";
      EXPECT_EQ(look->action, mp);
    }
  }
}

// Defence in depth: were a 1.23 blob to reach this build's deserializer anyway (a hand-edited record, a
// relaxed policy), it is refused with a message naming the serialized form, never run and never a crash.
TEST_F(FrontendUpgrade, AnOldBlobIsRefusedByTheDeserializerNamingItsForm) {
  auto s = PlanStore::open(store_);
  ASSERT_TRUE(s.is_ok());
  size_t checked = 0;
  for (const PlanSummary& p : list()) {
    auto rec = (*s)->read(p.record.structure_sig, p.record.shape_key, p.record.fingerprint_key());
    ASSERT_TRUE(rec.is_ok()) << rec.status().to_string();
    auto spec = (*s)->get_graph_spec(p.record.structure_sig, p.record.shape_key);
    ASSERT_TRUE(spec.is_ok() && spec->has_value()) << "fixture lacks the graph spec of " << p.record.structure_sig;
    auto g = parse_spec_string((*spec)->spec_json, "stored spec");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    std::vector<uint8_t> bytes(rec->plan_bytes.begin(), rec->plan_bytes.end());
    auto lg = LoweredGraph::deserialize(*g, profile_, bytes);
    ASSERT_FALSE(lg.is_ok());
    EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported) << lg.status().to_string();
    EXPECT_NE(lg.status().message().find("serialized form '1.0'"), std::string::npos) << lg.status().message();
    ++checked;
  }
  EXPECT_GE(checked, 2u);
}

// The re-bake without a GPU: `kiln compile --target` writes current records beside the stale ones (which
// stay until collected: a rollback of the frontend would find them current again), they load in this
// build without a handle, and `kiln plans gc --stale --target` leaves only current records.
TEST_F(FrontendUpgrade, CompileBakesAgainAndGcLeavesOnlyCurrentRecords) {
  // Which engines cuDNN offers a deviceless build depends on the CUDA driver (with one, runtime-compiled
  // engines, which need a device to load): this case is about a machine without it.
  if (test::cuda_driver_installed()) GTEST_SKIP() << "a CUDA driver is installed (the host tier hides the GPU)";
  std::set<std::pair<std::string, std::string>> old_keys;
  for (const PlanSummary& p : list()) old_keys.insert({p.record.structure_sig, p.record.shape_key});
  const std::string target = " --target " + kRoot + "/profiles/h200.json";
  CliResult c = run_kiln("compile " + kRoot + "/examples/conv_bias_relu.json " + kRoot +
                         "/examples/small/conv_bias_relu.json --store " + store_ + target);
  ASSERT_EQ(c.code, kExitOk) << c.output();
  size_t fresh = 0;
  auto s = PlanStore::open(store_);
  ASSERT_TRUE(s.is_ok());
  for (const PlanSummary& p : list()) {
    if (p.record.fingerprint.cudnn_frontend_version == kOldFrontend) continue;
    EXPECT_EQ(p.record.fingerprint.cudnn_frontend_version, this_build_frontend());
    EXPECT_TRUE(old_keys.count({p.record.structure_sig, p.record.shape_key})) << "signatures moved with the frontend";
    auto look = (*s)->get(p.record.structure_sig, p.record.shape_key, current_);
    ASSERT_TRUE(look.is_ok() && look->runnable()) << p.record.structure_sig;
    auto spec = (*s)->get_graph_spec(p.record.structure_sig, p.record.shape_key);
    ASSERT_TRUE(spec.is_ok() && spec->has_value());
    auto g = parse_spec_string((*spec)->spec_json, "stored spec");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    std::vector<uint8_t> bytes(look->record->plan_bytes.begin(), look->record->plan_bytes.end());
    auto lg = LoweredGraph::deserialize(*g, profile_, bytes);  // 1.32's handle-less path
    EXPECT_TRUE(lg.is_ok()) << lg.status().to_string();
    ++fresh;
  }
  EXPECT_EQ(fresh, 2u);
  CliResult ls = run_kiln("plans ls --store " + store_ + target);
  // The old records stay until collected, and still say why they are stale.
  EXPECT_NE(ls.output().find(", " + std::to_string(old_keys.size()) + " stale"), std::string::npos) << ls.output();
  CliResult gc = run_kiln("plans gc --stale --store " + store_ + target);
  ASSERT_EQ(gc.code, kExitOk) << gc.output();
  EXPECT_NE(gc.output().find("removed " + std::to_string(old_keys.size()) + " stale"), std::string::npos)
      << gc.output();
  std::vector<PlanSummary> after = list();
  EXPECT_EQ(after.size(), fresh);
  for (const PlanSummary& p : after) EXPECT_NE(p.record.fingerprint.cudnn_frontend_version, kOldFrontend);
  CliResult ls2 = run_kiln("plans ls --store " + store_ + target);
  EXPECT_NE(ls2.output().find(", 0 stale"), std::string::npos) << ls2.output();
}

TEST_F(FrontendUpgrade, GcStaleWithoutAGpuOrTargetSaysWhatItNeeds) {
  // The host tier hides the GPU from kiln (tests/cli_test_util.h), so this holds on any machine.
  size_t before = list().size();
  CliResult gc = run_kiln("plans gc --stale --store " + store_);
  EXPECT_EQ(gc.code, kExitEnvironment) << gc.output();
  EXPECT_NE(gc.output().find("--target"), std::string::npos) << gc.output();
  EXPECT_EQ(list().size(), before) << "a refused gc removed records";
}

}  // namespace
}  // namespace kiln
