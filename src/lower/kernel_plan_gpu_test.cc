// Device tier: Kiln's own kernels (src/lower/kernel_plan.h) through LoweredGraph: every launch configuration of the
// whole-tensor AMAX, for fp32, fp16 and bf16, sizes with a tail past the 16-byte vectors, and the 8192x8192 that
// cuDNN 9.19 cannot launch, against the host reference and with a planted maximum at the first, middle and last
// element; an output preset to 1e30 is overwritten, a NaN anywhere
// gives NaN (as torch.amax), and a plan's bytes load back and run the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "lower/decode_test_graph.h"
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

// Every one of Kiln's candidates for `g` built and run once on random inputs (every output preset to 0x7f bytes, so
// a stale value must be overwritten) and checked against the host reference, `also` checking each one's outputs
// further; then the last one's bytes, loaded back, must write the same bits, and input `sliced` one element past an
// aligned base (a caller's slice: the kernels' plain loop) must still pass. Adds the candidates checked to *count.
void check_every_candidate(const Graph& g, cudnnHandle_t h, uint64_t seed, const std::string& sliced, size_t* count,
                           const std::function<void(const std::vector<HostTensor>&, const std::string&)>& also = {}) {
  LowerTarget target;
  target.handle = h;
  auto lg = LoweredGraph::create(g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  auto cands = lg->list_candidates({HeuristicMode::kKiln});
  ASSERT_TRUE(cands.is_ok()) << cands.status().to_string();
  ASSERT_FALSE(cands->empty());
  auto inputs = make_random_inputs(g, seed);
  ASSERT_TRUE(inputs.is_ok());
  auto ref = run_host_reference_with_magnitudes(g, *inputs);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  int64_t workspace = 0;  // the largest any candidate needs (the paged decode's splits)
  for (const CandidateInfo& c : *cands) {
    auto one = LoweredGraph::create_alt(g, target, c.config);
    ASSERT_TRUE(one.is_ok()) << c.config.identity() << ": " << one.status().to_string();
    workspace = std::max(workspace, one->workspace_size());
  }
  auto buffers = allocate_graph_buffers(g, *inputs, workspace);
  ASSERT_TRUE(buffers.is_ok());
  auto run = [&](const LoweredGraph& plan, const std::map<int, void*>& ptrs, const std::string& what) {
    for (int out : g.outputs)
      ASSERT_EQ(cudaMemset(buffers->tensors.at(out).data(), 0x7f, buffers->tensors.at(out).size()), cudaSuccess);
    Status ran = plan.execute(h, ptrs, buffers->workspace.data());
    ASSERT_TRUE(ran.is_ok()) << what << ": " << ran.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
  };
  auto passed = [&](const std::string& what) -> std::vector<HostTensor> {
    auto outs = download_outputs(g, *buffers);
    EXPECT_TRUE(outs.is_ok());
    if (!outs.is_ok()) return {};
    auto check = check_outputs(g, *outs, *ref);
    EXPECT_TRUE(check.is_ok());
    if (check.is_ok()) {
      EXPECT_EQ(check->verdict, Disposition::kPassed) << what << ": " << check->summary();
    }
    return *outs;
  };
  std::vector<HostTensor> last;
  for (size_t i = 0; i < cands->size(); ++i) {
    const CandidateInfo& c = (*cands)[i];
    // Both ways a plan of Kiln's kernels is built, in turn: a tune's (create_alt: no cuDNN operation graph) and
    // create() then build_config() (kiln run --pin, a heuristic build's).
    StatusOr<LoweredGraph> one = LoweredGraph::create_alt(g, target, c.config);
    if (i % 2 == 1) {
      one = LoweredGraph::create(g, target);
      ASSERT_TRUE(one.is_ok());
      ASSERT_TRUE(one->build_config(c.config).is_ok()) << c.config.identity();
    }
    ASSERT_TRUE(one.is_ok()) << c.config.identity() << ": " << one.status().to_string();
    run(*one, buffers->pointers(), c.config.identity());
    last = passed(c.config.identity());
    if (also) also(last, c.config.identity());
    ++*count;
  }
  auto built = LoweredGraph::create(g, target);
  ASSERT_TRUE(built.is_ok());
  ASSERT_TRUE(built->build_config(cands->back().config).is_ok());
  auto bytes = built->serialize();
  ASSERT_TRUE(bytes.is_ok());
  auto back = LoweredGraph::deserialize(g, h, *bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->config().identity(), cands->back().config.identity());
  run(*back, buffers->pointers(), "loaded");
  auto again = download_outputs(g, *buffers);
  ASSERT_TRUE(again.is_ok());
  ASSERT_EQ(again->size(), last.size());
  for (size_t i = 0; i < last.size(); ++i)
    EXPECT_TRUE((*again)[i].storage == last[i].storage) << "a loaded plan wrote other bits in output " << i;
  const int x = g.find_tensor(sliced);
  const size_t elem = dtype_size(g.dtype_of(x)), x_bytes = buffers->tensors.at(x).size();
  auto room = DeviceBuffer::allocate(x_bytes + 16);
  ASSERT_TRUE(room.is_ok());
  char* shifted = room->as<char>() + elem;
  ASSERT_EQ(cudaMemcpy(shifted, buffers->tensors.at(x).data(), x_bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
  std::map<int, void*> ptrs = buffers->pointers();
  ptrs[x] = shifted;
  run(*back, ptrs, "unaligned " + sliced);
  passed("unaligned " + sliced);
  std::printf("%s: %zu configurations checked\n", g.name.c_str(), cands->size());
}

// A lone norm over x [rows, hidden, 1, 1]: op, io dtype, the parameters' and y's dtypes ("" for io).
Graph norm_graph(const std::string& op, int64_t rows, int64_t hidden, const std::string& io,
                 const std::string& param_dtype, const std::string& y_dtype) {
  const bool layer = op == "layer_norm";
  const std::string param = R"({"dims": [1, )" + std::to_string(hidden) + R"(, 1, 1])" +
                            (param_dtype.empty() ? "" : R"(, "dtype": ")" + param_dtype + "\"") + "}";
  const std::string spec =
      R"({"name": "norm", "io_dtype": ")" + io + R"(", "tensors": {"x": {"dims": [)" + std::to_string(rows) + ", " +
      std::to_string(hidden) + R"(, 1, 1]}, "gamma": )" + param + (layer ? R"(, "beta": )" + param : "") +
      (y_dtype.empty() ? ""
                       : R"(, "y": {"dims": [)" + std::to_string(rows) + ", " + std::to_string(hidden) +
                             R"(, 1, 1], "dtype": ")" + y_dtype + R"("})") +
      R"(}, "nodes": [{"name": "n", "op": ")" + op + R"(", "inputs": ["x", "gamma")" + (layer ? R"(, "beta")" : "") +
      R"(], "outputs": ["y"], "epsilon": 1e-5}], "outputs": ["y"]})";
  auto g = parse_spec_string(spec, "kernel_plan_gpu_test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

// Every configuration Kiln offers for layer and RMS norms in each dtype pairing, rows that fill a group's chunks
// unevenly, and a hidden size that is no whole number of chunks (the plain loop), against the host reference; a
// plan's bytes load back and write the same bits; x one element past an aligned base (a caller's slice) runs the
// plain loop and still matches.
TEST(KilnKernelGpu, EveryNormConfigurationMatchesTheReference) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  struct Shape {
    const char *op, *io, *param, *y;
    int64_t rows, hidden;
  } shapes[] = {{"rms_norm", "bf16", "", "", 301, 1024},        {"layer_norm", "bf16", "", "", 67, 8192},
                {"rms_norm", "fp16", "fp32", "fp32", 33, 4160}, {"layer_norm", "fp32", "", "", 19, 3072},
                {"layer_norm", "bf16", "fp32", "", 9, 24576},   {"rms_norm", "bf16", "", "", 7, 1001},
                {"layer_norm", "fp16", "", "fp32", 130, 64}};
  size_t total = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::string(s.op) + " " + s.io + " " + std::to_string(s.rows) + "x" + std::to_string(s.hidden));
    check_every_candidate(norm_graph(s.op, s.rows, s.hidden, s.io, s.param, s.y), handle->get(), 11, "x", &total);
  }
  EXPECT_GE(total, 30u);
}

// y = act(a b + bias): a [1, m, k], b [1, k, n], bias [1, 1, n] in `io`, y in `y_dtype` ("" for io); with `amax`
// also "amax" = max |y| (fp32 [1, 1, 1]); a and b in `ab` ("" for io), b column-major with `b_cols`.
Graph skinny_graph(int64_t m, int64_t k, int64_t n, const std::string& act, bool bias, const std::string& io,
                   const std::string& y_dtype, bool amax = false, const std::string& ab = "", bool b_cols = false) {
  auto dims = [](int64_t x, int64_t y) { return "[1, " + std::to_string(x) + ", " + std::to_string(y) + "]"; };
  const std::string ab_dtype = ab.empty() ? "" : R"(, "dtype": ")" + ab + "\"";
  const std::string b_strides =
      b_cols ? R"(, "strides": [)" + std::to_string(k * n) + ", 1, " + std::to_string(k) + "]" : std::string();
  std::string nodes = R"({"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["p"]})", last = "p";
  if (bias) {
    nodes += R"(, {"name": "add", "op": "bias_add", "inputs": ["p", "bias"], "outputs": ["q"]})";
    last = "q";
  }
  if (!act.empty()) {
    nodes += R"(, {"name": "act", "op": ")" + act + R"(", "inputs": [")" + last + R"("], "outputs": ["y"]})";
    last = "y";
  }
  const std::string spec =
      R"({"name": "skinny", "io_dtype": ")" + io + R"(", "tensors": {"a": {"dims": )" + dims(m, k) + ab_dtype +
      R"(}, "b": {"dims": )" + dims(k, n) + b_strides + ab_dtype + "}" +
      (bias ? R"(, "bias": {"dims": )" + dims(1, n) + "}" : "") +
      (y_dtype.empty() ? ""
                       : R"(, ")" + last + R"(": {"dims": )" + dims(m, n) + R"(, "dtype": ")" + y_dtype + R"("})") +
      (amax ? R"(, "amax": {"dims": [1, 1, 1], "dtype": "fp32"})" : "") + R"(}, "nodes": [)" + nodes +
      (amax ? R"(, {"name": "r", "op": "reduce_amax", "inputs": [")" + last + R"("], "outputs": ["amax"],
                   "axes": [0, 1, 2]})"
            : "") +
      R"(], "outputs": [")" + last + (amax ? R"(", "amax"]})" : R"("]})");
  auto g = parse_spec_string(spec, "kernel_plan_gpu_test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

// Every configuration of the skinny GEMM, each epilogue, 1 to 16 rows, fp16 and bf16 with b row- or column-major,
// fp8_e4m3 with b column-major (the FP8 recipe's GEMM+AMAX at 16 rows among them), fp32 outputs, K split over clusters
// of up to 8, against the host reference; a stale output is overwritten; bytes load back and write the same bits; a
// not 16-byte aligned a (a caller's slice) runs the plain loop and still matches.
TEST(KilnKernelGpu, EverySkinnyGemmConfigurationMatchesTheReference) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  struct Shape {
    int64_t m, k, n;
    const char *act, *io, *y;
    bool bias, amax;
    const char* ab = "";
    bool b_cols = false;
  } shapes[] = {{16, 8192, 512, "gelu_erf", "bf16", "", true, false},
                {7, 1024, 192, "gelu_tanh", "fp16", "", true, false},
                {1, 512, 256, "relu", "bf16", "fp32", true, false},
                {16, 2048, 1024, "", "fp16", "", false, false},
                {3, 64, 64, "gelu_erf", "bf16", "", true, false},
                {16, 4096, 1024, "", "bf16", "", false, true},
                {5, 512, 128, "gelu_erf", "bf16", "", true, true},
                {16, 4096, 1024, "", "bf16", "", false, true, "fp8_e4m3", true},  // the FP8 recipe's first segment
                {3, 256, 128, "relu", "bf16", "fp32", true, false, "fp8_e4m3", true},
                {16, 2048, 512, "gelu_tanh", "bf16", "", true, false, "", true},
                {9, 1024, 192, "", "fp16", "", false, true, "", true}};
  size_t total = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + " " + s.act + " " +
                 s.io + " " + s.ab + (s.b_cols ? " b column-major" : ""));
    // With an AMAX: exactly the largest |y| the plan wrote (y is the first output).
    auto amax_is_largest = [&](const std::vector<HostTensor>& outs, const std::string& what) {
      if (!s.amax || outs.size() != 2) return;
      double top = 0;
      for (double v : outs[0].storage) top = std::max(top, std::fabs(v));
      EXPECT_EQ(outs[1].storage.at(0), top) << what;
    };
    check_every_candidate(skinny_graph(s.m, s.k, s.n, s.act, s.bias, s.io, s.y, s.amax, s.ab, s.b_cols), handle->get(),
                          13, "a", &total, amax_is_largest);
  }
  EXPECT_GE(total, 80u);
}

// Every chunk of the paged decode, grouped heads 1 to 8, head dims 64 and 128, fp16 and bf16, caches read through
// random page tables (repeated blocks included) with random lengths, causal bottom-right, against the host
// reference; a stale o is overwritten; bytes load back and write the same bits; q or k one element past an aligned
// base (a caller's slice) reads rows element by element and still matches.
TEST(KilnKernelGpu, EveryPagedDecodeConfigurationMatchesTheReference) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  struct Shape {
    int64_t b, h, hk, d, bs, pages, blocks;
    const char *io, *attrs;
  } shapes[] = {{3, 8, 2, 128, 16, 5, 20, "bf16", ""},
                {2, 4, 4, 64, 64, 3, 8, "fp16", R"(, "causal": true, "diagonal_alignment": "bottom_right")"},
                {5, 32, 4, 128, 32, 9, 50, "bf16", R"(, "attn_scale": 0.125)"},
                {4, 16, 8, 64, 16, 40, 200, "bf16", ""},
                {1, 2, 1, 128, 128, 2, 3, "fp16", ""},
                // head dim 64 with 4 and 8 query heads a key head, 128 with 1; blocks of 24 and 48 keys (not powers
                // of two: a division for the page)
                {2, 16, 4, 64, 16, 5, 11, "bf16", ""},
                {2, 32, 4, 64, 24, 6, 14, "fp16", ""},
                {3, 4, 4, 128, 48, 3, 9, "bf16", ""},
                // blocks of one key: a CTA over more pages than either form stages reads the tables themselves
                {1, 2, 1, 64, 1, 1100, 1100, "bf16", ""}};
  size_t total = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::to_string(s.b) + "x" + std::to_string(s.h) + "/" + std::to_string(s.hk) + " d" +
                 std::to_string(s.d) + " " + std::to_string(s.pages) + " pages of " + std::to_string(s.bs) + " " +
                 s.io);
    // One element past an aligned base: q (read element by element in either form) or k (the staged form's
    // cp.async cannot take it: its tiles are copied element by element), in turn by shape.
    const char* sliced = (&s - shapes) % 2 == 1 ? "k" : "q";
    check_every_candidate(test::paged_decode_graph(s.b, s.h, s.hk, s.d, s.bs, s.pages, s.blocks, s.io, s.attrs),
                          handle->get(), 17, sliced, &total);
  }
  EXPECT_GE(total, 40u);
}

// An entry whose query is padded (seq_len_q 0) or that has no key (seq_len_kv 0), lengths past the caches' extent
// and page-table entries outside the cache (clamped, as cuDNN and the references read them): o is 0 for the first
// two and matches the reference. 8 pages of 16 keys: chunks of 64 are two splits (the merge of splits without a
// key), 128 one (the staged form writes o itself).
TEST(KilnKernelGpu, PagedDecodeWritesZeroForAnEntryWithoutQueryOrKeys) {
  KILN_REQUIRE_GPU();
  auto handle = make_cudnn_handle();
  ASSERT_TRUE(handle.is_ok());
  Graph g = test::paged_decode_graph(4, 8, 2, 128, 16, 8, 10, "bf16");
  auto inputs = make_random_inputs(g, 23);
  ASSERT_TRUE(inputs.is_ok());
  const int lq = g.find_tensor("lq"), lkv = g.find_tensor("lkv");
  (*inputs)[lq] = HostTensor::from_values(DataType::kInt32, {4, 1, 1, 1}, {0, 1, 1, 1});
  (*inputs)[lkv] = HostTensor::from_values(DataType::kInt32, {4, 1, 1, 1}, {30, 0, 100, 500});
  std::vector<double> table(4 * 8);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i % 3 == 0 ? -3 : i % 3 == 1 ? 15 : i % 10);
  for (const char* t : {"tk", "tv"})
    (*inputs)[g.find_tensor(t)] = HostTensor::from_values(DataType::kInt32, {4, 1, 8, 1}, table);
  auto ref = run_host_reference_with_magnitudes(g, *inputs);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  LowerTarget target;
  target.handle = handle->get();
  for (const char* id : {"knl4_chunk=16", "knl4_chunk=64", "knl4_chunk=64_stages=2", "knl4_chunk=64_stages=3",
                         "knl4_chunk=128_stages=2"}) {
    auto config = EngineConfig::parse(id);
    ASSERT_TRUE(config.is_ok());
    auto plan = LoweredGraph::create_alt(g, target, *config);
    if (std::string(id) == "knl4_chunk=16") {  // not a chunk Kiln offers: refused by name
      ASSERT_FALSE(plan.is_ok());
      EXPECT_NE(plan.status().message().find("knl4_chunk=C"), std::string::npos) << plan.status().message();
      continue;
    }
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    auto buffers = allocate_graph_buffers(g, *inputs, plan->workspace_size());
    ASSERT_TRUE(buffers.is_ok());
    const int o = g.find_tensor("o");
    ASSERT_EQ(cudaMemset(buffers->tensors.at(o).data(), 0x7f, buffers->tensors.at(o).size()), cudaSuccess);
    Status ran = plan->execute(handle->get(), buffers->pointers(), buffers->workspace.data());
    ASSERT_TRUE(ran.is_ok()) << ran.to_string();
    auto outs = download_outputs(g, *buffers);
    ASSERT_TRUE(outs.is_ok());
    auto check = check_outputs(g, *outs, *ref);
    ASSERT_TRUE(check.is_ok());
    EXPECT_EQ(check->verdict, Disposition::kPassed) << id << ": " << check->summary();
    const std::vector<double> got = (*outs)[0].values();
    const size_t row = 8 * 128;  // an entry's o: 8 heads of 128
    for (size_t e : {size_t{0}, size_t{1}})
      for (size_t i = e * row; i < (e + 1) * row; ++i)
        ASSERT_EQ(got[i], 0.0) << id << " entry " << e << " element " << i;
  }
}

}  // namespace
}  // namespace kiln
