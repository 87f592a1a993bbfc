// The C++ builder yields the same graph (signature) as the equivalent JSON spec.
#include <gtest/gtest.h>

#include "graph/graph_test_util.h"
#include "kiln/spec/builder.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

std::string example(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".json"; }

// The builder's graph and the parsed spec (a file, or with `text` the spec itself) sign alike.
void expect_same_signature(const GraphBuilder& b, const std::string& spec, bool text = false) {
  StatusOr<Graph> built = b.build();
  ASSERT_TRUE(built.is_ok()) << built.status().message();
  StatusOr<Graph> parsed = text ? parse_spec_string(spec, "spec.json") : parse_spec_file(spec);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  StatusOr<GraphSignature> sb = compute_signature(*built), sp = compute_signature(*parsed);
  ASSERT_TRUE(sb.is_ok() && sp.is_ok());
  EXPECT_EQ(sb->structure, sp->structure) << "builder:\n" << sb->canonical << "spec:\n" << sp->canonical;
  EXPECT_EQ(sb->shape_key, sp->shape_key);
}

TEST(Builder, ConvBiasReluMatchesJson) {
  GraphBuilder b("conv_bias_relu");
  b.io_dtype(DataType::kFloat16).intermediate_dtype(DataType::kFloat32).compute_dtype(DataType::kFloat32);
  b.dynamic("batch", 32);
  TensorRef x = b.tensor("x", {"batch", 64, 56, 56}, Layout::kNHWC);
  TensorRef w = b.tensor("w", {64, 64, 3, 3}, Layout::kNHWC);
  TensorRef bias = b.tensor("bias", {1, 64, 1, 1}, Layout::kNHWC);
  TensorRef y = b.conv_fprop("conv", x, w, ConvOptions().padding({1, 1}));
  b.output(b.relu("relu", b.bias_add("add_bias", y, bias)));
  expect_same_signature(b, example("conv_bias_relu"));
}

TEST(Builder, MatmulBiasGeluMatchesJson) {
  GraphBuilder b;
  b.io_dtype(DataType::kBFloat16);
  TensorRef a = b.tensor("a", {1, 2048, 4096});
  TensorRef w = b.tensor("b", {1, 4096, 4096});
  TensorRef bias = b.tensor("bias", {1, 1, 4096});
  b.output(b.gelu("gelu", b.bias_add("add_bias", b.matmul("mm", a, w), bias)));
  expect_same_signature(b, example("matmul_bias_gelu"));
}

TEST(Builder, MatmulAmaxMatchesJson) {
  GraphBuilder b;
  TensorRef a = b.tensor("a", {1, 2048, 4096});
  TensorRef w = b.tensor("b", {1, 4096, 4096});
  TensorRef y = b.matmul("mm", a, w);
  TensorRef amax = b.reduce("amax", ReductionMode::kAmax, y, {0, 1, 2});
  b.set_dtype(amax, DataType::kFloat32);
  b.output(y).output(amax);
  expect_same_signature(b, example("matmul_amax"));
}

TEST(Builder, Fp8ScaleMatchesJson) {
  GraphBuilder b;
  b.io_dtype(DataType::kFloat32);
  TensorRef fp8_max = b.scalar("fp8_max", 448.0, DataType::kFloat32, 3);
  TensorRef amax = b.tensor("amax", {1, 1, 1});
  b.set_dtype(amax, DataType::kFloat32);
  TensorRef scale = b.pointwise("fp8_scale", PointwiseMode::kDiv, fp8_max, amax, "scale");
  b.output(scale);
  expect_same_signature(b, example("fp8_scale"));
}

TEST(Builder, NormsAndSdpaMatchJson) {
  {
    GraphBuilder b;
    b.dynamic("tokens", 8192);
    TensorRef x = b.tensor("x", {"tokens", 1024, 1, 1}, Layout::kNCHW);
    // Parameters in the io dtype, as in the example (fp32 ones get cuDNN's generic engine: kiln/graph/advice.h).
    TensorRef g = b.tensor("gamma", {1, 1024, 1, 1}, Layout::kNCHW);
    TensorRef be = b.tensor("beta", {1, 1024, 1, 1}, Layout::kNCHW);
    b.output(b.layer_norm("norm", x, g, be, 1e-5));
    expect_same_signature(b, example("layer_norm"));
  }
  {
    GraphBuilder b;
    b.dynamic("tokens", 8192);
    TensorRef x = b.tensor("x", {"tokens", 4096, 1, 1}, Layout::kNCHW);
    TensorRef g = b.tensor("gamma", {1, 4096, 1, 1}, Layout::kNCHW);
    b.output(b.rms_norm("norm", x, g, 1e-5));
    expect_same_signature(b, example("rms_norm"));
  }
  {
    GraphBuilder b;
    b.io_dtype(DataType::kBFloat16).dynamic("batch", 4);
    TensorRef q = b.tensor("q", {"batch", 16, 1024, 64});
    TensorRef k = b.tensor("k", {"batch", 16, 1024, 64});
    TensorRef v = b.tensor("v", {"batch", 16, 1024, 64});
    b.output(b.sdpa("attn", q, k, v, /*causal=*/true));  // default scale 1/sqrt(64) = the spec's 0.125
    expect_same_signature(b, example("sdpa_fwd"));
  }
}

// sdpa_stats adds the statistics as the node's second output (fp32), signing as the spec that lists them; misuses
// are the build's error.
TEST(Builder, SdpaStatsMatchesTheSpecWithTheSecondOutput) {
  GraphBuilder b;
  b.io_dtype(DataType::kBFloat16);
  TensorRef q = b.tensor("q", {2, 4, 64, 64}), k = b.tensor("k", {2, 4, 64, 64}), v = b.tensor("v", {2, 4, 64, 64});
  TensorRef o = b.sdpa("attn", q, k, v, /*causal=*/true);
  TensorRef lse = b.sdpa_stats(o, "lse");
  b.output(o).output(lse);
  const std::string spec = R"({"name": "s", "io_dtype": "bf16",
    "tensors": {"q": {"dims": [2, 4, 64, 64]}, "k": {"dims": [2, 4, 64, 64]}, "v": {"dims": [2, 4, 64, 64]},
                "lse": {"dtype": "float32"}},
    "nodes": [{"name": "attn", "op": "sdpa", "causal": true, "inputs": ["q", "k", "v"], "outputs": ["attn", "lse"]}],
    "outputs": ["attn", "lse"]})";
  expect_same_signature(b, spec, /*text=*/true);
  StatusOr<Graph> built = b.build();
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  EXPECT_EQ(built->tensors[static_cast<size_t>(lse.index)].shape(), (std::vector<int64_t>{2, 4, 64, 1}));

  GraphBuilder twice = b;
  twice.sdpa_stats(o);
  EXPECT_NE(twice.build().status().message().find("node 'attn' has its statistics already"), std::string::npos);
  GraphBuilder not_sdpa;
  TensorRef x = not_sdpa.tensor("x", {4, 4});
  not_sdpa.sdpa_stats(not_sdpa.relu("r", x));
  EXPECT_NE(not_sdpa.build().status().message().find("tensor 'r' is not an sdpa's output"), std::string::npos);
}

// sdpa_backward: dq, dk, dv named after the node, signing as the spec with the same node.
TEST(Builder, SdpaBackwardMatchesTheSpec) {
  GraphBuilder b;
  b.io_dtype(DataType::kBFloat16);
  TensorRef q = b.tensor("q", {2, 4, 64, 64}), k = b.tensor("k", {2, 2, 64, 64}), v = b.tensor("v", {2, 2, 64, 64});
  TensorRef o = b.tensor("o", {2, 4, 64, 64}), dout = b.tensor("do", {2, 4, 64, 64});
  TensorRef stats = b.tensor("stats", {2, 4, 64, 1}, Layout::kRowMajor, DataType::kFloat32);
  SdpaAttrs a;
  a.causal = true;
  const GraphBuilder::SdpaGrads g = b.sdpa_backward("grad", q, k, v, o, dout, stats, a);
  b.output(g.dq).output(g.dk).output(g.dv);
  const std::string spec = R"({"name": "s", "io_dtype": "bf16",
    "tensors": {"q": {"dims": [2, 4, 64, 64]}, "k": {"dims": [2, 2, 64, 64]}, "v": {"dims": [2, 2, 64, 64]},
                "o": {"dims": [2, 4, 64, 64]}, "do": {"dims": [2, 4, 64, 64]},
                "stats": {"dims": [2, 4, 64, 1], "dtype": "float32"}},
    "nodes": [{"name": "grad", "op": "sdpa_backward", "causal": true, "inputs": ["q", "k", "v", "o", "do", "stats"],
               "outputs": ["grad_dq", "grad_dk", "grad_dv"]}],
    "outputs": ["grad_dq", "grad_dk", "grad_dv"]})";
  expect_same_signature(b, spec, /*text=*/true);
  StatusOr<Graph> built = b.build();
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  EXPECT_EQ(built->tensors[static_cast<size_t>(g.dk.index)].shape(), (std::vector<int64_t>{2, 2, 64, 64}));
}

TEST(Builder, SdpaFp8MatchesTheSpec) {
  GraphBuilder b;
  b.io_dtype(DataType::kFp8E4M3);
  TensorRef q = b.tensor("q", {2, 4, 64, 64}), k = b.tensor("k", {2, 2, 64, 64}), v = b.tensor("v", {2, 2, 64, 64});
  const auto scale = [&](const char* n) { return b.tensor(n, {1, 1, 1, 1}, Layout::kRowMajor, DataType::kFloat32); };
  const GraphBuilder::SdpaFp8Scales sc{scale("dq"), scale("dk"), scale("dv"), scale("ds"), scale("ss"), scale("so")};
  SdpaAttrs a;
  a.causal = true;
  const GraphBuilder::SdpaFp8Out out = b.sdpa_fp8("attn", q, k, v, sc, a);
  b.output(out.o).output(out.amax_o).output(b.sdpa_stats(out.o));
  const std::string spec = R"({"name": "s", "io_dtype": "fp8_e4m3",
    "tensors": {"q": {"dims": [2, 4, 64, 64]}, "k": {"dims": [2, 2, 64, 64]}, "v": {"dims": [2, 2, 64, 64]},
                "dq": {"dims": [1, 1, 1, 1], "dtype": "float32"}, "dk": {"dims": [1, 1, 1, 1], "dtype": "float32"},
                "dv": {"dims": [1, 1, 1, 1], "dtype": "float32"}, "ds": {"dims": [1, 1, 1, 1], "dtype": "float32"},
                "ss": {"dims": [1, 1, 1, 1], "dtype": "float32"}, "so": {"dims": [1, 1, 1, 1], "dtype": "float32"},
                "attn_o": {"dtype": "fp8_e4m3"}, "attn_amax_o": {"dtype": "float32"},
                "attn_stats": {"dtype": "float32"}},
    "nodes": [{"name": "attn", "op": "sdpa_fp8", "causal": true,
               "inputs": ["q", "k", "v", "dq", "dk", "dv", "ds", "ss", "so"],
               "outputs": ["attn_o", "attn_amax_o", "attn_stats"]}],
    "outputs": ["attn_o", "attn_amax_o", "attn_stats"]})";
  expect_same_signature(b, spec, /*text=*/true);
  // The statistics of a node that has them already, or of a tensor no attention node writes: refused by name.
  GraphBuilder twice = b;
  twice.sdpa_stats(out.o, "again");
  EXPECT_FALSE(twice.build().is_ok());
}

TEST(Builder, ConvGradsMatchJson) {
  {
    GraphBuilder b;
    b.dynamic("batch", 32);
    TensorRef dy = b.tensor("dy", {"batch", 64, 56, 56}, Layout::kNHWC);
    TensorRef w = b.tensor("w", {64, 64, 3, 3}, Layout::kNHWC);
    b.tensor("dx", {"batch", 64, 56, 56}, Layout::kNHWC);
    b.output(b.conv_dgrad("dgrad", dy, w, ConvOptions().padding({1, 1}), "dx"));
    expect_same_signature(b, example("conv_dgrad"));
  }
  {
    GraphBuilder b;
    b.dynamic("batch", 32);
    TensorRef x = b.tensor("x", {"batch", 64, 56, 56}, Layout::kNHWC);
    TensorRef dy = b.tensor("dy", {"batch", 64, 56, 56}, Layout::kNHWC);
    TensorRef dw = b.conv_wgrad("wgrad", x, dy, ConvOptions().padding({1, 1}));
    b.set_dtype(dw, DataType::kFloat32).set_layout(dw, Layout::kNHWC);
    b.output(dw);
    expect_same_signature(b, example("conv_wgrad"));
  }
}

TEST(Builder, MistakesAreReportedByBuild) {
  GraphBuilder b("bad");
  TensorRef x = b.tensor("x", {2, 3});
  b.tensor("x", {2, 3});
  b.output(b.relu("r", x));
  EXPECT_ERROR_HAS(b.build().status(), "builder: tensor 'x' is declared twice");

  GraphBuilder c("bad2");
  c.output(c.relu("r", TensorRef{}));
  EXPECT_ERROR_HAS(c.build().status(), "node 'r': input 0: refers to a missing tensor");

  GraphBuilder d("bad3");
  TensorRef a = d.tensor("a", {2, 3});
  TensorRef m = d.tensor("m", {4, 5});
  d.output(d.matmul("mm", a, m));
  EXPECT_ERROR_HAS(d.build().status(), "builder 'bad3': node 'mm' (matmul): input 'm': inner dims differ");
}

}  // namespace
}  // namespace kiln
