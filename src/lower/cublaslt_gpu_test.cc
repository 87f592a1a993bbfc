// Device tier: cuBLASLt's candidates (HeuristicMode::kCublasLt, src/lower/cublaslt_plan.h) through LoweredGraph, as the
// tuner and the Planner use them: every configuration cuBLASLt offers for bf16, fp16 (batched, a broadcast operand),
// fp32, FP8 (the recipe's TN layout) and the bias and ReLU epilogues is built, run on seeded random inputs and checked
// against the host reference; a plan's bytes load back and run the same; bytes of another cuBLASLt, garbage after the
// magic, and a record naming another configuration are refused with the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"
#include "lower/cublaslt_plan.h"
#include "lower/cublaslt_test_cases.h"

namespace kiln {
namespace {

using lower_detail::testing::Case;
using lower_detail::testing::cases;

// Runs `lg`'s plan on `inputs` and checks it against `ref`; "" when it passed, else why not.
std::string run_and_check(const Graph& g, const LoweredGraph& lg, cudnnHandle_t h,
                          const std::map<int, HostTensor>& inputs, const ReferenceOutputs& ref) {
  auto buffers = allocate_graph_buffers(g, inputs, lg.workspace_size());
  if (!buffers.is_ok()) return buffers.status().to_string();
  Status run = lg.execute(h, buffers->pointers(), buffers->workspace.data());
  if (!run.is_ok()) return run.to_string();
  if (cudaDeviceSynchronize() != cudaSuccess) return "the device failed after the run";
  auto outs = download_outputs(g, *buffers);
  if (!outs.is_ok()) return outs.status().to_string();
  auto check = check_outputs(g, *outs, ref);
  if (!check.is_ok()) return check.status().to_string();
  return check->verdict == Disposition::kPassed ? "" : check->summary();
}

TEST(CublasLtGpu, EveryOfferedConfigurationMatchesTheReference) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok()) << handle.status().to_string();
  std::printf("cuBLASLt %lld\n", static_cast<long long>(lower_detail::cublaslt_version()));
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    LowerTarget target;
    target.handle = handle->get();
    auto lg = LoweredGraph::create(c.g, target);
    ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
    auto cands = lg->list_candidates({HeuristicMode::kCublasLt});
    ASSERT_TRUE(cands.is_ok()) << cands.status().to_string();
    ASSERT_FALSE(cands->empty()) << "cuBLASLt offers no configuration";
    auto inputs = make_random_inputs(c.g, 7);
    ASSERT_TRUE(inputs.is_ok());
    auto ref = run_host_reference_with_magnitudes(c.g, *inputs);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    int passed = 0;
    for (const CandidateInfo& ci : *cands) {
      EXPECT_TRUE(is_cublaslt_engine(ci.config.engine_id)) << ci.config.identity();
      EXPECT_EQ(ci.modes, std::vector<std::string>{"CUBLASLT"});
      auto one = LoweredGraph::create(c.g, target);
      ASSERT_TRUE(one.is_ok());
      Status built = one->build_config(ci.config);
      ASSERT_TRUE(built.is_ok()) << ci.config.identity() << ": " << built.to_string();
      EXPECT_EQ(one->config(), ci.config);
      const std::string why = run_and_check(c.g, *one, handle->get(), *inputs, *ref);
      EXPECT_EQ(why, "") << ci.config.identity();
      if (why.empty()) ++passed;
    }
    std::printf("%s: %zu cuBLASLt configurations, %d passed; first %s\n", c.what, cands->size(), passed,
                cands->front().config.identity().c_str());
  }
}

TEST(CublasLtGpu, APlansBytesLoadBackAndForeignBytesAreRefused) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  const Case c = cases().back();  // FP8, the recipe's TN layout
  LowerTarget target;
  target.handle = handle->get();
  auto lg = LoweredGraph::create(c.g, target);
  ASSERT_TRUE(lg.is_ok());
  auto cands = lg->list_candidates({HeuristicMode::kCublasLt});
  ASSERT_TRUE(cands.is_ok() && !cands->empty());
  ASSERT_TRUE(lg->build_config(cands->front().config).is_ok());
  auto bytes = lg->serialize();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  auto back = LoweredGraph::deserialize(c.g, handle->get(), *bytes, cands->front().config);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->config(), cands->front().config);
  EXPECT_EQ(back->workspace_size(), lg->workspace_size());
  auto inputs = make_random_inputs(c.g, 11);
  ASSERT_TRUE(inputs.is_ok());
  auto ref = run_host_reference_with_magnitudes(c.g, *inputs);
  ASSERT_TRUE(ref.is_ok());
  EXPECT_EQ(run_and_check(c.g, *back, handle->get(), *inputs, *ref), "");

  // Another cuBLASLt's bytes: its algorithms are its own. (The version field edited in the parsed JSON.)
  const std::string magic = "KILNBLT1\n";
  nlohmann::json j = nlohmann::json::parse(std::string(bytes->begin() + magic.size(), bytes->end()));
  j["cublaslt_version"] = 1;
  const std::string other = magic + j.dump();
  auto stale = LoweredGraph::deserialize(c.g, handle->get(), std::vector<uint8_t>(other.begin(), other.end()));
  ASSERT_FALSE(stale.is_ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(stale.status().message().find("re-tune"), std::string::npos) << stale.status().message();
  // Garbage after the magic, and a record that names another configuration.
  const std::string garbage = "KILNBLT1\n{\"algo\": 7";
  auto bad = LoweredGraph::deserialize(c.g, handle->get(), std::vector<uint8_t>(garbage.begin(), garbage.end()));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EngineConfig another = cands->front().config;
  another.knobs["splitk"] += 1;
  auto mismatch = LoweredGraph::deserialize(c.g, handle->get(), *bytes, another);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kCorruption);
  EXPECT_NE(mismatch.status().message().find(another.identity()), std::string::npos);
}

}  // namespace
}  // namespace kiln
