// graph_to_spec_json: every shipped example and a builder graph using every feature the writer must carry
// (dynamic dims, layouts, explicit strides, dtypes, attributes, by-value scalars, pin) read back with the
// same structure signature and shape key.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "graph/graph_test_util.h"
#include "kiln/spec/builder.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (const char* dir : {"/examples", "/examples/small"})
    for (const auto& e : std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + dir))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// Writes `g`, reads it back and checks signature, shape key and the fixed point (writing the read-back
// graph gives the same text). Returns the text.
std::string expect_round_trip(const Graph& g, const std::string& what) {
  StatusOr<GraphSignature> before = compute_signature(g);
  EXPECT_TRUE(before.is_ok()) << what << ": " << before.status().message();
  StatusOr<std::string> text = graph_to_spec_json(g);
  EXPECT_TRUE(text.is_ok()) << what << ": " << text.status().message();
  if (!before.is_ok() || !text.is_ok()) return "";
  StatusOr<Graph> back = parse_spec_string(*text, what + " (written)");
  EXPECT_TRUE(back.is_ok()) << back.status().message() << "\n" << *text;
  if (!back.is_ok()) return *text;
  StatusOr<GraphSignature> after = compute_signature(*back);
  EXPECT_TRUE(after.is_ok());
  if (!after.is_ok()) return *text;
  EXPECT_EQ(after->structure, before->structure) << what << "\nbefore:\n"
                                                 << before->canonical << "after:\n"
                                                 << after->canonical << "spec:\n"
                                                 << *text;
  EXPECT_EQ(after->shape_key, before->shape_key) << what;
  EXPECT_EQ(after->canonical, before->canonical) << what;
  EXPECT_EQ(back->name, g.name);
  EXPECT_EQ(back->pin, g.pin);
  EXPECT_EQ(back->dynamic_dims, g.dynamic_dims);
  EXPECT_EQ(back->tensors.size(), g.tensors.size()) << what;
  if (back->tensors.size() != g.tensors.size()) return *text;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].name, g.tensors[i].name) << what;
    EXPECT_EQ(back->tensors[i].strides, g.tensors[i].strides) << what << " tensor " << g.tensors[i].name;
    EXPECT_EQ(back->tensors[i].by_value, g.tensors[i].by_value);
    EXPECT_EQ(back->tensors[i].value, g.tensors[i].value);
  }
  StatusOr<std::string> again = graph_to_spec_json(*back);
  EXPECT_TRUE(again.is_ok());
  if (again.is_ok()) {
    EXPECT_EQ(*again, *text) << what << ": writing is not a fixed point";
  }
  return *text;
}

// An indent past the writer's limit is refused; nlohmann's buffer overran past 1024 (found by a hostile trial).
TEST(SpecWriter, AnIndentOverTheLimitIsRefused) {
  StatusOr<Graph> g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_TRUE(graph_to_spec_json(*g, kMaxSpecIndent).is_ok());
  for (int indent : {kMaxSpecIndent + 1, 1025, 100000}) {
    StatusOr<std::string> s = graph_to_spec_json(*g, indent);
    ASSERT_FALSE(s.is_ok()) << indent;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("indent"), std::string::npos) << s.status().message();
  }
}

TEST(SpecWriter, EveryExampleRoundTrips) {
  std::vector<std::string> files = example_files();
  ASSERT_GE(files.size(), 16u);  // examples/*.json and examples/small/*.json
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    StatusOr<Graph> g = parse_spec_file(f);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    expect_round_trip(*g, f);
    // Pretty-printed text reads back the same way.
    StatusOr<std::string> pretty = graph_to_spec_json(*g, 2);
    ASSERT_TRUE(pretty.is_ok());
    EXPECT_NE(pretty->find("\n  \"tensors\""), std::string::npos);
    StatusOr<Graph> back = parse_spec_string(*pretty, f);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(compute_signature(*back)->structure, compute_signature(*g)->structure);
  }
}

// A graph from the C++ builder with everything the writer must carry.
TEST(SpecWriter, BuilderGraphWithEveryFeatureRoundTrips) {
  GraphBuilder b("everything");
  b.io_dtype(DataType::kFloat16).intermediate_dtype(DataType::kFloat32).compute_dtype(DataType::kFloat32);
  b.dynamic("batch", 3);
  TensorRef x = b.tensor("x", {"batch", 8, 9, 9}, Layout::kNHWC);
  TensorRef w = b.tensor("w", {16, 8, 3, 3}, Layout::kNCHW);
  TensorRef y = b.conv_fprop("conv", x, w, ConvOptions().pre_padding({1, 0}).post_padding({1, 2}).stride({2, 1}));
  TensorRef s = b.scalar("s", 0.3125, DataType::kFloat32, 4);
  TensorRef scaled = b.scale("scale", y, s);
  b.set_compute_dtype(scaled, DataType::kFloat32);
  TensorRef bias = b.tensor_strided("bias", {1, 16, 1, 1}, {16, 1, 16, 16}, DataType::kFloat32);
  TensorRef act = b.relu("act", b.bias_add("add_bias", scaled, bias));
  b.set_dtype(act, DataType::kBFloat16);
  b.output(act);
  TensorRef amax = b.reduce("amax", ReductionMode::kAmax, act, {1, 2, 3});
  b.set_dtype(amax, DataType::kFloat32);
  b.output(amax);
  StatusOr<Graph> g = b.build();
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  g->pin = "eng41_k2=4_k13=0";
  std::string text = expect_round_trip(*g, "builder");
  Json j = Json::parse(text);
  EXPECT_EQ(j["pin"], "eng41_k2=4_k13=0");
  EXPECT_EQ(j["dynamic"]["batch"], 3);
  EXPECT_EQ(j["tensors"]["x"]["dims"][0], "batch");
  EXPECT_EQ(j["tensors"]["x"]["layout"], "NHWC");
  EXPECT_EQ(j["tensors"]["w"]["layout"], "NCHW");
  EXPECT_EQ(j["tensors"]["bias"]["strides"], Json({16, 1, 16, 16}));
  EXPECT_EQ(j["tensors"]["bias"]["dtype"], "fp32");
  EXPECT_EQ(j["tensors"]["s"]["value"], 0.3125);
  EXPECT_EQ(j["tensors"]["s"]["dims"], Json({1, 1, 1, 1}));
  EXPECT_EQ(j["nodes"][0]["pre_padding"], Json({1, 0}));
  EXPECT_EQ(j["nodes"][0]["post_padding"], Json({1, 2}));
  EXPECT_EQ(j["nodes"][0]["stride"], Json({2, 1}));
  EXPECT_EQ(j["nodes"][1]["op"], "scale");
  EXPECT_EQ(j["nodes"][1]["compute_dtype"], "fp32");
  EXPECT_EQ(j["nodes"][4]["op"], "reduce_amax");
  EXPECT_EQ(j["nodes"][4]["axes"], Json({1, 2, 3}));

  // Another value of the dynamic dim: same structure, the shape key follows.
  g->dynamic_dims["batch"] = 5;
  ASSERT_TRUE(validate_graph(*g).is_ok());
  expect_round_trip(*g, "builder batch=5");
}

TEST(SpecWriter, AttentionAndNormAttributes) {
  GraphBuilder b("attn");
  b.io_dtype(DataType::kBFloat16).dynamic("seq", 32);
  TensorRef q = b.tensor("q", {1, 4, "seq", 16});
  TensorRef k = b.tensor("k", {1, 2, "seq", 16});
  TensorRef v = b.tensor("v", {1, 2, "seq", 16});
  b.output(b.sdpa("attn", q, k, v, /*causal=*/true, 0.1));
  StatusOr<Graph> g = b.build();
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  Json j = Json::parse(expect_round_trip(*g, "attn"));
  EXPECT_EQ(j["nodes"][0]["causal"], true);
  EXPECT_EQ(j["nodes"][0]["attn_scale"], 0.1);
  EXPECT_FALSE(j.contains("pin"));  // only written when set

  GraphBuilder n("norm");
  TensorRef x = n.tensor("x", {4, 32, 1, 1}, Layout::kNCHW);
  TensorRef gamma = n.tensor("gamma", {1, 32, 1, 1}, Layout::kNCHW, DataType::kFloat32);
  n.output(n.rms_norm("rms", x, gamma, 3e-6));
  StatusOr<Graph> ng = n.build();
  ASSERT_TRUE(ng.is_ok()) << ng.status().message();
  Json nj = Json::parse(expect_round_trip(*ng, "norm"));
  EXPECT_EQ(nj["nodes"][0]["epsilon"], 3e-6);
}

// conv_dgrad with stride 2: dx is not unique, so the declared (here: larger than the smallest) dims must be
// written for the graph to read back the same.
TEST(SpecWriter, NonUniqueDgradOutputKeepsItsDims) {
  Json s = {{"tensors",
             {{"dy", {{"dims", {2, 16, 5, 5}}}}, {"w", {{"dims", {16, 8, 3, 3}}}}, {"dx", {{"dims", {2, 8, 10, 10}}}}}},
            {"nodes",
             {{{"name", "d"},
               {"op", "conv_dgrad"},
               {"inputs", {"dy", "w"}},
               {"outputs", {"dx"}},
               {"padding", 1},
               {"stride", 2}}}},
            {"outputs", {"dx"}}};
  StatusOr<Graph> g = parse_spec_string(s.dump(), "dgrad.json");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  Json j = Json::parse(expect_round_trip(*g, "dgrad"));
  EXPECT_EQ(j["tensors"]["dx"]["dims"], Json({2, 8, 10, 10}));
}

TEST(SpecWriter, GraphsNoSpecCanExpressAreRefusedByName) {
  StatusOr<Graph> g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/small/rms_norm.json");
  ASSERT_TRUE(g.is_ok());
  Graph bad = *g;
  bad.tensors[0].name = "x\xff";
  EXPECT_ERROR_HAS(graph_to_spec_json(bad).status(), "cannot be written as a spec", "UTF-8");
  EXPECT_EQ(graph_to_spec_json(bad).status().code(), StatusCode::kInvalidArgument);
  bad = *g;
  bad.tensors[1].name = bad.tensors[0].name;
  EXPECT_ERROR_HAS(graph_to_spec_json(bad).status(), "graph 'rms_norm_small'", "tensor 'x' is declared twice");
  bad = *g;
  bad.nodes[0].name.clear();
  EXPECT_ERROR_HAS(graph_to_spec_json(bad).status(), "node 0 has no name");
}

}  // namespace
}  // namespace kiln
