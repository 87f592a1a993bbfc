// Device tier: Kiln's own kernels (src/lower/kernel_plan.h) through LoweredGraph: every launch configuration of the
// whole-tensor AMAX, for fp32, fp16 and bf16, sizes with a tail past the 16-byte vectors, and the 8192x8192 that
// cuDNN 9.19 cannot launch, against the host reference and with a planted maximum at the first, middle and last
// element; an output preset to 1e30 is overwritten, a NaN anywhere
// gives NaN (as torch.amax), and a plan's bytes load back and run the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

Graph amax_graph(const std::string& dtype, const std::string& dims) {
  const std::string spec = R"({"name": "amax_)" + dtype + R"(", "io_dtype": ")" + dtype +
                           R"(", "tensors": {"x": {"dims": )" + dims + R"(}, "amax": {"dims": [1, 1, 1],
                           "dtype": "fp32"}}, "nodes": [{"name": "r", "op": "reduce_amax", "inputs": ["x"],
                           "outputs": ["amax"], "axes": [0, 1, 2]}], "outputs": ["amax"]})";
  auto g = parse_spec_string(spec, "kernel_plan_gpu_test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

// Runs `lg` once on `buffers` after setting the AMAX output to `preset`; the AMAX it wrote.
float run_once(const Graph& g, const LoweredGraph& lg, cudnnHandle_t h, GraphBuffers& buffers, float preset) {
  void* out = buffers.tensors.at(g.find_tensor("amax")).data();
  EXPECT_EQ(cudaMemcpy(out, &preset, sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  Status run = lg.execute(h, buffers.pointers(), buffers.workspace.data());
  EXPECT_TRUE(run.is_ok()) << run.to_string();
  float got = 0;
  EXPECT_EQ(cudaMemcpy(&got, out, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return got;
}

TEST(KilnKernelGpu, EveryLaunchConfigurationMatchesTheReference) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  const std::pair<const char*, const char*> shapes[] = {
      {"bf16", "[1, 1000, 1003]"}, {"fp16", "[3, 7, 13]"}, {"fp32", "[1, 4096, 4099]"}, {"bf16", "[1, 8192, 8192]"}};
  for (const auto& [dtype, dims] : shapes) {
    SCOPED_TRACE(std::string(dtype) + " " + dims);
    Graph g = amax_graph(dtype, dims);
    LowerTarget target;
    target.handle = handle->get();
    auto lg = LoweredGraph::create(g, target);
    ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
    auto cands = lg->list_candidates({HeuristicMode::kKiln});
    ASSERT_TRUE(cands.is_ok()) << cands.status().to_string();
    ASSERT_EQ(cands->size(), 6u);
    auto inputs = make_random_inputs(g, 5);
    ASSERT_TRUE(inputs.is_ok());
    auto ref = run_host_reference_with_magnitudes(g, *inputs);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto buffers = allocate_graph_buffers(g, *inputs, 0);
    ASSERT_TRUE(buffers.is_ok());
    for (const CandidateInfo& c : *cands) {
      auto one = LoweredGraph::create(g, target);
      ASSERT_TRUE(one.is_ok());
      ASSERT_TRUE(one->build_config(c.config).is_ok()) << c.config.identity();
      EXPECT_EQ(c.modes, std::vector<std::string>{"KILN"});
      run_once(g, *one, handle->get(), *buffers, 1e30f);  // a stale, larger value is overwritten
      auto outs = download_outputs(g, *buffers);
      ASSERT_TRUE(outs.is_ok());
      auto check = check_outputs(g, *outs, *ref);
      ASSERT_TRUE(check.is_ok());
      EXPECT_EQ(check->verdict, Disposition::kPassed) << c.config.identity() << ": " << check->summary();
      // Every element is read: 512 (exact in each dtype, above every random input) planted at the first, the middle
      // and the last element in turn must be the AMAX exactly.
      const int x = g.find_tensor("x");
      const size_t elem = dtype_size(g.dtype_of(x));
      const int64_t count = g.tensors[static_cast<size_t>(x)].element_count();
      const uint32_t bits = elem == 4 ? 0x44000000u : std::string(dtype) == "fp16" ? 0x6000u : 0x4400u;
      for (int64_t pos : {int64_t{0}, count / 2, count - 1}) {
        char* at = static_cast<char*>(buffers->tensors.at(x).data()) + pos * static_cast<int64_t>(elem);
        uint32_t saved = 0;
        ASSERT_EQ(cudaMemcpy(&saved, at, elem, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(at, &bits, elem, cudaMemcpyHostToDevice), cudaSuccess);  // little-endian: the low bytes
        EXPECT_EQ(run_once(g, *one, handle->get(), *buffers, 0.0f), 512.0f) << c.config.identity() << " at " << pos;
        ASSERT_EQ(cudaMemcpy(at, &saved, elem, cudaMemcpyHostToDevice), cudaSuccess);
      }
    }
    std::printf("%s %s: %zu configurations checked\n", dtype, dims, cands->size());
  }
}

TEST(KilnKernelGpu, ANanGivesNanAndBytesLoadBack) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  Graph g = amax_graph("fp32", "[1, 33, 65]");
  LowerTarget target;
  target.handle = handle->get();
  auto lg = LoweredGraph::create(g, target);
  ASSERT_TRUE(lg.is_ok());
  ASSERT_TRUE(lg->build_config(*EngineConfig::parse("knl1_blocks=4_threads=256")).is_ok());
  auto inputs = make_random_inputs(g, 3);
  ASSERT_TRUE(inputs.is_ok());
  auto buffers = allocate_graph_buffers(g, *inputs, 0);
  ASSERT_TRUE(buffers.is_ok());
  const float plain = run_once(g, *lg, handle->get(), *buffers, 0.0f);
  EXPECT_GT(plain, 0.0f);
  auto bytes = lg->serialize();
  ASSERT_TRUE(bytes.is_ok());
  auto back = LoweredGraph::deserialize(g, handle->get(), *bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->config().identity(), "knl1_blocks=4_threads=256");
  EXPECT_EQ(run_once(g, *back, handle->get(), *buffers, -1.0f), plain);
  const float nan = std::nanf("");
  float* x = static_cast<float*>(buffers->tensors.at(g.find_tensor("x")).data());
  ASSERT_EQ(cudaMemcpy(x + 1000, &nan, sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_TRUE(std::isnan(run_once(g, *back, handle->get(), *buffers, 0.0f)));
  // An input not 16-byte aligned (a caller's slice) is read element by element: the AMAX of the 2144 elements
  // from the second on, against the host's.
  std::vector<float> host(33 * 65, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = std::sin(0.37f * static_cast<float>(i));
  host[0] = 100.0f;    // outside the slice: must not count
  host[2144] = 7.5f;   // the slice's last element: the largest
  host[1500] = -7.0f;  // in the body
  ASSERT_EQ(cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  // The element past the slice's end is the allocation's own padding or the next tensor: the slice is one short.
  float want = 0;
  for (size_t i = 1; i < host.size(); ++i) want = std::max(want, std::fabs(host[i]));
  Graph shorter = amax_graph("fp32", "[1, 1, 2144]");
  auto lg2 = LoweredGraph::create(shorter, target);
  ASSERT_TRUE(lg2.is_ok());
  ASSERT_TRUE(lg2->build_config(*EngineConfig::parse("knl1_blocks=2_threads=256")).is_ok());
  std::map<int, void*> shifted = {{shorter.find_tensor("x"), x + 1},  // 4 bytes past an aligned base
                                  {shorter.find_tensor("amax"), buffers->tensors.at(g.find_tensor("amax")).data()}};
  ASSERT_TRUE(lg2->execute(handle->get(), shifted, nullptr).is_ok());
  float got = 0;
  ASSERT_EQ(cudaMemcpy(&got, shifted.at(shorter.find_tensor("amax")), sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got, 7.5f);
}

}  // namespace
}  // namespace kiln
