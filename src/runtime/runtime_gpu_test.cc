// Device tier: execute each example on the GPU and verify it; run a plan compiled without a GPU; load a
// tuned plan back from a store in a fresh lookup and get identical outputs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "gpu_test_util.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/tune/tuner.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

std::vector<std::string> small_examples() {
  return {"conv_bias_relu", "conv_dgrad", "conv_wgrad", "matmul_bias_gelu",
          "matmul_amax",    "layer_norm", "rms_norm",   "sdpa_fwd"};
}

class RunExample : public ::testing::TestWithParam<std::string> {};

TEST_P(RunExample, HeuristicPlanRunsAndMatchesTheHostReference) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/" + GetParam() + ".json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  RunOptions o;
  o.verify = true;
  o.seed = 7;
  auto rep = run_graph(*g, o);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_TRUE(rep->check.has_value());
  std::printf("[ run ] %s: %s (%s reference)\n%s\n", GetParam().c_str(), rep->config.identity().c_str(),
              reference_kind_name(rep->checks.front().kind), rep->check->summary().c_str());
  EXPECT_EQ(rep->check->verdict, Disposition::kPassed) << rep->check->summary();
}

INSTANTIATE_TEST_SUITE_P(Small, RunExample, ::testing::ValuesIn(small_examples()));

// A plan built against the recorded profile, as on a CPU-only machine, deserializes and runs here.
TEST(Deviceless, CompiledPlanRunsOnTheDeviceWithCorrectOutput) {
  KILN_REQUIRE_GPU();
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  EnvReport env = collect_environment();
  if (env.fingerprint.sm_version != profile->sm_version)
    KILN_SKIP_WITHOUT_GPU("profiles/h200.json is for sm_" + std::to_string(profile->sm_version) + ", this GPU is sm_" +
                          std::to_string(env.fingerprint.sm_version));
  for (const std::string name : {"conv_bias_relu", "matmul_bias_gelu"}) {
    auto g = parse_spec_file(kRoot + "/examples/small/" + name + ".json");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    LowerTarget target;
    target.profile = &*profile;
    auto aot = LoweredGraph::create(*g, target);
    ASSERT_TRUE(aot.is_ok()) << aot.status().to_string();
    ASSERT_TRUE(aot->build_heuristic().is_ok());
    auto bytes = aot->serialize();
    ASSERT_TRUE(bytes.is_ok());

    auto handle = make_cudnn_handle();
    ASSERT_TRUE(handle.is_ok());
    auto lg = LoweredGraph::deserialize(*g, handle->get(), *bytes);
    ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
    auto inputs = make_random_inputs(*g, 11);
    ASSERT_TRUE(inputs.is_ok());
    auto buffers = allocate_graph_buffers(*g, *inputs, lg->workspace_size());
    ASSERT_TRUE(buffers.is_ok()) << buffers.status().to_string();
    ASSERT_TRUE(lg->execute(handle->get(), buffers->pointers(), buffers->workspace.data()).is_ok());
    auto outs = download_outputs(*g, *buffers);
    ASSERT_TRUE(outs.is_ok());
    auto ref = run_host_reference(*g, *inputs);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto check = check_outputs(*g, *outs, *ref);
    ASSERT_TRUE(check.is_ok());
    std::printf("[ deviceless ] %s %s: %s\n", name.c_str(), aot->config().identity().c_str(), check->summary().c_str());
    EXPECT_EQ(check->verdict, Disposition::kPassed) << check->summary();
  }
}

// Tune into a fresh store, then obtain the plan from the store alone (as a new process would) and run it:
// the outputs must be bit-identical to the tuned plan's.
TEST(Store, TunedPlanLoadsBackAndGivesIdenticalOutputs) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok());
  auto dir = std::filesystem::temp_directory_path() / ("kiln_gpu_store_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "plans.db").string();
  TuneOptions to;
  to.measure.stopping.time_budget_ms = 50;
  auto tr = tune_graph(*g, to);
  ASSERT_TRUE(tr.is_ok()) << tr.status().to_string();
  std::string dispositions;
  for (const auto& c : tr->candidates)
    dispositions += c.identity() + " " + disposition_name(c.disposition) + " " + c.message.substr(0, 80) + "\n";
  ASSERT_TRUE(tr->winner.has_value()) << dispositions;
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok());
  EnvFingerprint env = collect_environment().fingerprint;
  auto rec = record_from_tuning(*sig, env, *tr);
  ASSERT_TRUE(rec.is_ok()) << rec.status().to_string();
  {
    auto store = PlanStore::open(path);
    ASSERT_TRUE(store.is_ok());
    ASSERT_TRUE((*store)->put(*rec).is_ok());
  }
  RunOptions from_store;
  from_store.store_path = path;
  from_store.seed = 3;
  auto a = run_graph(*g, from_store);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->plan_source, PlanSource::kStore);
  EXPECT_EQ(a->config, tr->winner_config);
  RunOptions pinned;
  pinned.pin = tr->winner_config;
  pinned.seed = 3;
  auto b = run_graph(*g, pinned);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_EQ(a->outputs.size(), b->outputs.size());
  for (size_t i = 0; i < a->outputs.size(); ++i) EXPECT_EQ(a->outputs[i].encode(), b->outputs[i].encode());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
