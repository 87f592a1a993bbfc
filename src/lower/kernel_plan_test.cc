// Host tier: which graphs Kiln's own kernels are offered for (src/lower/kernel_plan.h), their configurations, and
// bytes and identities they refuse without a device. The GPU tier (kernel_plan_gpu_test.cc) runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "kiln/spec/spec.h"
#include "lower/decode_test_graph.h"
#include "lower/kernel_plan.h"

namespace kiln::lower_detail {
namespace {

// reduce_amax of x (a JSON tensor object) over `axes` into an fp32 "amax" of `out_dims`.
Graph amax_graph(const std::string& x, const std::string& axes, const std::string& out_dims) {
  const std::string spec = R"({"name": "amax", "io_dtype": "bf16", "tensors": {"x": )" + x + R"(, "amax": {"dims": )" +
                           out_dims + R"(, "dtype": "fp32"}}, "nodes": [{"name": "r",
                           "op": "reduce_amax", "inputs": ["x"], "outputs": ["amax"], "axes": )" +
                           axes + R"(}], "outputs": ["amax"]})";
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

TEST(KilnKernelMatch, TheWholeAmaxOfADenseTensor) {
  Graph g = amax_graph(R"({"dims": [1, 8192, 8192]})", "[0, 1, 2]", "[1, 1, 1]");
  std::string why;
  auto p = match_whole_amax(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->input, g.find_tensor("x"));
  EXPECT_EQ(p->output, g.find_tensor("amax"));
  EXPECT_EQ(p->dtype, DataType::kBFloat16);
  EXPECT_EQ(p->count, int64_t{8192} * 8192);
  // Axes of extent 1 may be left out.
  Graph h = amax_graph(R"({"dims": [1, 64, 32]})", "[1, 2]", "[1, 1, 1]");
  EXPECT_TRUE(match_whole_amax(h, &why)) << why;
}

TEST(KilnKernelMatch, OtherReductionsSayWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  } cases[] = {
      {"rows", amax_graph(R"({"dims": [1, 64, 32]})", "[2]", "[1, 64, 1]"), "keeps axis 1"},
      {"strided", amax_graph(R"({"dims": [1, 64, 32], "strides": [4096, 64, 1]})", "[0, 1, 2]", "[1, 1, 1]"),
       "not densely packed"},
      {"fp8", amax_graph(R"({"dims": [1, 64, 32], "dtype": "fp8_e4m3"})", "[0, 1, 2]", "[1, 1, 1]"), "is fp8_e4m3"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_whole_amax(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
}

TEST(KilnKernelPlan, SixLaunchConfigurationsAndNoOthers) {
  Graph g = amax_graph(R"({"dims": [1, 64, 32]})", "[0, 1, 2]", "[1, 1, 1]");
  auto p = match_whole_amax(g, nullptr);
  ASSERT_TRUE(p);
  auto c = KernelPlan::candidates(*p);
  ASSERT_TRUE(c.is_ok());
  ASSERT_EQ(c->size(), 6u);
  EXPECT_EQ(c->front().identity(), "knl1_blocks=2_threads=256");
  EXPECT_EQ(c->back().identity(), "knl1_blocks=8_threads=512");
  // Refused before any device is asked: another kernel, a knob it lacks, values out of range.
  for (const char* bad : {"knl2_blocks=2_threads=256", "knl1_blocks=2", "knl1_blocks=2_threads=100",
                          "knl1_blocks=0_threads=256", "knl1_blocks=2_threads=256_tile=1"}) {
    auto built = KernelPlan::build(*p, *EngineConfig::parse(bad));
    ASSERT_FALSE(built.is_ok()) << bad;
    EXPECT_EQ(built.status().code(), StatusCode::kNotSupported) << bad;
    EXPECT_NE(built.status().message().find(bad), std::string::npos) << built.status().message();
  }
  for (const std::string& junk : {std::string("KILNKRN1\n"), std::string("KILNKRN1\nblt66"), std::string("eng1")}) {
    auto back = KernelPlan::deserialize(*p, std::vector<uint8_t>(junk.begin(), junk.end()));
    ASSERT_FALSE(back.is_ok()) << junk;
    EXPECT_EQ(back.status().code(), StatusCode::kCorruption) << junk;
  }
}

// A lone norm over x [rows, hidden] ("rms_norm" or "layer_norm") in `io` dtype; `extra` adds tensor fields
// (dtype overrides, strides) as JSON object members keyed by tensor.
Graph norm_graph(const std::string& op, int64_t rows, int64_t hidden, const std::string& io = "bf16",
                 const std::string& scale_dtype = "", const std::string& x_extra = "") {
  const bool layer = op == "layer_norm";
  const std::string dims = "[" + std::to_string(rows) + ", " + std::to_string(hidden) + ", 1, 1]";
  const std::string param = R"({"dims": [1, )" + std::to_string(hidden) + R"(, 1, 1])" +
                            (scale_dtype.empty() ? "" : R"(, "dtype": ")" + scale_dtype + "\"") + "}";
  const std::string spec = R"({"name": "norm", "io_dtype": ")" + io + R"(", "tensors": {"x": {"dims": )" + dims +
                           x_extra + R"(}, "gamma": )" + param + (layer ? R"(, "beta": )" + param : "") +
                           R"(}, "nodes": [{"name": "n", "op": ")" + op + R"(", "inputs": ["x", "gamma")" +
                           (layer ? R"(, "beta")" : "") +
                           R"(], "outputs": ["y"], "epsilon": 1e-5}], "outputs": ["y"]})";
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

std::vector<std::string> identities(const StatusOr<std::vector<EngineConfig>>& configs) {
  std::vector<std::string> out;
  if (configs.is_ok())
    for (const EngineConfig& c : *configs) out.push_back(c.identity());
  return out;
}

TEST(KilnKernelMatch, ALayerOrRmsNormOverRows) {
  Graph rms = norm_graph("rms_norm", 65536, 1024);
  std::string why;
  auto p = match_norm(rms, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->rows, 65536);
  EXPECT_EQ(p->hidden, 1024);
  EXPECT_FALSE(p->layer());
  EXPECT_EQ(p->x, rms.find_tensor("x"));
  EXPECT_EQ(p->scale, rms.find_tensor("gamma"));
  EXPECT_EQ(p->y, rms.find_tensor("y"));
  EXPECT_EQ(p->x_dtype, DataType::kBFloat16);
  EXPECT_EQ(p->param_dtype, DataType::kBFloat16);
  EXPECT_FLOAT_EQ(p->epsilon, 1e-5f);
  Graph layer = norm_graph("layer_norm", 8, 4096, "fp16", "fp32");
  p = match_norm(layer, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_TRUE(p->layer());
  EXPECT_EQ(p->bias, layer.find_tensor("beta"));
  EXPECT_EQ(p->param_dtype, DataType::kFloat32);
  // match_kiln_kernel finds the norm after the AMAX declines it.
  auto k = match_kiln_kernel(layer, &why);
  ASSERT_TRUE(k);
  EXPECT_TRUE(std::holds_alternative<NormProblem>(*k));
}

TEST(KilnKernelMatch, OtherNormsSayWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  } cases[] = {
      {"fp16 x, bf16 scale", norm_graph("rms_norm", 4, 64, "fp16", "bf16"), "x's dtype or fp32"},
      {"strided x", norm_graph("rms_norm", 4, 64, "bf16", "", R"(, "strides": [128, 1, 1, 1])"), "not densely packed"},
      {"an amax", amax_graph(R"({"dims": [1, 64, 32]})", "[0, 1, 2]", "[1, 1, 1]"), "not one layer_norm or rms_norm"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_norm(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
  // Neither kernel: both reasons.
  std::string why;
  EXPECT_FALSE(match_kiln_kernel(cases[0].g, &why));
  EXPECT_NE(why.find("not one reduce_amax"), std::string::npos) << why;
  EXPECT_NE(why.find("x's dtype or fp32"), std::string::npos) << why;
}

TEST(KilnKernelPlan, NormConfigurationsFollowTheRow) {
  // 1024 bf16 = 128 chunks: groups of 32 (4 a thread), 64 (2) and 128 (1), in CTAs of 128-512, each with and without
  // persistent CTAs.
  auto small = match_norm(norm_graph("rms_norm", 65536, 1024), nullptr);
  ASSERT_TRUE(small);
  EXPECT_EQ(identities(KernelPlan::candidates(*small)),
            (std::vector<std::string>{"knl2_group=32_persist=0_threads=128", "knl2_group=32_persist=1_threads=128",
                                      "knl2_group=32_persist=0_threads=256", "knl2_group=32_persist=1_threads=256",
                                      "knl2_group=32_persist=0_threads=512", "knl2_group=32_persist=1_threads=512",
                                      "knl2_group=64_persist=0_threads=128", "knl2_group=64_persist=1_threads=128",
                                      "knl2_group=64_persist=0_threads=256", "knl2_group=64_persist=1_threads=256",
                                      "knl2_group=64_persist=0_threads=512", "knl2_group=64_persist=1_threads=512",
                                      "knl2_group=128_persist=0_threads=128", "knl2_group=128_persist=1_threads=128",
                                      "knl2_group=128_persist=0_threads=256", "knl2_group=128_persist=1_threads=256",
                                      "knl2_group=128_persist=0_threads=512", "knl2_group=128_persist=1_threads=512"}));
  // 8192 bf16 = 1024 chunks: groups of 128 (8 a thread), 256 (4) and 512 (2).
  auto wide = match_norm(norm_graph("layer_norm", 16384, 8192), nullptr);
  ASSERT_TRUE(wide);
  EXPECT_EQ(identities(KernelPlan::candidates(*wide)),
            (std::vector<std::string>{"knl2_group=128_persist=0_threads=128", "knl2_group=128_persist=1_threads=128",
                                      "knl2_group=128_persist=0_threads=256", "knl2_group=128_persist=1_threads=256",
                                      "knl2_group=128_persist=0_threads=512", "knl2_group=128_persist=1_threads=512",
                                      "knl2_group=256_persist=0_threads=256", "knl2_group=256_persist=1_threads=256",
                                      "knl2_group=256_persist=0_threads=512", "knl2_group=256_persist=1_threads=512",
                                      "knl2_group=512_persist=0_threads=512", "knl2_group=512_persist=1_threads=512"}));
  // No whole number of chunks: the plain loop's one form.
  auto odd = match_norm(norm_graph("rms_norm", 3, 1001), nullptr);
  ASSERT_TRUE(odd);
  EXPECT_EQ(identities(KernelPlan::candidates(*odd)), std::vector<std::string>{"knl2_group=256_persist=0_threads=256"});
  // Past 512 threads of 8 chunks (32768 bf16): the plain loop only.
  auto huge = match_norm(norm_graph("rms_norm", 2, 65536), nullptr);
  ASSERT_TRUE(huge);
  EXPECT_EQ(identities(KernelPlan::candidates(*huge)),
            std::vector<std::string>{"knl2_group=256_persist=0_threads=256"});
  EXPECT_TRUE(KernelPlan::build(*huge, *EngineConfig::parse("knl2_group=256_persist=0_threads=256")).is_ok());
  // Built without a device; refused where the knobs or the kernel do not fit.
  EXPECT_TRUE(KernelPlan::build(*wide, *EngineConfig::parse("knl2_group=256_persist=1_threads=512")).is_ok());
  for (const char* bad : {"knl2_group=32_persist=0_threads=128", "knl2_group=48_persist=0_threads=128",
                          "knl2_group=16_persist=0_threads=128", "knl2_group=256_persist=0_threads=1024",
                          "knl2_group=512_persist=0_threads=256", "knl2_group=256_persist=2_threads=256",
                          "knl2_group=256_threads=256", "knl1_blocks=2_threads=256"}) {
    auto built = KernelPlan::build(*wide, *EngineConfig::parse(bad));
    ASSERT_FALSE(built.is_ok()) << bad;
    EXPECT_EQ(built.status().code(), StatusCode::kNotSupported) << bad;
    EXPECT_NE(built.status().message().find(bad), std::string::npos) << built.status().message();
  }
  // Bytes name the configuration and load back for the same problem.
  auto plan = KernelPlan::build(*small, *EngineConfig::parse("knl2_group=64_persist=1_threads=256"));
  ASSERT_TRUE(plan.is_ok());
  auto back = KernelPlan::deserialize(*small, plan->serialize());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->config().identity(), "knl2_group=64_persist=1_threads=256");
}

// y = act(a b + bias) with a [1, m, k], b [1, k, n], bias [1, 1, n] ("" act: none; no_bias: none).
Graph skinny_graph(int64_t m, int64_t k, int64_t n, const std::string& act, bool bias = true,
                   const std::string& io = "bf16", const std::string& a_extra = "") {
  auto dims = [](int64_t x, int64_t y) { return "[1, " + std::to_string(x) + ", " + std::to_string(y) + "]"; };
  std::string nodes = R"({"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["p"]})";
  std::string last = "p";
  if (bias) {
    nodes += R"(, {"name": "add", "op": "bias_add", "inputs": ["p", "bias"], "outputs": ["q"]})";
    last = "q";
  }
  if (!act.empty()) {
    nodes += R"(, {"name": "act", "op": ")" + act + R"(", "inputs": [")" + last + R"("], "outputs": ["r"]})";
    last = "r";
  }
  const std::string spec = R"({"name": "skinny", "io_dtype": ")" + io + R"(", "tensors": {"a": {"dims": )" +
                           dims(m, k) + a_extra + R"(}, "b": {"dims": )" + dims(k, n) + "}" +
                           (bias ? R"(, "bias": {"dims": )" + dims(1, n) + "}" : "") + R"(}, "nodes": [)" + nodes +
                           R"(], "outputs": [")" + last + R"("]})";
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

TEST(KilnKernelMatch, ASkinnyGemmWithItsEpilogue) {
  Graph g = skinny_graph(16, 8192, 8192, "gelu_erf");
  std::string why;
  auto p = match_skinny_gemm(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->m, 16);
  EXPECT_EQ(p->n, 8192);
  EXPECT_EQ(p->k, 8192);
  EXPECT_EQ(p->a, g.find_tensor("a"));
  EXPECT_EQ(p->b, g.find_tensor("b"));
  EXPECT_EQ(p->bias, g.find_tensor("bias"));
  EXPECT_EQ(p->y, g.find_tensor("r"));
  EXPECT_EQ(p->act, SkinnyGemmProblem::Act::kGeluErf);
  EXPECT_EQ(p->dtype, DataType::kBFloat16);
  auto plain = match_skinny_gemm(skinny_graph(1, 64, 128, "", false, "fp16"), &why);
  ASSERT_TRUE(plain) << why;
  EXPECT_EQ(plain->bias, -1);
  EXPECT_EQ(plain->act, SkinnyGemmProblem::Act::kNone);
  EXPECT_EQ(match_skinny_gemm(skinny_graph(4, 64, 64, "gelu_tanh"), &why)->act, SkinnyGemmProblem::Act::kGeluTanh);
  EXPECT_EQ(match_skinny_gemm(skinny_graph(4, 64, 64, "relu"), &why)->act, SkinnyGemmProblem::Act::kRelu);
  // Candidates: tiles 64 and 128 with 4 or 8 stages, K split 1-8 where the shape divides (k 128: split 1 and 2 only);
  // the 512-byte stage is a column-major b's form only, and the wide tile of 512 (removed) is no form at all.
  const std::vector<std::string> all = identities(KernelPlan::candidates(*p));
  EXPECT_EQ(all.size(), 16u);
  EXPECT_EQ(std::find(all.begin(), all.end(), "knl3_kbytes=512_split=8_stages=4_tile=64"), all.end());
  EXPECT_FALSE(KernelPlan::build(*p, *EngineConfig::parse("knl3_split=8_stages=4_tile=512")).is_ok());
  // A plan stored while the tile of 512 existed is refused at load, NotSupported with the reason (re-tuned, never
  // launched).
  auto kept = KernelPlan::build(*p, *EngineConfig::parse("knl3_split=8_stages=4_tile=128"));
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  std::vector<uint8_t> stale = kept->serialize();
  std::string text(stale.begin(), stale.end());
  ASSERT_NE(text.find("tile=128"), std::string::npos) << text;
  text.replace(text.find("tile=128"), 8, "tile=512");
  auto loaded = KernelPlan::deserialize(*p, std::vector<uint8_t>(text.begin(), text.end()));
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(loaded.status().message().find("T 64 or 128"), std::string::npos) << loaded.status().message();
  for (const char* not_row_major : {"knl3_kbytes=512_split=2_stages=4_tile=64"}) {
    auto built = KernelPlan::build(*p, *EngineConfig::parse(not_row_major));
    ASSERT_FALSE(built.is_ok()) << not_row_major;
    EXPECT_NE(built.status().message().find("is no form of the skinny GEMM for a row-major b"), std::string::npos)
        << built.status().message();
  }
  auto short_k = match_skinny_gemm(skinny_graph(16, 128, 64, "relu"), &why);
  ASSERT_TRUE(short_k) << why;
  EXPECT_EQ(identities(KernelPlan::candidates(*short_k)),
            (std::vector<std::string>{"knl3_split=1_stages=4_tile=64", "knl3_split=1_stages=8_tile=64",
                                      "knl3_split=2_stages=4_tile=64", "knl3_split=2_stages=8_tile=64"}));
  for (const char* bad :
       {"knl3_split=4_stages=4_tile=64", "knl3_split=1_stages=4_tile=128", "knl3_split=3_stages=4_tile=64",
        "knl3_split=1_stages=4_tile=32", "knl3_split=1_stages=6_tile=64", "knl3_split=1_tile=64",
        "knl2_group=32_persist=0_threads=128"}) {
    auto built = KernelPlan::build(*short_k, *EngineConfig::parse(bad));
    ASSERT_FALSE(built.is_ok()) << bad;
    EXPECT_EQ(built.status().code(), StatusCode::kNotSupported) << bad;
    EXPECT_NE(built.status().message().find(bad), std::string::npos) << built.status().message();
  }
  EXPECT_TRUE(KernelPlan::build(*short_k, *EngineConfig::parse("knl3_split=2_stages=8_tile=64")).is_ok());
}

// matmul+AMAX: the AMAX of the result over every axis rides on the GEMM's epilogue.
TEST(KilnKernelMatch, ASkinnyGemmWithTheAmaxOfItsResult) {
  auto spec = [](const std::string& axes) {
    return R"({"name": "mm_amax", "io_dtype": "bf16", "tensors": {"a": {"dims": [1, 16, 256]},
      "b": {"dims": [1, 256, 512]}, "bias": {"dims": [1, 1, 512]}, "amax": {"dims": )" +
           std::string(axes == "[0, 1, 2]" ? "[1, 1, 1]" : "[1, 16, 1]") + R"(, "dtype": "fp32"}},
      "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["p"]},
                {"name": "add", "op": "bias_add", "inputs": ["p", "bias"], "outputs": ["q"]},
                {"name": "act", "op": "gelu_tanh", "inputs": ["q"], "outputs": ["y"]},
                {"name": "r", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"], "axes": )" +
           axes + R"(}], "outputs": ["y", "amax"]})";
  };
  auto g = parse_spec_string(spec("[0, 1, 2]"), "test");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  std::string why;
  auto p = match_skinny_gemm(*g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->amax, g->find_tensor("amax"));
  EXPECT_EQ(p->y, g->find_tensor("y"));
  EXPECT_EQ(p->act, SkinnyGemmProblem::Act::kGeluTanh);
  // The AMAX of each row: not the whole tensor's.
  auto rows = parse_spec_string(spec("[0, 2]"), "test");
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  EXPECT_FALSE(match_skinny_gemm(*rows, &why));
  EXPECT_NE(why.find("keeps axis 1"), std::string::npos) << why;
}

// y = a b with a [1, m, k] and b [1, k, n] column-major (b^T row-major, a PyTorch Linear's weight) in `ab` (an fp8
// a and b write bf16), then `amax` = max |y| where asked (the FP8 recipe's GEMM+AMAX segment).
Graph cols_graph(int64_t m, int64_t k, int64_t n, const std::string& ab, bool amax, bool b_cols = true) {
  const std::string io = ab.rfind("fp8", 0) == 0 ? "bf16" : ab;
  const std::string b_strides =
      b_cols ? R"(, "strides": [)" + std::to_string(k * n) + ", 1, " + std::to_string(k) + "]" : std::string();
  const std::string spec =
      R"({"name": "cols", "io_dtype": ")" + io + R"(", "tensors": {"a": {"dims": [1, )" + std::to_string(m) + ", " +
      std::to_string(k) + R"(], "dtype": ")" + ab + R"("}, "b": {"dims": [1, )" + std::to_string(k) + ", " +
      std::to_string(n) + "]" + b_strides + R"(, "dtype": ")" + ab + R"("})" +
      (amax ? R"(, "amax": {"dims": [1, 1, 1], "dtype": "fp32"})" : "") +
      R"(}, "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["y"]})" +
      (amax ? R"(, {"name": "r", "op": "reduce_amax", "inputs": ["y"], "outputs": ["amax"], "axes": [0, 1, 2]})" : "") +
      R"(], "outputs": ["y")" + (amax ? R"(, "amax"]})" : "]}");
  auto g = parse_spec_string(spec, "test");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

// b column-major (a PyTorch weight [n, k]) in fp16 and bf16, and fp8_e4m3 pairs, whose stages hold 128 elements of K.
TEST(KilnKernelMatch, ASkinnyGemmReadsBColumnMajorAndFp8) {
  std::string why;
  auto bf16 = match_skinny_gemm(cols_graph(16, 4096, 1024, "bf16", false), &why);
  ASSERT_TRUE(bf16) << why;
  EXPECT_TRUE(bf16->b_cols);
  EXPECT_EQ(bf16->dtype, DataType::kBFloat16);
  EXPECT_EQ(skinny_k_step(*bf16), 64);
  auto rows = match_skinny_gemm(cols_graph(16, 4096, 1024, "fp16", false, /*b_cols=*/false), &why);
  ASSERT_TRUE(rows) << why;
  EXPECT_FALSE(rows->b_cols);
  // The FP8 recipe's first segment: an fp8 GEMM writing bf16, and the AMAX of its result.
  Graph recipe = cols_graph(16, 8192, 8192, "fp8_e4m3", true);
  auto fp8 = match_skinny_gemm(recipe, &why);
  ASSERT_TRUE(fp8) << why;
  EXPECT_TRUE(fp8->b_cols);
  EXPECT_EQ(fp8->dtype, DataType::kFp8E4M3);
  EXPECT_EQ(fp8->y_dtype, DataType::kBFloat16);
  EXPECT_EQ(fp8->amax, recipe.find_tensor("amax"));
  EXPECT_EQ(skinny_k_step(*fp8), 128);
  // The standard forms and, for a column-major b, 512 bytes of K a stage (k 8192: every split).
  const std::vector<std::string> fp8_all = identities(KernelPlan::candidates(*fp8));
  EXPECT_EQ(fp8_all.size(), 20u);
  EXPECT_NE(std::find(fp8_all.begin(), fp8_all.end(), "knl3_kbytes=512_split=8_stages=4_tile=64"), fp8_all.end());
  EXPECT_EQ(skinny_stage_k(*fp8, SkinnyForm{2, 64, 4, 512}), 512);
  EXPECT_EQ(skinny_stage_k(*bf16, SkinnyForm{2, 64, 4, 512}), 256);
  EXPECT_EQ(skinny_stage_k(*bf16, SkinnyForm{2, 512, 4, 128}), 0) << "no tile of 512";
  auto wide = KernelPlan::build(*fp8, *EngineConfig::parse("knl3_split=2_stages=4_tile=512"));
  ASSERT_FALSE(wide.is_ok());
  EXPECT_NE(wide.status().message().find("T 64 or 128"), std::string::npos) << wide.status().message();
  // k 256 of fp8 is two stages: split 1 and 2 only.
  auto short_k = match_skinny_gemm(cols_graph(4, 256, 128, "fp8_e4m3", false), &why);
  ASSERT_TRUE(short_k) << why;
  EXPECT_EQ(identities(KernelPlan::candidates(*short_k)).size(), 8u);
  auto split4 = KernelPlan::build(*short_k, *EngineConfig::parse("knl3_split=4_stages=4_tile=64"));
  ASSERT_FALSE(split4.is_ok());
  EXPECT_NE(split4.status().message().find("k of 128 x the split"), std::string::npos) << split4.status().message();
  EXPECT_TRUE(KernelPlan::build(*short_k, *EngineConfig::parse("knl3_split=2_stages=8_tile=128")).is_ok());
  // One text per configuration: 128 bytes of K a stage is the form without the knob.
  auto explicit_128 = KernelPlan::build(*short_k, *EngineConfig::parse("knl3_kbytes=128_split=1_stages=4_tile=64"));
  ASSERT_FALSE(explicit_128.is_ok());
  EXPECT_EQ(explicit_128.status().code(), StatusCode::kNotSupported);
  // The launch refuses a row-major fp8 b before any device call.
  SkinnyGemmProblem bad = *short_k;
  bad.b_cols = false;
  Status s = launch_skinny_gemm(bad, SkinnyForm{1, 64, 4, 128}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("column-major only"), std::string::npos) << s.message();
}

TEST(KilnKernelMatch, OtherGemmsSayWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  } cases[] = {
      {"17 rows", skinny_graph(17, 64, 64, "gelu_erf"), "has 17 rows"},
      {"fp32", skinny_graph(4, 64, 64, "gelu_erf", true, "fp32"), "fp16, bf16 or fp8_e4m3 pairs"},
      {"n of 96", skinny_graph(4, 64, 96, "gelu_erf"), "not a multiple of 64"},
      {"a strided a", skinny_graph(4, 64, 64, "relu", true, "bf16", R"(, "strides": [1024, 128, 1])"),
       "not both row-major and dense"},
      {"a sigmoid", skinny_graph(4, 64, 64, "sigmoid"), "is not an epilogue Kiln runs after a matmul"},
      {"fp8 b row-major", cols_graph(4, 128, 64, "fp8_e4m3", false, /*b_cols=*/false), "reads fp8 b column-major"},
      {"e5m2", cols_graph(4, 128, 64, "fp8_e5m2", false), "fp16, bf16 or fp8_e4m3 pairs"},
      {"fp8 k of 64", cols_graph(4, 64, 64, "fp8_e4m3", false), "k=64 of 128"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_skinny_gemm(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
}

TEST(KilnKernelMatch, PagedDecodeOverEveryKeyOfEachEntry) {
  Graph g = test::paged_decode_graph(8, 32, 8, 128, 64, 16, 160);
  std::string why;
  auto p = match_paged_decode(g, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->b, 8);
  EXPECT_EQ(p->h, 32);
  EXPECT_EQ(p->hk, 8);
  EXPECT_EQ(p->d, 128);
  EXPECT_EQ(p->keys(), 1024);
  EXPECT_EQ(p->blocks, 160);
  EXPECT_FLOAT_EQ(p->scale, 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(p->table_v, g.find_tensor("tv"));
  // Causal bottom-right is every key with one query; chunks of 64 up to the first that holds all 1024 keys.
  Graph c =
      test::paged_decode_graph(2, 4, 4, 64, 16, 4, 9, "fp16", R"(, "causal": true, "diagonal_alignment": "bottom_right",
      "attn_scale": 0.5)");
  auto pc = match_paged_decode(c, &why);
  ASSERT_TRUE(pc) << why;
  EXPECT_FLOAT_EQ(pc->scale, 0.5f);
  auto configs = KernelPlan::candidates(KernelProblem(*p));
  ASSERT_TRUE(configs.is_ok());
  std::vector<std::string> ids;
  for (const EngineConfig& e : *configs) ids.push_back(e.identity());
  std::vector<std::string> want;
  for (const char* chunk : {"64", "128", "256", "512", "1024"})
    for (const char* stages : {"", "_stages=2", "_stages=3"})
      want.push_back(std::string("knl4_chunk=") + chunk + stages);
  EXPECT_EQ(ids, want);
  auto plan = KernelPlan::build(KernelProblem(*p), (*configs)[6]);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->workspace_size(), int64_t{8} * 32 * 4 * 130 * 4);  // 4 splits of each query head: D sums, max, sum
  auto back = KernelPlan::deserialize(KernelProblem(*p), plan->serialize());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->config().identity(), "knl4_chunk=256");
  auto staged = KernelPlan::build(KernelProblem(*p), (*configs)[8]);
  ASSERT_TRUE(staged.is_ok()) << staged.status().to_string();
  auto staged_back = KernelPlan::deserialize(KernelProblem(*p), staged->serialize());
  ASSERT_TRUE(staged_back.is_ok()) << staged_back.status().to_string();
  EXPECT_EQ(staged_back->config().identity(), "knl4_chunk=256_stages=3");
  EXPECT_EQ(staged->workspace_size(), plan->workspace_size());  // 4 splits: partials to merge, as the register form
  // One split: the staged form writes o itself and needs no workspace; the register form still merges its one split.
  auto whole = KernelPlan::build(KernelProblem(*p), configs->back());
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->config().identity(), "knl4_chunk=1024_stages=3");
  EXPECT_EQ(whole->workspace_size(), 0);
  auto whole_registers = KernelPlan::build(KernelProblem(*p), (*configs)[configs->size() - 3]);
  ASSERT_TRUE(whole_registers.is_ok()) << whole_registers.status().to_string();
  EXPECT_EQ(whole_registers->workspace_size(), int64_t{8} * 32 * 1 * 130 * 4);
  // Three stages of head dim 128 pass the 99 KiB an sm_86 or sm_89 block may take: offered only where they fit.
  EXPECT_EQ(paged_decode_staged_smem(p->d, 3), 3 * 2 * 64 * 128 * 2 + 2 * 512 * 4);
  EXPECT_GT(paged_decode_staged_smem(p->d, 3), 99 * 1024);
  EXPECT_LE(paged_decode_staged_smem(p->d, 2), 99 * 1024);
  for (const char* bad : {"knl4_chunk=96", "knl4_chunk=8192", "knl4_chunk=256_split=2", "knl4_chunk=256_stages=4",
                          "knl4_chunk=256_stages=1", "knl4_chunk=256_stages=2_split=2", "knl4_stages=2"}) {
    auto e = EngineConfig::parse(bad);
    ASSERT_TRUE(e.is_ok()) << bad;
    EXPECT_EQ(KernelPlan::build(KernelProblem(*p), *e).status().code(), StatusCode::kNotSupported) << bad;
  }
}

TEST(KilnKernelMatch, OtherAttentionSaysWhy) {
  struct Case {
    const char* what;
    Graph g;
    const char* why;
  } cases[] = {
      {"statistics", test::paged_decode_graph(2, 8, 2, 128, 16, 4, 8, "bf16", "", R"("o", "lse")"),
       "writes its statistics"},
      {"top-left causal", test::paged_decode_graph(2, 8, 2, 128, 16, 4, 8, "bf16", R"(, "causal": true)"),
       "band other than"},
      {"a window", test::paged_decode_graph(2, 8, 2, 128, 16, 4, 8, "bf16", R"(, "causal": true, "left_bound": 4,
          "diagonal_alignment": "bottom_right")"),
       "band other than"},
      {"head dim 256", test::paged_decode_graph(2, 8, 2, 256, 16, 4, 8), "head dims 64 or 128"},
      {"16 heads a key head", test::paged_decode_graph(2, 32, 2, 128, 16, 4, 8), "1, 2, 4 or 8 query heads"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(match_paged_decode(c.g, &why)) << c.what;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.what << ": " << why;
  }
  std::string why;
  EXPECT_FALSE(match_paged_decode(amax_graph(R"({"dims": [1, 64, 32]})", "[0, 1, 2]", "[1, 1, 1]"), &why));
  EXPECT_NE(why.find("not one sdpa"), std::string::npos) << why;
}

// The launches refuse what their kernels cannot run before touching the device (these run without one).
TEST(KilnKernelLaunch, RefusesWhatTheKernelCannotRunBeforeAnyDeviceCall) {
  auto norm = match_norm(norm_graph("rms_norm", 4, 8192), nullptr);
  ASSERT_TRUE(norm);
  NormLaunch short_groups;  // 1024 chunks a row: 128 threads of 4 chunks cover half of it
  short_groups.threads = 128;
  short_groups.group = 128;
  short_groups.per_thread = 4;
  Status s = launch_norm(*norm, short_groups, nullptr, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not fit groups of 128"), std::string::npos) << s.message();
  NormLaunch too_big;
  too_big.threads = 1024;
  too_big.group = 1024;
  EXPECT_EQ(launch_norm(*norm, too_big, nullptr, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  auto gemm = match_skinny_gemm(skinny_graph(16, 128, 64, "relu"), nullptr);
  ASSERT_TRUE(gemm);
  for (SkinnyForm f : {SkinnyForm{1, 128, 4, 128}, SkinnyForm{4, 64, 4, 128}, SkinnyForm{1, 64, 6, 128},
                       SkinnyForm{1, 512, 4, 128}, SkinnyForm{1, 64, 4, 512}}) {
    Status g = launch_skinny_gemm(*gemm, f, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    EXPECT_EQ(g.code(), StatusCode::kInvalidArgument) << f.split << " " << f.tile << " " << f.stages << " " << f.kbytes;
    EXPECT_NE(g.message().find("the skinny GEMM cannot run m=16 n=64 k=128"), std::string::npos) << g.message();
  }
}

}  // namespace
}  // namespace kiln::lower_detail
