// Host tier: lowering and deviceless (ahead-of-time) plan compilation against the recorded H200 profile.
// A real cuDNN plan is built and serialized here on every CI run, without a GPU.
#include <gtest/gtest.h>

#include <chrono>

#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

TEST(DeviceProfile, LoadsTheRecordedH200) {
  auto p = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->gpu_name, "NVIDIA H200");
  EXPECT_EQ(p->sm_version, 90);
  EXPECT_EQ(p->sm_count, 132);
  EXPECT_FALSE(p->cudnn_device_properties.empty());
}

TEST(DeviceProfile, MissingAndBadFilesAreNamed) {
  auto missing = load_device_profile(kRoot + "/profiles/no_such.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no_such.json"), std::string::npos);
  auto bad = load_device_profile(kRoot + "/examples/small/conv_bias_relu.json");  // JSON, but not a profile
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gpu_name"), std::string::npos) << bad.status().message();
}

TEST(Deserialize, GarbageAndEmptyBytesAreCorruptionNotACrash) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok());
  for (const std::vector<uint8_t>& bytes :
       {std::vector<uint8_t>{}, std::vector<uint8_t>{'{', 'x', 0xff, 3}, std::vector<uint8_t>(64, 0x5b)}) {
    auto lg = LoweredGraph::deserialize(*g, *profile, bytes);
    ASSERT_FALSE(lg.is_ok());
    EXPECT_EQ(lg.status().code(), StatusCode::kCorruption) << lg.status().to_string();
    EXPECT_NE(lg.status().message().find("conv_bias_relu"), std::string::npos) << lg.status().message();
  }
}

// cuDNN's engines still report deprecated knob types (6, LDGA, for convolutions) that cuDNN Frontend's
// KnobType_t cannot name: get_engine_and_knobs_at_index() drops them and create_execution_plan() cannot
// set them. Kiln lists every configuration from the engine tags and builds such a one from cuDNN's list.
TEST(DeprecatedKnobs, ConfigurationsWithThemAreListedAndBuildExactly) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  LowerTarget target;
  target.profile = &*profile;
  auto lg = LoweredGraph::create(*g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  auto cands = lg->list_candidates({HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback});
  ASSERT_TRUE(cands.is_ok()) << cands.status().to_string();
  std::vector<EngineConfig> deprecated;
  for (const CandidateInfo& c : *cands)
    if (c.config.knobs.count("k6")) deprecated.push_back(c.config);
  ASSERT_FALSE(deprecated.empty()) << "no configuration with knob type 6 offered: the case this test pins is gone";
  for (const EngineConfig& c : deprecated) {
    Status st = lg->build_config(c);
    ASSERT_TRUE(st.is_ok()) << c.identity() << ": " << st.to_string();
    EXPECT_EQ(lg->config(), c);
    auto bytes = lg->serialize();
    ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  }
  std::printf("[ deprecated knobs ] %zu of %zu configurations carry knob type 6; each built exactly\n",
              deprecated.size(), cands->size());
}

TEST(Lowering, NeedsAHandleOrAProfile) {
  auto g = parse_spec_file(kRoot + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto lg = LoweredGraph::create(*g, LowerTarget{});
  ASSERT_FALSE(lg.is_ok());
  EXPECT_NE(lg.status().message().find("profile"), std::string::npos);
}

// The abs mode (added through docs/contributing.md "Adding an op or a pointwise mode") lowers to the
// frontend's ABS: the frontend validates the graph and builds its operation graph for the H200. A plan
// for it is the GPU tier's (the runtime fusion engines that run a matmul with an ABS epilogue compile
// on the device; deviceless, cuDNN offers no engine for this pattern).
TEST(Lowering, AbsEpilogueLowersForTheH200) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  auto g = parse_spec_string(R"({"name": "mm_abs", "io_dtype": "fp16",
      "tensors": {"a": {"dims": [1, 64, 32]}, "b": {"dims": [1, 32, 48]}},
      "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["c"]},
                {"name": "abs", "op": "abs", "inputs": ["c"], "outputs": ["y"]}],
      "outputs": ["y"]})",
                             "mm_abs.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  LowerTarget target;
  target.profile = &*profile;
  auto lg = LoweredGraph::create(*g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  EXPECT_FALSE(lg->has_plan());
}

// Deviceless compilation of each example for the H200: a real cuDNN plan, serialized, no GPU.
class DevicelessCompile : public ::testing::TestWithParam<std::string> {};

TEST_P(DevicelessCompile, BuildsAndSerializesAPlanForTheH200) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  ValidateOptions vo;
  vo.target_sm_version = profile->sm_version;
  auto g = parse_spec_file(kRoot + "/examples/" + GetParam(), vo);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  LowerTarget target;
  target.profile = &*profile;
  auto t0 = std::chrono::steady_clock::now();
  auto lg = LoweredGraph::create(*g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  Status st = lg->build_heuristic();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  auto bytes = lg->serialize();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(bytes->size(), 100u);
  EXPECT_GE(lg->config().engine_id, 0);
  EXPECT_GE(lg->workspace_size(), 0);
  // The identity it reports must be one we can pin again.
  auto again = EngineConfig::parse(lg->config().identity());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, lg->config());
  // It loads again without a handle or a GPU (frontend 1.32, backend >= 9.8), as this device's plan.
  auto t1 = std::chrono::steady_clock::now();
  auto back = LoweredGraph::deserialize(*g, *profile, *bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_TRUE(back->has_plan());
  EXPECT_EQ(back->workspace_size(), lg->workspace_size());
  std::printf("[ deviceless ] handle-less load %.2f ms\n", load_ms);
  std::printf("[ deviceless ] %s: %s, %zu B plan, workspace %lld B, %.0f ms\n", GetParam().c_str(),
              lg->config().identity().c_str(), bytes->size(), static_cast<long long>(lg->workspace_size()), ms);
}

INSTANTIATE_TEST_SUITE_P(Examples, DevicelessCompile,
                         ::testing::Values("conv_bias_relu.json", "small/conv_bias_relu.json"), [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// A tune's build of a candidate of Kiln's own kernels (or cuBLASLt's) makes no cuDNN operation graph
// (LoweredGraph::create_alt; its plans are built and run on the GPU in kernel_plan_gpu_test). Here, without a device:
// a cuDNN engine is refused by name, and so are a target with neither handle nor profile and a deviceless build.
TEST(CreateAlt, RefusesCudnnEnginesAndDevicelessBuilds) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  auto g = parse_spec_string(R"({"name": "rms", "io_dtype": "bf16", "tensors": {"x": {"dims": [64, 1024, 1, 1]},
      "gamma": {"dims": [1, 1024, 1, 1]}}, "nodes": [{"name": "n", "op": "rms_norm", "inputs": ["x", "gamma"],
      "outputs": ["y"], "epsilon": 1e-5}], "outputs": ["y"]})",
                             "create_alt");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  LowerTarget target;
  target.profile = &*profile;
  auto cudnn = LoweredGraph::create_alt(*g, target, *EngineConfig::parse("eng4_k24=2"));
  ASSERT_FALSE(cudnn.is_ok());
  EXPECT_EQ(cudnn.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cudnn.status().message().find("eng4_k24=2 is cuDNN's engine"), std::string::npos)
      << cudnn.status().message();
  const auto knl = EngineConfig::parse("knl2_group=32_persist=0_threads=128");
  ASSERT_TRUE(knl.is_ok());
  auto none = LoweredGraph::create_alt(*g, LowerTarget{}, *knl);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  auto deviceless = LoweredGraph::create_alt(*g, target, *knl);
  ASSERT_FALSE(deviceless.is_ok());
  EXPECT_EQ(deviceless.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(deviceless.status().message().find("on the live device only"), std::string::npos)
      << deviceless.status().message();
}

}  // namespace
}  // namespace kiln
