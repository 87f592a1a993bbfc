// Specs: every op parses, validates and infers; every bad-spec kind gets a message naming the file and
// the node, tensor or attribute at fault.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "graph/graph_test_util.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// A one-node spec: tensors (inputs with dims), one node, output "y".
Json one_node(const Json& tensors, const std::string& op, const Json& inputs, const Json& attrs = Json::object()) {
  Json node = {{"name", "n1"}, {"op", op}, {"inputs", inputs}, {"outputs", {"y"}}};
  for (auto it = attrs.begin(); it != attrs.end(); ++it) node[it.key()] = it.value();
  return {{"name", "t"}, {"tensors", tensors}, {"nodes", {node}}, {"outputs", {"y"}}};
}

StatusOr<Graph> parse(const Json& j, const ValidateOptions& o = {}) { return parse_spec_string(j.dump(), "t.json", o); }

std::vector<int64_t> out_shape(const StatusOr<Graph>& g, const std::string& name = "y") {
  if (!g.is_ok()) {
    ADD_FAILURE() << g.status().message();
    return {};
  }
  return g->tensors[g->find_tensor(name)].shape();
}

Json t(std::vector<int64_t> dims, const std::string& dtype = "") {
  Json j = {{"dims", dims}};
  if (!dtype.empty()) j["dtype"] = dtype;
  return j;
}

using V = std::vector<int64_t>;

// A NUL byte ends what the JSON parser reads: the text after it was ignored (found by a hostile trial).
TEST(SpecText, ANulByteIsRefusedWithItsOffset) {
  const std::string good = one_node({{"a", t({2, 3})}}, "relu", {"a"}).dump();
  ASSERT_TRUE(parse_spec_string(good, "t.json").is_ok());
  StatusOr<Graph> g = parse_spec_string(good + std::string(1, '\0') + "junk", "t.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("t.json: a NUL byte at byte " + std::to_string(good.size())), std::string::npos)
      << g.status().message();
}

// ---- every op infers ----

TEST(SpecOps, ConvFprop) {
  Json s = one_node({{"x", t({2, 8, 9, 9})}, {"w", t({16, 8, 3, 3})}}, "conv_fprop", {"x", "w"},
                    {{"padding", {1, 1}}, {"stride", {2, 2}}});
  EXPECT_EQ(out_shape(parse(s)), (V{2, 16, 5, 5}));
  s = one_node({{"x", t({2, 8, 9, 9})}, {"w", t({16, 8, 3, 3})}}, "conv_fprop", {"x", "w"},
               {{"dilation", 2}});  // one value for every spatial dim
  EXPECT_EQ(out_shape(parse(s)), (V{2, 16, 5, 5}));
  s = one_node({{"x", t({2, 8, 9, 9})}, {"w", t({16, 2, 3, 3})}}, "conv_fprop", {"x", "w"},
               {{"groups", 4}, {"pre_padding", {1, 0}}, {"post_padding", {1, 0}}});
  EXPECT_EQ(out_shape(parse(s)), (V{2, 16, 9, 7}));
  s = one_node({{"x", t({2, 8, 4, 9, 9})}, {"w", t({16, 8, 1, 3, 3})}}, "conv_fprop", {"x", "w"});
  EXPECT_EQ(out_shape(parse(s)), (V{2, 16, 4, 7, 7}));
}

TEST(SpecOps, ConvDgradAndWgrad) {
  Json s = one_node({{"dy", t({2, 16, 5, 5})}, {"w", t({16, 8, 3, 3})}}, "conv_dgrad", {"dy", "w"},
                    {{"padding", 1}, {"stride", 2}});
  EXPECT_EQ(out_shape(parse(s)), (V{2, 8, 9, 9}));
  s["tensors"]["y"] = t({2, 8, 10, 10});  // also maps onto 5x5 with stride 2
  EXPECT_EQ(out_shape(parse(s)), (V{2, 8, 10, 10}));
  s["tensors"]["y"] = t({2, 8, 12, 12});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: node 'n1' (conv_dgrad): output 'y': spatial dim 2 of 12",
                   "input 'dy' has 5");
  s = one_node({{"x", t({2, 8, 9, 9})}, {"dy", t({2, 16, 9, 9})}}, "conv_wgrad", {"x", "dy"}, {{"padding", 1}});
  EXPECT_EQ(out_shape(parse(s)), (V{16, 8, 3, 3}));
  s = one_node({{"x", t({2, 8, 9, 9})}, {"dy", t({2, 16, 5, 5})}, {"y", t({16, 8, 3, 3})}}, "conv_wgrad", {"x", "dy"},
               {{"padding", 1}, {"stride", 2}});
  EXPECT_EQ(out_shape(parse(s)), (V{16, 8, 3, 3}));
  s["tensors"]["dy"] = t({3, 16, 5, 5});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (conv_wgrad): input 'dy': batch 3 differs from input 'x' batch 2");
}

TEST(SpecOps, MatmulBroadcastsBatch) {
  Json s = one_node({{"a", t({4, 1, 16, 32})}, {"b", t({1, 3, 32, 8})}}, "matmul", {"a", "b"});
  EXPECT_EQ(out_shape(parse(s)), (V{4, 3, 16, 8}));
  s = one_node({{"a", t({16, 32})}, {"b", t({5, 32, 8})}}, "matmul", {"a", "b"});
  EXPECT_EQ(out_shape(parse(s)), (V{5, 16, 8}));
}

// The abs mode (added through docs/contributing.md "Adding an op or a pointwise mode"): parsed by its name,
// inferred as a unary op, written back under the same name.
TEST(SpecOps, AbsParsesInfersAndWritesBack) {
  Json s = one_node({{"x", t({2, 3, 4})}}, "abs", {"x"});
  StatusOr<Graph> g = parse(s);
  EXPECT_EQ(out_shape(g), (V{2, 3, 4}));
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->nodes[0].op, OpKind::kPointwise);
  EXPECT_EQ(g->nodes[0].pointwise.mode, PointwiseMode::kAbs);
  auto text = graph_to_spec_json(*g);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(Json::parse(*text)["nodes"][0]["op"], "abs");
  EXPECT_ERROR_HAS(parse(one_node({{"a", t({2})}, {"b", t({2})}}, "abs", {"a", "b"})).status(), "node 'n1' (abs)",
                   "2 inputs, expected 1");
}

TEST(SpecOps, PointwiseAll) {
  for (const char* op :
       {"relu", "gelu_erf", "gelu", "gelu_tanh", "silu", "swish", "sigmoid", "tanh", "exp", "identity"}) {
    Json s = one_node({{"x", t({2, 3, 4})}}, op, {"x"});
    EXPECT_EQ(out_shape(parse(s)), (V{2, 3, 4})) << op;
  }
  for (const char* op : {"add", "sub", "mul", "div", "min", "max"}) {
    Json s = one_node({{"a", t({2, 1, 4})}, {"b", t({3, 1})}}, op, {"a", "b"});
    EXPECT_EQ(out_shape(parse(s)), (V{2, 3, 4})) << op;
  }
  Json s = one_node({{"x", t({2, 3, 4})}, {"b", t({1, 3, 1})}}, "bias_add", {"x", "b"});
  EXPECT_EQ(out_shape(parse(s)), (V{2, 3, 4}));
  s = one_node({{"x", t({2, 3, 4})}, {"s", {{"value", 0.5}}}}, "scale", {"x", "s"});
  StatusOr<Graph> g = parse(s);
  EXPECT_EQ(out_shape(g), (V{2, 3, 4}));
  EXPECT_TRUE(g->tensors[g->find_tensor("s")].by_value);
  EXPECT_EQ(g->tensors[g->find_tensor("s")].value, 0.5);
}

TEST(SpecOps, Reductions) {
  for (const char* op : {"reduce_sum", "reduce_max", "reduce_min", "reduce_amax"}) {
    Json s = one_node({{"x", t({2, 3, 4})}}, op, {"x"}, {{"axes", {-1, 0}}});
    StatusOr<Graph> g = parse(s);
    EXPECT_EQ(out_shape(g), (V{1, 3, 1})) << op;
    EXPECT_EQ(g->nodes[0].reduction.axes, (std::vector<int>{0, 2}));
  }
  Json s = one_node({{"x", t({2, 3, 4})}}, "reduce_amax", {"x"});  // every axis
  EXPECT_EQ(out_shape(parse(s)), (V{1, 1, 1}));
}

TEST(SpecOps, Norms) {
  Json s = one_node({{"x", t({8, 32, 1, 1})}, {"g", t({1, 32, 1, 1}, "fp32")}, {"b", t({1, 32, 1, 1}, "fp32")}},
                    "layer_norm", {"x", "g", "b"}, {{"epsilon", 1e-6}});
  StatusOr<Graph> g = parse(s);
  EXPECT_EQ(out_shape(g), (V{8, 32, 1, 1}));
  EXPECT_EQ(g->nodes[0].norm.epsilon, 1e-6);
  s = one_node({{"x", t({8, 32})}, {"g", t({1, 32})}}, "rms_norm", {"x", "g"});
  EXPECT_EQ(out_shape(parse(s)), (V{8, 32}));
}

TEST(SpecOps, Sdpa) {
  Json s = one_node({{"q", t({2, 8, 128, 64})}, {"k", t({2, 2, 256, 64})}, {"v", t({2, 2, 256, 32})}}, "sdpa",
                    {"q", "k", "v"}, {{"causal", true}, {"attn_scale", 0.125}});
  s["io_dtype"] = "bf16";
  StatusOr<Graph> g = parse(s, ValidateOptions{90});
  EXPECT_EQ(out_shape(g), (V{2, 8, 128, 32}));
  EXPECT_TRUE(g->nodes[0].sdpa.causal);
  EXPECT_EQ(*g->nodes[0].sdpa.attn_scale, 0.125);
}

TEST(SpecOps, SdpaBandParsesAndWritesBack) {
  Json s = one_node({{"q", t({2, 8, 16, 64})}, {"k", t({2, 2, 256, 64})}, {"v", t({2, 2, 256, 64})}}, "sdpa",
                    {"q", "k", "v"}, {{"causal", true}, {"left_bound", 128}, {"diagonal_alignment", "bottom_right"}});
  s["io_dtype"] = "bf16";
  StatusOr<Graph> g = parse(s, ValidateOptions{90});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const SdpaAttrs& a = g->nodes[0].sdpa;
  EXPECT_TRUE(a.causal);
  EXPECT_EQ(a.left_bound, 128);
  EXPECT_FALSE(a.right_bound.has_value());
  EXPECT_EQ(a.alignment, DiagonalAlignment::kBottomRight);
  EXPECT_EQ(a.effective_right_bound(), 0);
  auto text = graph_to_spec_json(*g);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  auto back = parse_spec_string(*text, "back.json");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->nodes[0].sdpa.left_bound, 128);
  EXPECT_EQ(back->nodes[0].sdpa.alignment, DiagonalAlignment::kBottomRight);
  s["nodes"][0].erase("causal");
  s["nodes"][0]["right_bound"] = 3;
  g = parse(s, ValidateOptions{90});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->nodes[0].sdpa.effective_right_bound(), 3);
}

// An sdpa's softmax statistics: a second output, fp32 [B, H, Sq, 1]; it writes back, signs apart from the node
// without it, and each wrong use is refused naming the output.
TEST(SpecOps, SdpaStatsOutput) {
  Json s = one_node({{"q", t({2, 8, 128, 64})}, {"k", t({2, 2, 256, 64})}, {"v", t({2, 2, 256, 64})}}, "sdpa",
                    {"q", "k", "v"}, {{"causal", true}});
  s["io_dtype"] = "bf16";
  StatusOr<Graph> plain = parse(s);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  s["nodes"][0]["outputs"] = {"y", "lse"};
  s["tensors"]["lse"] = {{"dtype", "float32"}};
  s["outputs"] = {"y", "lse"};
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(out_shape(g), (V{2, 8, 128, 64}));
  EXPECT_EQ(out_shape(g, "lse"), (V{2, 8, 128, 1}));
  EXPECT_EQ(g->dtype_of(g->find_tensor("lse")), DataType::kFloat32);
  auto text = graph_to_spec_json(*g);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  auto back = parse_spec_string(*text, "back.json");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->nodes[0].outputs.size(), 2u);
  auto sig = compute_signature(*g), sig_back = compute_signature(*back), sig_plain = compute_signature(*plain);
  ASSERT_TRUE(sig.is_ok() && sig_back.is_ok() && sig_plain.is_ok());
  EXPECT_EQ(sig->structure, sig_back->structure);
  EXPECT_NE(sig->structure, sig_plain->structure);
  EXPECT_TRUE(std::regex_search(sig->canonical, std::regex("out=t[0-9]+,t[0-9]+\n"))) << sig->canonical;
  EXPECT_FALSE(std::regex_search(sig_plain->canonical, std::regex("out=t[0-9]+,"))) << sig_plain->canonical;

  Json bad = s;
  bad["tensors"]["lse"] = {{"dtype", "bf16"}};
  EXPECT_ERROR_HAS(parse(bad).status(), "node 'n1' (sdpa): output 'lse': dtype bf16", "float32 only");
  bad = s;
  bad["nodes"][0]["outputs"] = {"y", "lse", "z"};
  bad["outputs"] = {"y", "lse", "z"};
  EXPECT_ERROR_HAS(parse(bad).status(), "node 'n1' (sdpa): 3 outputs, expected 1 or 2");
  bad = s;
  bad["outputs"] = {"y"};  // nobody reads the statistics
  EXPECT_ERROR_HAS(parse(bad).status(), "output 'lse' is dangling");
  bad = s;
  bad["nodes"][0]["outputs"] = {"y", "y"};
  bad["outputs"] = {"y"};
  EXPECT_ERROR_HAS(parse(bad).status(), "tensor 'y': written by node 'n1' and by node 'n1' (twice)");
  Json relu = one_node({{"x", t({4, 4})}}, "relu", {"x"});
  relu["nodes"][0]["outputs"] = {"y", "y2"};
  relu["outputs"] = {"y", "y2"};
  EXPECT_ERROR_HAS(parse(relu).status(), "node 'n1' (relu): 2 outputs, expected 1");
}

// A graph written back as a spec and read again signs as before; its canonical text matches `canonical` (the
// node's op and its outputs written together).
void expect_round_trip_signs_alike(const Graph& g, const std::string& canonical) {
  auto text = graph_to_spec_json(g);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  auto back = parse_spec_string(*text, "back.json");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  auto sig = compute_signature(g), sig_back = compute_signature(*back);
  ASSERT_TRUE(sig.is_ok() && sig_back.is_ok());
  EXPECT_EQ(sig->structure, sig_back->structure);
  EXPECT_TRUE(std::regex_search(sig->canonical, std::regex(canonical))) << sig->canonical;
}

// The backward pass: q, k, v, o, do, stats (, bias) -> dq, dk, dv, shaped as q, k, v; what it reads is checked
// against the forward it differentiates, and what cuDNN cannot run is refused (NotSupported).
TEST(SpecOps, SdpaBackward) {
  const Json tensors = {{"q", t({2, 8, 128, 64})}, {"k", t({2, 2, 256, 64})},  {"v", t({2, 2, 256, 32})},
                        {"o", t({2, 8, 128, 32})}, {"do", t({2, 8, 128, 32})}, {"stats", t({2, 8, 128, 1}, "float32")}};
  Json s = one_node(tensors, "sdpa_backward", {"q", "k", "v", "o", "do", "stats"}, {{"causal", true}});
  s["io_dtype"] = "bf16";
  s["nodes"][0]["outputs"] = {"dq", "dk", "dv"};
  s["outputs"] = {"dq", "dk", "dv"};
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(out_shape(g, "dq"), (V{2, 8, 128, 64}));
  EXPECT_EQ(out_shape(g, "dk"), (V{2, 2, 256, 64}));
  EXPECT_EQ(out_shape(g, "dv"), (V{2, 2, 256, 32}));
  EXPECT_EQ(g->nodes[0].op, OpKind::kSdpaBackward);
  expect_round_trip_signs_alike(*g, "sdpa_backward .*out=t[0-9]+,t[0-9]+,t[0-9]+\n");

  struct Bad {
    std::function<void(Json&)> edit;
    const char* message;
    StatusCode code;
  };
  const std::vector<Bad> bad = {
      {[](Json& j) { j["tensors"]["stats"]["dtype"] = "bf16"; }, "input 'stats': dtype bf16",
       StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["stats"]["dims"] = {2, 8, 128, 2};
       },
       "input 'stats': dims [2,8,128,2] must be", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["o"]["dims"] = {2, 8, 128, 64};
       },
       "input 'o': dims [2,8,128,64] must be o's", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["do"]["dims"] = {2, 8, 64, 32};
       },
       "input 'do': dims [2,8,64,32] must be o's", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["nodes"][0]["outputs"] = {"dq", "dk"};
         j["outputs"] = {"dq", "dk"};
       },
       "2 outputs, expected 3 (dq, dk, dv)", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do"};
       },
       "5 inputs, expected 6 or 7", StatusCode::kInvalidArgument},
      {[](Json& j) { j["nodes"][0]["paged_kv"] = true; }, "paged caches serve decode", StatusCode::kInvalidArgument},
      {[](Json& j) {  // a padding mask's lengths are checked as sdpa's
         j["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
         j["tensors"]["lkv"] = t({2, 1, 1, 1}, "fp16");
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "lq", "lkv"};
         j["nodes"][0]["padding_mask"] = true;
       },
       "input 'lkv': dtype fp16 is not supported for a padding mask's lengths (int32 only)",
       StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["lq"] = t({1, 1, 1, 1}, "int32");
         j["tensors"]["lkv"] = t({2, 1, 1, 1}, "int32");
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "lq", "lkv"};
         j["nodes"][0]["padding_mask"] = true;
       },
       "input 'lq': dims [1,1,1,1] must be [B, 1, 1, 1] = [2, 1, 1, 1]", StatusCode::kInvalidArgument},
      {[](Json& j) {  // the lengths without the attribute: the count of inputs says what is expected
         j["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
         j["tensors"]["lkv"] = t({2, 1, 1, 1}, "int32");
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "lq", "lkv"};
       },
       "8 inputs, expected 6 or 7", StatusCode::kInvalidArgument},
      {[](Json& j) {  // a fault to fix comes before what is not supported
         j["nodes"][0]["padding_mask"] = true;
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "q", "q"};
         j["tensors"]["stats"]["dtype"] = "bf16";
       },
       "input 'stats': dtype bf16", StatusCode::kInvalidArgument},
      {[](Json& j) { j["nodes"][0]["attn_scale"] = 1e-320; }, "attribute 'attn_scale': ", StatusCode::kInvalidArgument},
      {[](Json& j) { j["nodes"][0]["attn_scale"] = 1e300; }, "must be positive and a normal fp32 value",
       StatusCode::kInvalidArgument},
  };
  // With a padding mask (its two lengths last) the backward pass validates, the lengths its last inputs.
  Json padded = s;
  padded["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
  padded["tensors"]["lkv"] = t({2, 1, 1, 1}, "int32");
  padded["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "lq", "lkv"};
  padded["nodes"][0]["padding_mask"] = true;
  EXPECT_TRUE(parse(padded).is_ok()) << parse(padded).status().to_string();
  // Head dims past 128 run backward on SM 9.x only (cuDNN Frontend 1.32): refused for an SM 8.0 target, kept for 9.0.
  Json wide = s;
  for (const char* n : {"q", "k", "v", "o", "do"}) wide["tensors"][n]["dims"][3] = 192;
  EXPECT_TRUE(parse(wide, ValidateOptions{90}).is_ok()) << parse(wide, ValidateOptions{90}).status().to_string();
  Status sm80 = parse(wide, ValidateOptions{80}).status();
  EXPECT_EQ(sm80.code(), StatusCode::kNotSupported) << sm80.to_string();
  EXPECT_ERROR_HAS(sm80, "head dims up to 128 off SM 9.x (q's 192, v's 192; target SM 8.0)");
  for (const Bad& b : bad) {
    Json j = s;
    b.edit(j);
    Status st = parse(j).status();
    EXPECT_EQ(st.code(), b.code) << st.to_string();
    EXPECT_ERROR_HAS(st, "node 'n1' (sdpa_backward)", b.message);
  }
}

// The statistics with a padding mask or over paged caches validate (a padded query row's are -infinity); their
// dtype is still checked.
TEST(SpecOps, SdpaStatsWithAPaddingMask) {
  Json s = one_node({{"q", t({2, 2, 16, 64})},
                     {"k", t({2, 2, 32, 64})},
                     {"v", t({2, 2, 32, 64})},
                     {"lq", t({2, 1, 1, 1}, "int32")},
                     {"lkv", t({2, 1, 1, 1}, "int32")}},
                    "sdpa", {"q", "k", "v", "lq", "lkv"}, {{"padding_mask", true}});
  s["io_dtype"] = "bf16";
  s["nodes"][0]["outputs"] = {"y", "lse"};
  s["tensors"]["lse"] = {{"dtype", "float32"}};
  s["outputs"] = {"y", "lse"};
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g.value().tensors[static_cast<size_t>(g.value().nodes[0].outputs[1])].dims.size(), 4u);
  s["tensors"]["lse"] = {{"dtype", "fp16"}};
  Status st = parse(s).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_ERROR_HAS(st, "output 'lse': dtype fp16");
}

// ---- bad specs ----

TEST(SpecErrors, ConvRankAndChannels) {
  Json s = one_node({{"x", t({2, 8, 9, 9})}, {"w", t({16, 8, 3})}}, "conv_fprop", {"x", "w"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: node 'n1' (conv_fprop): input 'w': rank 3, expected 4");
  s = one_node({{"x", t({2, 8, 9, 9})}, {"w", t({16, 4, 3, 3})}}, "conv_fprop", {"x", "w"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (conv_fprop): input 'w': dim 1 is 4, expected 8");
  s = one_node({{"x", t({2, 6, 9, 9})}, {"w", t({16, 2, 3, 3})}}, "conv_fprop", {"x", "w"}, {{"groups", 4}});
  EXPECT_ERROR_HAS(parse(s).status(), "input 'x': channels 6 not divisible by attribute 'groups' 4");
  s = one_node({{"x", t({2, 8, 2, 2})}, {"w", t({16, 8, 3, 3})}}, "conv_fprop", {"x", "w"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (conv_fprop): input 'w': filter extent 3", "does not fit");
}

TEST(SpecErrors, ConvAttributes) {
  Json x = {{"x", t({2, 8, 9, 9})}, {"w", t({16, 8, 3, 3})}};
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"stride", {1, 1, 1}}})).status(),
                   "node 'n1' (conv_fprop): attribute 'stride': 3 entries, expected 2");
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"stride", 0}})).status(),
                   "attribute 'stride': [0,0] has a value below 1");
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"padding", -1}})).status(), "attribute 'pre_padding'",
                   "below 0");
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"groups", 0}})).status(), "attribute 'groups'");
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"padding", 1}, {"pre_padding", 1}})).status(),
                   "t.json: node 'n1' (conv_fprop): attribute 'padding': give 'padding' or");
  EXPECT_ERROR_HAS(
      parse(one_node(x, "conv_fprop", {"x", "w"}, {{"stride", "2"}})).status(),
      "node 'n1' (conv_fprop): attribute 'stride': expected an integer or an array of integers, got a string");
  EXPECT_ERROR_HAS(parse(one_node(x, "conv_fprop", {"x", "w"}, {{"epsilon", 1e-5}})).status(),
                   "node 'n1' (conv_fprop): attribute 'epsilon' does not apply to this op");
}

TEST(SpecErrors, MatmulShapes) {
  Json s = one_node({{"a", t({1, 16, 32})}, {"b", t({1, 16, 8})}}, "matmul", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul): input 'b': inner dims differ", "K=32", "K=16");
  s = one_node({{"a", t({2, 16, 32})}, {"b", t({3, 32, 8})}}, "matmul", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul)", "do not broadcast");
  s = one_node({{"a", t({32})}, {"b", t({32, 8})}}, "matmul", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul): input 'a': rank 1, expected 2 to 8");
}

TEST(SpecErrors, Broadcast) {
  Json s = one_node({{"a", t({2, 3})}, {"b", t({2, 4})}}, "add", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (add): input 'a' [2,3] and input 'b' [2,4] do not broadcast");
  s = one_node({{"x", t({2, 3, 4})}, {"b", t({3, 1})}}, "bias_add", {"x", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (bias_add): input 'b': rank 2, expected 3");
  s = one_node({{"x", t({2, 3, 4})}, {"b", t({1, 5, 1})}}, "bias_add", {"x", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (bias_add): input 'b': dim 1 is 5, expected 1 or 3");
  s = one_node({{"x", t({2, 3})}, {"s", t({2})}}, "scale", {"x", "s"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (scale): input 's': a scale must be a scalar");
}

TEST(SpecErrors, ReductionAxes) {
  Json s = one_node({{"x", t({2, 3})}}, "reduce_sum", {"x"}, {{"axes", {2}}});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (reduce_sum): attribute 'axes': axis 2 is out of range", "rank 2");
  s = one_node({{"x", t({2, 3})}}, "reduce_sum", {"x"}, {{"axes", {1, -1}}});
  EXPECT_ERROR_HAS(parse(s).status(), "attribute 'axes': axis 1 is listed twice");
}

TEST(SpecErrors, NormShapesAndEpsilon) {
  Json s = one_node({{"x", t({8, 32, 1, 1})}, {"g", t({1, 16, 1, 1})}, {"b", t({1, 32, 1, 1})}}, "layer_norm",
                    {"x", "g", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (layer_norm): input 'g': dims [1,16,1,1], expected [1,32,1,1]");
  s = one_node({{"x", t({8, 32})}, {"g", t({1, 32})}}, "rms_norm", {"x", "g"}, {{"epsilon", 0}});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (rms_norm): attribute 'epsilon'", "must be positive");
  // A bias would be dropped by the lowering and refused by the references: refused at validation.
  s = one_node({{"x", t({8, 32})}, {"g", t({1, 32})}, {"b", t({1, 32})}}, "rms_norm", {"x", "g", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (rms_norm): input 'b'", "rms_norm's bias is not supported yet");
  s = one_node({{"x", t({8, 32}, "int8")}, {"g", t({1, 32})}}, "rms_norm", {"x", "g"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (rms_norm): input 'x': dtype int8 is not supported");
}

// FP8 attention: q, k, v fp8_e4m3, six fp32 [1, 1, 1, 1] scales; o (fp8), amax_o (fp32 [1, 1, 1, 1]) and
// optionally the statistics. Each fault the author can fix exits 2 naming its tensor or attribute; what cuDNN
// cannot run on SM 9.x is NotSupported.
// A valid sdpa_fp8 spec: causal, 8 query heads over 2 key heads, o "y" and "amax_o".
Json sdpa_fp8_spec() {
  Json tensors = {{"q", t({2, 8, 128, 64})},
                  {"k", t({2, 2, 256, 64})},
                  {"v", t({2, 2, 256, 64})},
                  {"y", {{"dtype", "fp8_e4m3"}}},
                  {"amax_o", {{"dtype", "float32"}}}};
  const char* scales[] = {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"};
  Json inputs = {"q", "k", "v"};
  for (const char* n : scales) {
    tensors[n] = t({1, 1, 1, 1}, "float32");
    inputs.push_back(n);
  }
  Json s = one_node(tensors, "sdpa_fp8", inputs, {{"causal", true}});
  s["io_dtype"] = "fp8_e4m3";
  s["nodes"][0]["outputs"] = {"y", "amax_o"};
  s["outputs"] = {"y", "amax_o"};
  return s;
}

TEST(SpecOps, SdpaFp8) {
  const Json s = sdpa_fp8_spec();
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->nodes[0].op, OpKind::kSdpaFp8);
  EXPECT_EQ(out_shape(g), (V{2, 8, 128, 64}));
  EXPECT_EQ(out_shape(g, "amax_o"), (V{1, 1, 1, 1}));
  expect_round_trip_signs_alike(*g, "sdpa_fp8 .*causal=1.*out=t[0-9]+,t[0-9]+\n");
  Json stats = s;  // with the statistics, a third output
  stats["nodes"][0]["outputs"] = {"y", "amax_o", "lse"};
  stats["tensors"]["lse"] = {{"dtype", "float32"}};
  stats["outputs"] = {"y", "amax_o", "lse"};
  StatusOr<Graph> gs = parse(stats);
  ASSERT_TRUE(gs.is_ok()) << gs.status().to_string();
  EXPECT_EQ(out_shape(gs, "lse"), (V{2, 8, 128, 1}));
  Json padded = s;  // with a padding mask, its two lengths after the scales
  padded["nodes"][0]["padding_mask"] = true;
  padded["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
  padded["tensors"]["lkv"] = t({2, 1, 1, 1}, "int32");
  padded["nodes"][0]["inputs"].push_back("lq");
  padded["nodes"][0]["inputs"].push_back("lkv");
  StatusOr<Graph> gp = parse(padded);
  ASSERT_TRUE(gp.is_ok()) << gp.status().to_string();
  EXPECT_EQ(sdpa_inputs(gp->nodes[0]).seq_len_q, 9);
  EXPECT_EQ(sdpa_inputs(gp->nodes[0]).seq_len_kv, 10);

  struct Bad {
    std::function<void(Json&)> edit;
    StatusCode code;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {[](Json& j) { j["io_dtype"] = "bf16"; }, StatusCode::kInvalidArgument,
       "node 'n1' (sdpa_fp8): input 'q': dtype bf16 is not supported by sdpa_fp8 (fp8_e4m3 only"},
      {[](Json& j) {
         j["tensors"]["scale_s"] = t({1, 1, 1, 1}, "bf16");
       },
       StatusCode::kInvalidArgument, "input 'scale_s': dtype bf16 is not supported for an FP8 scale (float32 only)"},
      {[](Json& j) {
         j["tensors"]["descale_v"] = t({1, 1, 1, 2}, "float32");
       },
       StatusCode::kInvalidArgument, "input 'descale_v': dims [1,1,1,2] must be [1, 1, 1, 1] (one scale)"},
      {[](Json& j) {
         j["tensors"]["y"] = {{"dtype", "bf16"}};
       },
       StatusCode::kInvalidArgument, "output 'y': dtype bf16 is not supported for sdpa_fp8's o"},
      {[](Json& j) {
         j["tensors"]["amax_o"] = {{"dtype", "fp16"}};
       },
       StatusCode::kInvalidArgument, "output 'amax_o': dtype fp16 is not supported for amax_o (float32 only"},
      {[](Json& j) { j["nodes"][0]["inputs"].erase(8); }, StatusCode::kInvalidArgument,
       "node 'n1' (sdpa_fp8): 8 inputs, expected 9"},
      {[](Json& j) {
         j["nodes"][0]["outputs"] = {"y"};
         j["outputs"] = {"y"};
       },
       StatusCode::kInvalidArgument, "node 'n1' (sdpa_fp8): 1 output, expected 2 or 3"},
      {[](Json& j) { j["nodes"][0]["padding_mask"] = true; }, StatusCode::kInvalidArgument,
       "node 'n1' (sdpa_fp8): 9 inputs, expected 11"},
      {[](Json& j) {  // the lengths checked as sdpa's
         j["nodes"][0]["padding_mask"] = true;
         j["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
         j["tensors"]["lkv"] = t({2, 1, 1, 1}, "float32");
         j["nodes"][0]["inputs"].push_back("lq");
         j["nodes"][0]["inputs"].push_back("lkv");
       },
       StatusCode::kInvalidArgument, "input 'lkv': dtype fp32 is not supported for a padding mask's lengths"},
      {[](Json& j) { j["nodes"][0]["paged_kv"] = true; }, StatusCode::kInvalidArgument,
       "attribute 'paged_kv': sdpa_fp8 takes q, k, v, the six scales and a padding mask's lengths only"},
      {[](Json& j) {
         j["tensors"]["k"] = t({2, 2, 256, 32});
       },
       StatusCode::kInvalidArgument, "input 'k': head dim 32 differs from input 'q' head dim 64"},
      {[](Json& j) { j["nodes"][0]["diagonal_alignment"] = "bottom_right"; }, StatusCode::kNotSupported,
       "cuDNN's FP8 attention aligns the diagonal bottom-right only on SM 10.x"},
      {[](Json& j) {
         for (const char* n : {"q", "k", "v"}) j["tensors"][n]["dims"][3] = 40;
       },
       StatusCode::kNotSupported, "cuDNN's FP8 attention takes head dims that are multiples of 16 (input 'q''s is 40)"},
  };
  for (const Bad& b : bad) {
    Json j = s;
    b.edit(j);
    const Status st = parse(j).status();
    EXPECT_EQ(st.code(), b.code) << b.message << ": " << st.to_string();
    EXPECT_ERROR_HAS(st, b.message.c_str());
  }
}

// What cuDNN runs depends on the target: SM 9.0 at least; SM 10.x runs a bottom-right band (refused for SM 9.x and
// without a target) but takes head dims only up to 128 (or q's 192 over v's 128). A by-value scale is refused as
// such, before its rank.
TEST(SpecErrors, SdpaFp8ByTarget) {
  const Json s = sdpa_fp8_spec();
  Status target = parse(s, ValidateOptions{80}).status();
  EXPECT_EQ(target.code(), StatusCode::kNotSupported);
  EXPECT_ERROR_HAS(target, "cuDNN's FP8 attention needs SM 9.0 or newer, target SM 8.0");
  Json br = s;
  br["nodes"][0]["diagonal_alignment"] = "bottom_right";
  EXPECT_TRUE(parse(br, ValidateOptions{100}).is_ok());
  EXPECT_ERROR_HAS(parse(br, ValidateOptions{90}).status(), "bottom-right only on SM 10.x and newer (target SM 9.0)");
  EXPECT_ERROR_HAS(parse(br).status(), "(no target given (SM 9.x assumed))");
  Json wide = s;
  for (const char* n : {"q", "k", "v"}) wide["tensors"][n]["dims"][3] = 256;
  EXPECT_TRUE(parse(wide, ValidateOptions{90}).is_ok());
  const Status wide100 = parse(wide, ValidateOptions{100}).status();
  EXPECT_EQ(wide100.code(), StatusCode::kNotSupported);
  EXPECT_ERROR_HAS(wide100, "head dims up to 128 (or q's 192 over v's 128) on target SM 10.0 (q's 256, v's 256)");
  for (const char* n : {"q", "k"}) wide["tensors"][n]["dims"][3] = 192;
  wide["tensors"]["v"]["dims"][3] = 128;
  EXPECT_TRUE(parse(wide, ValidateOptions{100}).is_ok());
  Json scalar = s;
  scalar["tensors"]["descale_q"] = {{"value", 1.0}, {"dtype", "float32"}};
  EXPECT_ERROR_HAS(parse(scalar).status(),
                   "input 'descale_q': an FP8 scale is read on the device (a tensor), not passed by value");
  // A scale a node computes is not the caller's: refused by name.
  Json computed = s;
  computed["tensors"]["raw"] = t({1, 1, 1, 1}, "float32");
  computed["nodes"].insert(computed["nodes"].begin(),
                           Json{{"name", "n0"}, {"op", "relu"}, {"inputs", {"raw"}}, {"outputs", {"scale_o"}}});
  computed["tensors"]["scale_o"] = {{"dtype", "float32"}};
  EXPECT_ERROR_HAS(parse(computed).status(), "input 'scale_o': an FP8 scale must be a graph input");
}

// FP8 attention's backward pass: q, k, v, o, do fp8_e4m3, the statistics fp32, twelve fp32 [1, 1, 1, 1] scales;
// dq, dk, dv fp8_e4m3 and four fp32 amax. Faults the author can fix exit 2 naming the tensor or attribute; what cuDNN
// cannot run on SM 9.x (head dims but 128, a bottom-right diagonal, dropout) is NotSupported.
Json sdpa_fp8_backward_spec() {
  Json tensors = {{"q", t({2, 8, 128, 128})}, {"k", t({2, 2, 256, 128})},  {"v", t({2, 2, 256, 128})},
                  {"o", t({2, 8, 128, 128})}, {"do", t({2, 8, 128, 128})}, {"lse", t({2, 8, 128, 1}, "float32")}};
  const char* scales[] = {"descale_q",  "descale_k", "descale_v", "descale_o", "descale_do", "descale_s",
                          "descale_dp", "scale_s",   "scale_dq",  "scale_dk",  "scale_dv",   "scale_dp"};
  Json inputs = {"q", "k", "v", "o", "do", "lse"};
  for (const char* n : scales) {
    tensors[n] = t({1, 1, 1, 1}, "float32");
    inputs.push_back(n);
  }
  const Json outputs = {"dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"};
  for (const char* n : {"amax_dq", "amax_dk", "amax_dv", "amax_dp"}) tensors[n] = {{"dtype", "float32"}};
  Json s = one_node(tensors, "sdpa_fp8_backward", inputs, {{"causal", true}});
  s["io_dtype"] = "fp8_e4m3";
  s["nodes"][0]["outputs"] = outputs;
  s["outputs"] = outputs;
  return s;
}

TEST(SpecOps, SdpaFp8Backward) {
  const Json s = sdpa_fp8_backward_spec();
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->nodes[0].op, OpKind::kSdpaFp8Backward);
  EXPECT_EQ(out_shape(g, "dq"), (V{2, 8, 128, 128}));
  EXPECT_EQ(out_shape(g, "dk"), (V{2, 2, 256, 128}));
  EXPECT_EQ(out_shape(g, "amax_dp"), (V{1, 1, 1, 1}));
  EXPECT_EQ(g->dtype_of(g->find_tensor("dv")), DataType::kFp8E4M3);
  expect_round_trip_signs_alike(*g, "sdpa_fp8_backward .*causal=1.*out=t[0-9]+(,t[0-9]+){6}\n");
  Json padded = s;  // with a padding mask, its two lengths after the scales
  padded["nodes"][0]["padding_mask"] = true;
  padded["tensors"]["lq"] = t({2, 1, 1, 1}, "int32");
  padded["tensors"]["lkv"] = t({2, 1, 1, 1}, "int32");
  padded["nodes"][0]["inputs"].push_back("lq");
  padded["nodes"][0]["inputs"].push_back("lkv");
  StatusOr<Graph> gp = parse(padded);
  ASSERT_TRUE(gp.is_ok()) << gp.status().to_string();
  EXPECT_EQ(sdpa_inputs(gp->nodes[0]).seq_len_q, 18);
  EXPECT_EQ(sdpa_inputs(gp->nodes[0]).seq_len_kv, 19);

  struct Bad {
    std::function<void(Json&)> edit;
    StatusCode code;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {[](Json& j) {
         j["tensors"]["do"] = t({2, 8, 128, 128}, "bf16");
       },
       StatusCode::kInvalidArgument,
       "input 'do': dtype bf16 is not supported by sdpa_fp8_backward (fp8_e4m3 only: q, k, v, o and do alike)"},
      {[](Json& j) {
         j["tensors"]["o"] = t({2, 8, 64, 128});
       },
       StatusCode::kInvalidArgument, "input 'o': dims [2,8,64,128] must be o's [B, H, Sq, Dv]"},
      {[](Json& j) {
         j["tensors"]["lse"] = t({2, 8, 128, 1}, "bf16");
       },
       StatusCode::kInvalidArgument,
       "input 'lse': dtype bf16 is not supported for the softmax statistics (float32 only)"},
      {[](Json& j) {
         j["tensors"]["scale_dp"] = t({1, 1, 1, 2}, "float32");
       },
       StatusCode::kInvalidArgument, "input 'scale_dp': dims [1,1,1,2] must be [1, 1, 1, 1] (one scale)"},
      {[](Json& j) {
         j["tensors"]["descale_dp"] = {{"value", 1.0}, {"dtype", "float32"}};
       },
       StatusCode::kInvalidArgument,
       "input 'descale_dp': an FP8 scale is read on the device (a tensor), not passed by value"},
      {[](Json& j) {
         j["tensors"]["dk"] = {{"dtype", "fp8_e5m2"}};
       },
       StatusCode::kInvalidArgument,
       "output 'dk': dtype fp8_e5m2 is not supported for sdpa_fp8_backward's gradients (fp8_e4m3 only"},
      {[](Json& j) {
         j["tensors"]["amax_dp"] = {{"dtype", "fp16"}};
       },
       StatusCode::kInvalidArgument, "output 'amax_dp': dtype fp16 is not supported for an amax (float32 only"},
      {[](Json& j) { j["nodes"][0]["inputs"].erase(17); }, StatusCode::kInvalidArgument,
       "node 'n1' (sdpa_fp8_backward): 17 inputs, expected 18 (q, k, v, o, do, stats, descale_q"},
      {[](Json& j) {
         j["nodes"][0]["outputs"].erase(6);
         j["outputs"].erase(6);
       },
       StatusCode::kInvalidArgument,
       "node 'n1' (sdpa_fp8_backward): 6 outputs, expected 7 (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp)"},
      {[](Json& j) { j["nodes"][0]["ragged"] = true; }, StatusCode::kInvalidArgument,
       "attribute 'ragged': sdpa_fp8_backward takes q, k, v, o, do, stats, the twelve scales and a padding mask's"},
      {[](Json& j) { j["nodes"][0]["diagonal_alignment"] = "bottom_right"; }, StatusCode::kNotSupported,
       "cuDNN's FP8 attention backward pass aligns the diagonal bottom-right only on SM 10.x"},
      {[](Json& j) {
         for (const char* n : {"q", "k", "v", "o", "do"}) j["tensors"][n]["dims"][3] = 64;
       },
       StatusCode::kNotSupported,
       "cuDNN's FP8 attention backward pass takes head dims of 128 only below SM 10.0 (q's 64, v's 64; no target "
       "given (SM 9.x assumed))"},
      {[](Json& j) {  // without a seed and offset too: the refusal names dropout, not a count
         j["nodes"][0]["dropout"] = 0.1;
       },
       StatusCode::kNotSupported, "attribute 'dropout': 0.1: FP8 attention with dropout is not supported yet"},
      {[](Json& j) {  // B = H = Sq = 1: the statistics are [1, 1, 1, 1], and may not be a scale too
         for (const char* n : {"q", "o", "do"}) j["tensors"][n]["dims"] = {1, 1, 1, 128};
         for (const char* n : {"k", "v"}) j["tensors"][n]["dims"] = {1, 1, 256, 128};
         j["tensors"]["lse"]["dims"] = {1, 1, 1, 1};
         j["nodes"][0]["inputs"][13] = "lse";
         j["tensors"].erase("scale_s");
       },
       StatusCode::kInvalidArgument,
       "input 'lse': it is both the softmax statistics and an FP8 scale: give each its own tensor"},
      {[](Json& j) {
         j["nodes"][0]["dropout"] = 0.1;
         j["tensors"]["seed"] = t({1, 1, 1, 1}, "int64");
         j["tensors"]["offset"] = t({1, 1, 1, 1}, "int64");
         j["nodes"][0]["inputs"].push_back("seed");
         j["nodes"][0]["inputs"].push_back("offset");
       },
       StatusCode::kNotSupported, "attribute 'dropout': 0.1: FP8 attention with dropout is not supported yet"},
  };
  for (const Bad& b : bad) {
    Json j = s;
    b.edit(j);
    const Status st = parse(j).status();
    EXPECT_EQ(st.code(), b.code) << b.message << ": " << st.to_string();
    EXPECT_ERROR_HAS(st, b.message.c_str());
  }
}

// What cuDNN runs depends on the target: SM 9.0 at least; SM 10.x takes head dims that are multiples of 16 up to 128
// and a bottom-right diagonal, with query and key counts that are multiples of 64.
TEST(SpecErrors, SdpaFp8BackwardByTarget) {
  const Json s = sdpa_fp8_backward_spec();
  // SM 10.x aligns bottom-right with query and key counts that are multiples of 64 only.
  Json br = s;
  br["nodes"][0]["diagonal_alignment"] = "bottom_right";
  EXPECT_TRUE(parse(br, ValidateOptions{100}).is_ok());
  br["tensors"]["q"]["dims"][2] = br["tensors"]["o"]["dims"][2] = br["tensors"]["do"]["dims"][2] = 100;
  br["tensors"]["lse"]["dims"][2] = 100;
  const Status br100 = parse(br, ValidateOptions{100}).status();
  EXPECT_EQ(br100.code(), StatusCode::kNotSupported);
  EXPECT_ERROR_HAS(br100, "bottom-right only with query and key counts that are multiples of 64 (input 'q' has 100 "
                          "queries, input 'k' 256 keys)");
  // Below SM 10.0 a band needs multiples of 64 too (cuDNN 9.19's dq was wrong at others on an H100).
  Json odd = s;
  for (const char* n : {"q", "o", "do", "lse"}) odd["tensors"][n]["dims"][2] = 40;
  const Status odd90 = parse(odd).status();
  EXPECT_EQ(odd90.code(), StatusCode::kNotSupported);
  EXPECT_ERROR_HAS(odd90, "with a band (causal, left_bound, right_bound) needs query and key counts that are "
                          "multiples of 64 below SM 10.0 (input 'q' has 40 queries, input 'k' 256 keys");
  EXPECT_TRUE(parse(odd, ValidateOptions{100}).is_ok());
  odd["nodes"][0]["causal"] = false;
  EXPECT_TRUE(parse(odd).is_ok());
  // SM 10.x takes multiples of 16 up to 128; SM 8.x none.
  Json d64 = s;
  for (const char* n : {"q", "k", "v", "o", "do"}) d64["tensors"][n]["dims"][3] = 64;
  EXPECT_TRUE(parse(d64, ValidateOptions{100}).is_ok());
  EXPECT_ERROR_HAS(parse(s, ValidateOptions{80}).status(), "needs SM 9.0 or newer, target SM 8.0");
}

TEST(SpecErrors, SdpaDtypeShapeTarget) {
  Json tensors = {{"q", t({1, 2, 16, 64})}, {"k", t({1, 2, 16, 64})}, {"v", t({1, 2, 16, 64})}};
  Json s = one_node(tensors, "sdpa", {"q", "k", "v"});
  s["io_dtype"] = "fp32";
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (sdpa): input 'q': dtype fp32 is not supported by sdpa");
  s["io_dtype"] = "fp16";
  EXPECT_TRUE(parse(s).is_ok());
  Status st = parse(s, ValidateOptions{75}).status();
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_ERROR_HAS(st, "t.json: node 'n1' (sdpa): sdpa needs SM 8.0 or newer, target is SM 7.5");
  s["tensors"]["k"] = t({1, 2, 16, 32});
  EXPECT_ERROR_HAS(parse(s).status(), "input 'k': head dim 32 differs from input 'q' head dim 64");
  s["tensors"]["k"] = t({1, 2, 16, 64}, "bf16");
  EXPECT_ERROR_HAS(parse(s).status(), "input 'k': dtype bf16 differs from input 'q' (fp16)");
  s["tensors"]["k"] = t({1, 2, 16});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (sdpa): input 'k': rank 3, expected 4");
}

// Each operand-shape rule of sdpa (q [B,Hq,Sq,D], k [B,Hk,Skv,D], v [B,Hk,Skv,Dv]) refuses on its own, k's
// and v's batch each (issue 14 item 6: a batch check skipping v went through every test).
TEST(SpecErrors, SdpaOperandShapes) {
  Json s =
      one_node({{"q", t({2, 4, 16, 64})}, {"k", t({2, 2, 32, 64})}, {"v", t({2, 2, 32, 64})}}, "sdpa", {"q", "k", "v"});
  s["io_dtype"] = "fp16";
  ASSERT_TRUE(parse(s).is_ok()) << parse(s).status().message();
  struct Bad {
    const char* tensor;
    V dims;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"k", {3, 2, 32, 64}, "node 'n1' (sdpa): input 'k': batch 3 differs from input 'q' batch 2"},
        Bad{"v", {3, 2, 32, 64}, "node 'n1' (sdpa): input 'v': batch 3 differs from input 'q' batch 2"},
        Bad{"v", {2, 1, 32, 64}, "input 'v': heads 1 differ from input 'k' heads 2"},
        Bad{"k", {2, 3, 32, 64}, "input 'v': heads 2 differ from input 'k' heads 3"},
        Bad{"v", {2, 2, 48, 64}, "input 'v': sequence length 48 differs from input 'k' sequence length 32"}}) {
    Json bad = s;
    bad["tensors"][b.tensor] = t(b.dims);
    EXPECT_ERROR_HAS(parse(bad).status(), b.message);
  }
  // Heads of k that do not divide q's (k and v agreeing).
  Json gqa = s;
  gqa["tensors"]["k"] = t({2, 3, 32, 64});
  gqa["tensors"]["v"] = t({2, 3, 32, 64});
  EXPECT_ERROR_HAS(parse(gqa).status(), "input 'k': heads 3 do not divide input 'q' heads 4");
}

// Each band attribute refuses bad values by name; what cuDNN refuses (more queries than keys with a window or a
// bottom-right diagonal) is NotSupported (exit 5) before cuDNN is asked.
TEST(SpecErrors, SdpaBand) {
  auto band = [](int64_t sq, int64_t skv, Json attrs) {
    Json s = one_node({{"q", t({1, 2, sq, 64})}, {"k", t({1, 2, skv, 64})}, {"v", t({1, 2, skv, 64})}}, "sdpa",
                      {"q", "k", "v"}, std::move(attrs));
    s["io_dtype"] = "bf16";
    return parse(s).status();
  };
  EXPECT_ERROR_HAS(band(8, 8, {{"left_bound", 0}}), "node 'n1' (sdpa): attribute 'left_bound': 0 must be between 1");
  EXPECT_ERROR_HAS(band(8, 8, {{"left_bound", 1.5}}), "attribute 'left_bound'");
  EXPECT_ERROR_HAS(band(8, 8, {{"right_bound", -1}}), "attribute 'right_bound': -1 must be between 0");
  EXPECT_ERROR_HAS(band(8, 8, {{"left_bound", int64_t{1} << 30}}), "must be between 1");
  EXPECT_ERROR_HAS(band(8, 8, {{"causal", true}, {"right_bound", 2}}),
                   "attribute 'right_bound': 2 contradicts 'causal': true");
  EXPECT_ERROR_HAS(band(8, 8, {{"diagonal_alignment", "bottom_right"}}),
                   "attribute 'diagonal_alignment': bottom_right aligns a bound, and none is set");
  EXPECT_ERROR_HAS(band(8, 8, {{"causal", true}, {"diagonal_alignment", "middle"}}),
                   "attribute 'diagonal_alignment': expected \"top_left\" or \"bottom_right\", got \"middle\"");
  Status st = band(16, 8, {{"causal", true}, {"diagonal_alignment", "bottom_right"}});
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(
      st, "bottom-right only with at most as many queries as keys (input 'q' has 16 queries, input 'k' 8 keys)");
  st = band(16, 8, {{"causal", true}, {"left_bound", 4}});
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "sliding window (left_bound)");
  EXPECT_TRUE(band(16, 8, {{"causal", true}}).is_ok());  // top-left causal: the rows past the keys see them all
  EXPECT_TRUE(band(8, 16, {{"left_bound", 4}, {"right_bound", 2}}).is_ok());
}

// Dropout: a probability in [0, 1); 0 (none) is accepted as it is. Over 0, sdpa takes two more inputs, last, the
// seed and offset of cuDNN's mask (int64 [1, 1, 1, 1] graph inputs); what cuDNN or Kiln cannot run with it is refused
// as not supported, after every fault to fix: the backward pass, FP8, a sliding window, a bottom-right diagonal.
// One sdpa node over q, k, v [1, 2, 8, 64] with dropout (the probability, seed and offset a case gives).
struct DropoutCase {
  Json dropout = 0.1;
  Json seed = t({1, 1, 1, 1}, "int64");
  Json offset = t({1, 1, 1, 1}, "int64");
  bool seeds = true;  // give seed and offset
  const char* q_dtype = nullptr;
  Json attrs = {{"causal", true}};
};
StatusOr<Graph> dropout_attn(const DropoutCase& c) {
  Json tensors = {{"q", t({1, 2, 8, 64})}, {"k", t({1, 2, 8, 64})}, {"v", t({1, 2, 8, 64})}};
  Json inputs = {"q", "k", "v"};
  if (c.q_dtype) tensors["q"]["dtype"] = c.q_dtype;
  if (c.seeds) {
    tensors["seed"] = c.seed;
    tensors["offset"] = c.offset;
    inputs.push_back("seed");
    inputs.push_back("offset");
  }
  Json attrs = c.attrs;
  attrs["dropout"] = c.dropout;
  Json s = one_node(tensors, "sdpa", inputs, attrs);
  s["io_dtype"] = "bf16";
  return parse(s);
}
Status dropout_status(const DropoutCase& c) { return dropout_attn(c).status(); }

TEST(SpecErrors, SdpaDropout) {
  using Case = DropoutCase;
  auto attn = dropout_attn;
  auto status = dropout_status;
  Case none;
  none.dropout = 0;
  none.seeds = false;
  EXPECT_TRUE(status(none).is_ok()) << status(none).to_string();
  none.dropout = 0.0;
  EXPECT_TRUE(status(none).is_ok());
  Case ok;
  StatusOr<Graph> g = attn(ok);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const SdpaInputs roles = sdpa_inputs(g->nodes[0]);
  EXPECT_EQ(roles.seed, 3);
  EXPECT_EQ(roles.offset, 4);
  EXPECT_EQ(roles.bias, -1);
  // The probability signs the graph: another dropout is another structure.
  Case other;
  other.dropout = 0.2;
  StatusOr<Graph> g2 = attn(other);
  ASSERT_TRUE(g2.is_ok()) << g2.status().to_string();
  EXPECT_NE(compute_signature(*g)->structure, compute_signature(*g2)->structure);
  EXPECT_NE(compute_signature(*g)->canonical.find("dropout=0.1"), std::string::npos)
      << compute_signature(*g)->canonical;

  for (Json bad : {Json(1.0), Json(-0.25), Json(1.5)}) {
    Case c;
    c.dropout = bad;
    Status st = status(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    const std::string want = "attribute 'dropout': " + bad.dump() + " is not a probability in [0, 1)";
    EXPECT_ERROR_HAS(st, want.c_str());
  }
  Case text;
  text.dropout = "0.1";
  EXPECT_ERROR_HAS(status(text), "attribute 'dropout'");
  Case unseeded;  // the seed and offset missing: a count that names what comes last
  unseeded.seeds = false;
  Status st = status(unseeded);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  Case int32_seed;
  int32_seed.seed = t({1, 1, 1, 1}, "int32");
  EXPECT_ERROR_HAS(status(int32_seed), "input 'seed': dtype int32 is not supported for dropout's seed (int64 only)");
  Case wide_offset;
  wide_offset.offset = t({2, 1, 1, 1}, "int64");
  EXPECT_ERROR_HAS(status(wide_offset),
                   "input 'offset': dims [2,1,1,1] must be [1, 1, 1, 1] (dropout's offset is one value)");
  Case by_value;
  by_value.seed = {{"dims", {1, 1, 1, 1}}, {"dtype", "float32"}, {"value", 7}};  // (an int64 by value is refused)
  EXPECT_ERROR_HAS(status(by_value), "dropout's seed is read on the device (a tensor), not passed by value");
  Case fp32;  // a fault to fix comes before what is not supported
  fp32.q_dtype = "fp32";
  fp32.attrs = {{"left_bound", 4}};
  st = status(fp32);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_ERROR_HAS(st, "input 'q': dtype fp32");
  Case window;
  window.attrs = {{"causal", true}, {"left_bound", 4}};
  st = status(window);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "node 'n1' (sdpa): attribute 'dropout': 0.1: cuDNN takes dropout with no sliding window");
  Case bottom_right;
  bottom_right.attrs = {{"causal", true}, {"diagonal_alignment", "bottom_right"}};
  st = status(bottom_right);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "no bottom-right diagonal");
}

// A backward pass whose o comes from a forward in the same graph differentiates it: another band or scale is
// refused naming the forward (sdpa_backward under sdpa, sdpa_fp8_backward under sdpa_fp8).
TEST(SpecErrors, ABackwardTakesItsForwardsBandAndScale) {
  const auto chain = [](Json fwd_attrs, Json bwd_attrs) {
    Json s;
    s["name"] = "train";
    s["io_dtype"] = "bf16";
    s["tensors"] = {{"q", t({1, 2, 64, 64})},  {"k", t({1, 2, 64, 64})},        {"v", t({1, 2, 64, 64})},
                    {"do", t({1, 2, 64, 64})}, {"lse", {{"dtype", "float32"}}}, {"o", {{"dtype", "bf16"}}}};
    Json f = {{"name", "fwd"}, {"op", "sdpa"}, {"inputs", {"q", "k", "v"}}, {"outputs", {"o", "lse"}}};
    Json b = {{"name", "bwd"},
              {"op", "sdpa_backward"},
              {"inputs", {"q", "k", "v", "o", "do", "lse"}},
              {"outputs", {"dq", "dk", "dv"}}};
    f.update(fwd_attrs);
    b.update(bwd_attrs);
    s["nodes"] = {f, b};
    s["outputs"] = {"dq", "dk", "dv"};
    return parse(s).status();
  };
  EXPECT_TRUE(chain({{"causal", true}}, {{"causal", true}}).is_ok());
  EXPECT_TRUE(chain({{"attn_scale", 0.125}}, Json::object()).is_ok());  // the default written out: 1/sqrt(64)
  Status st = chain({{"causal", true}}, Json::object());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_ERROR_HAS(st, "node 'bwd' (sdpa_backward): input 'o' comes from node 'fwd' (sdpa), whose band differs");
  st = chain({{"causal", true}}, {{"causal", true}, {"attn_scale", 0.5}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_ERROR_HAS(st, "whose attn_scale is 0.125, not 0.5: a backward pass of it takes the same scale");
}

// The backward pass with dropout; probabilities a float cannot hold; seeds shared, out of place, or given with
// dropout 0.
TEST(SpecErrors, SdpaDropoutBackwardAndMisplacedSeeds) {
  using Case = DropoutCase;
  auto status = dropout_status;
  Status st;
  // The backward pass takes the forward's probability, seed and offset, last; the same limits apply.
  auto backward = [](Json attrs, bool seeds = true) {
    Json tensors = {{"q", t({1, 2, 8, 64})},
                    {"k", t({1, 2, 8, 64})},
                    {"v", t({1, 2, 8, 64})},
                    {"o", t({1, 2, 8, 64})},
                    {"do", t({1, 2, 8, 64})},
                    {"stats", t({1, 2, 8, 1}, "float32")},
                    {"seed", t({1, 1, 1, 1}, "int64")},
                    {"offset", t({1, 1, 1, 1}, "int64")}};
    Json inputs = {"q", "k", "v", "o", "do", "stats"};
    if (seeds) inputs.insert(inputs.end(), {"seed", "offset"});
    Json bwd = one_node(tensors, "sdpa_backward", inputs, attrs);
    bwd["io_dtype"] = "bf16";
    bwd["nodes"][0]["outputs"] = {"dq", "dk", "dv"};
    bwd["outputs"] = {"dq", "dk", "dv"};
    return parse(bwd);
  };
  StatusOr<Graph> bg = backward({{"dropout", 0.2}, {"causal", true}});
  ASSERT_TRUE(bg.is_ok()) << bg.status().to_string();
  EXPECT_EQ(sdpa_inputs(bg->nodes[0]).seed, 6);
  EXPECT_EQ(sdpa_inputs(bg->nodes[0]).offset, 7);
  st = backward({{"dropout", 0.2}}, false).status();
  EXPECT_ERROR_HAS(st, "6 inputs, expected 8 or 9");
  EXPECT_ERROR_HAS(st, "then dropout's seed and offset (int64 [1, 1, 1, 1]) last");
  st = backward({{"dropout", 0.2}, {"causal", true}, {"left_bound", 4}}).status();
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "node 'n1' (sdpa_backward): attribute 'dropout': 0.2: cuDNN takes dropout with no sliding");
  // A probability cuDNN's float cannot hold strictly inside (0, 1); one tensor as both seed and offset.
  for (Json p : {Json(0.99999999), Json(0.9999999999999999), Json(1e-46)}) {
    Case c;
    c.dropout = p;
    st = status(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_ERROR_HAS(st, "as the float cuDNN takes");
  }
  Case near_one;
  near_one.dropout = 0.9999;
  EXPECT_TRUE(status(near_one).is_ok()) << status(near_one).to_string();
  {
    Json tensors = {
        {"q", t({1, 2, 8, 64})}, {"k", t({1, 2, 8, 64})}, {"v", t({1, 2, 8, 64})}, {"seed", t({1, 1, 1, 1}, "int64")}};
    Json s = one_node(tensors, "sdpa", {"q", "k", "v", "seed", "seed"}, {{"dropout", 0.1}});
    s["io_dtype"] = "bf16";
    EXPECT_ERROR_HAS(parse(s).status(), "input 'seed' is both dropout's seed and its offset: give two tensors");
  }
  // Out of place: the seed and offset before the bias.
  {
    Json tensors = {{"q", t({1, 2, 8, 64})},
                    {"k", t({1, 2, 8, 64})},
                    {"v", t({1, 2, 8, 64})},
                    {"bias", t({1, 2, 8, 8})},
                    {"seed", t({1, 1, 1, 1}, "int64")},
                    {"offset", t({1, 1, 1, 1}, "int64")}};
    Json s = one_node(tensors, "sdpa", {"q", "k", "v", "seed", "offset", "bias"}, {{"dropout", 0.1}});
    s["io_dtype"] = "bf16";
    st = parse(s).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_ERROR_HAS(st, "input 'seed': int64, where 6 inputs put another role: dropout's seed and offset come last");
  }
  // A forward and its backward in one graph: the backward drops as the forward did, or is refused naming it; o and
  // v must be what Kiln's probe replaces and reads (a graph input, a graph output).
  auto pair = [](double fwd_p, double bwd_p, bool o_out, bool own_seed) {
    Json tensors = {{"q", t({1, 2, 8, 64})},
                    {"k", t({1, 2, 8, 64})},
                    {"v", t({1, 2, 8, 64})},
                    {"do", t({1, 2, 8, 64})},
                    {"o", t({1, 2, 8, 64}, "bf16")},
                    {"lse", t({1, 2, 8, 1}, "float32")},
                    {"seed", t({1, 1, 1, 1}, "int64")},
                    {"offset", t({1, 1, 1, 1}, "int64")}};
    if (own_seed) tensors["seed2"] = t({1, 1, 1, 1}, "int64");
    Json f = {{"name", "fwd"},           {"op", "sdpa"},   {"inputs", {"q", "k", "v", "seed", "offset"}},
              {"outputs", {"o", "lse"}}, {"causal", true}, {"dropout", fwd_p}};
    Json b = {{"name", "bwd"},
              {"op", "sdpa_backward"},
              {"inputs", {"q", "k", "v", "o", "do", "lse", own_seed ? "seed2" : "seed", "offset"}},
              {"outputs", {"dq", "dk", "dv"}},
              {"causal", true},
              {"dropout", bwd_p}};
    Json s = {{"name", "train"}, {"io_dtype", "bf16"}, {"tensors", tensors}, {"nodes", {f, b}}};
    s["outputs"] = o_out ? Json{"o", "dq", "dk", "dv"} : Json{"dq", "dk", "dv"};
    return parse(s).status();
  };
  EXPECT_TRUE(pair(0.1, 0.1, true, false).is_ok()) << pair(0.1, 0.1, true, false).to_string();
  EXPECT_ERROR_HAS(pair(0.1, 0.2, true, false),
                   "node 'bwd' (sdpa_backward): input 'o' comes from node 'fwd' (sdpa), whose attribute 'dropout': "
                   "0.1: a backward pass of it takes the same probability, the same seed and offset tensors");
  EXPECT_ERROR_HAS(pair(0.1, 0.1, true, true), "input 'o' comes from node 'fwd' (sdpa)");
  st = pair(0.1, 0.1, false, false);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "node 'fwd' (sdpa): attribute 'dropout': 0.1: Kiln checks a plan that drops by replacing "
                       "input 'v' and reading output 'o', so the first must be a graph input");
  // Dropout 0 with a seed and offset given: the count says they come only with a probability over 0.
  Case zero;
  zero.dropout = 0;
  EXPECT_ERROR_HAS(status(zero), "and with \"dropout\" over 0 its seed and offset last (none with dropout 0 or none)");
}

// An additive bias: [B or 1, H or 1, Sq, Skv] in q's dtype; none with a bottom-right diagonal (cuDNN's limit).
TEST(SpecErrors, SdpaBias) {
  auto biased = [](std::vector<int64_t> dims, Json attrs, const char* dtype = nullptr) {
    Json tensors = {{"q", t({2, 4, 16, 64})}, {"k", t({2, 2, 32, 64})}, {"v", t({2, 2, 32, 64})}, {"bias", t(dims)}};
    if (dtype) tensors["bias"]["dtype"] = dtype;
    Json s = one_node(tensors, "sdpa", {"q", "k", "v", "bias"}, std::move(attrs));
    s["io_dtype"] = "bf16";
    return parse(s);
  };
  EXPECT_TRUE(biased({2, 4, 16, 32}, Json::object()).is_ok());
  EXPECT_TRUE(biased({1, 4, 16, 32}, {{"causal", true}}).is_ok());
  EXPECT_TRUE(biased({2, 1, 16, 32}, {{"causal", true}, {"left_bound", 8}}).is_ok());
  EXPECT_TRUE(biased({1, 1, 16, 32}, Json::object()).is_ok());
  EXPECT_ERROR_HAS(biased({2, 4, 16, 16}, Json::object()).status(),
                   "node 'n1' (sdpa): input 'bias': dims [2,4,16,16] must be [B or 1, H or 1, Sq, Skv] = "
                   "[2 or 1, 4 or 1, 16, 32] (keys)");
  EXPECT_ERROR_HAS(biased({3, 4, 16, 32}, Json::object()).status(), "(batch)");
  EXPECT_ERROR_HAS(biased({2, 2, 16, 32}, Json::object()).status(), "(heads)");
  EXPECT_ERROR_HAS(biased({4, 16, 32}, Json::object()).status(), "input 'bias': rank 3, expected 4");
  EXPECT_ERROR_HAS(biased({2, 4, 16, 32}, Json::object(), "fp32").status(),
                   "input 'bias': dtype fp32 differs from input 'q' (bf16)");
  Status st = biased({2, 4, 16, 32}, {{"causal", true}, {"diagonal_alignment", "bottom_right"}}).status();
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_ERROR_HAS(st, "cuDNN takes no attention bias with a bottom-right diagonal");
  Json five = one_node({{"q", t({2, 4, 16, 64})}, {"k", t({2, 2, 32, 64})}, {"v", t({2, 2, 32, 64})}}, "sdpa",
                       {"q", "k", "v", "q", "k"});
  five["io_dtype"] = "bf16";
  EXPECT_FALSE(parse(five).is_ok());
}

// A padding mask: "padding_mask": true and the lengths last, int32 [B, 1, 1, 1] each; each mistake named.
TEST(SpecErrors, SdpaPaddingMask) {
  auto padded = [](std::vector<std::string> inputs, Json attrs, std::vector<int64_t> len_dims = {2, 1, 1, 1},
                   const char* len_dtype = "int32") {
    Json tensors = {{"q", t({2, 4, 16, 64})}, {"k", t({2, 2, 32, 64})}, {"v", t({2, 2, 32, 64})}};
    for (const std::string& in : inputs) {  // only what the node reads: a declared tensor no node reads is refused
      if (in == "bias") tensors["bias"] = t({1, 4, 16, 32});
      if (in == "lq" || in == "lkv") {
        tensors[in] = t(len_dims);
        tensors[in]["dtype"] = len_dtype;
      }
    }
    Json s = one_node(tensors, "sdpa", inputs, std::move(attrs));
    s["io_dtype"] = "bf16";
    return parse(s);
  };
  const Json on = {{"padding_mask", true}};
  auto g = padded({"q", "k", "v", "lq", "lkv"}, on);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_TRUE(g->nodes[0].sdpa.padding);
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).seq_len_q, 3);
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).bias, -1);
  g = padded({"q", "k", "v", "bias", "lq", "lkv"}, {{"padding_mask", true}, {"causal", true}});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).bias, 3);
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).seq_len_kv, 5);
  EXPECT_TRUE(padded({"q", "k", "v", "lq", "lkv"},
                     {{"padding_mask", true}, {"causal", true}, {"diagonal_alignment", "bottom_right"}})
                  .is_ok());
  EXPECT_ERROR_HAS(padded({"q", "k", "v"}, on).status(),
                   "3 inputs, expected 5 or 6 (q, k, v, an optional bias, and with \"padding_mask\": true");
  EXPECT_ERROR_HAS(padded({"q", "k", "v", "lq", "lkv"}, Json::object()).status(), "5 inputs, expected 3 or 4");
  EXPECT_ERROR_HAS(padded({"q", "k", "v", "lq", "lkv"}, on, {2, 1, 1, 1}, "int64").status(),
                   "input 'lq': dtype int64 is not supported for a padding mask's lengths (int32 only)");
  EXPECT_ERROR_HAS(padded({"q", "k", "v", "lq", "lkv"}, on, {2, 1, 1, 2}).status(),
                   "input 'lq': dims [2,1,1,2] must be [B, 1, 1, 1] = [2, 1, 1, 1]");
  EXPECT_ERROR_HAS(padded({"q", "k", "v", "lq", "lkv"}, on, {1, 1, 1, 1}).status(), "one length per batch entry");
  EXPECT_ERROR_HAS(padded({"q", "k", "v", "lq", "lkv"}, {{"padding_mask", 1}}).status(),
                   "attribute 'padding_mask': expected true or false");
  // Found by review: an invalid spec that cuDNN also could not run exits 2 for the fault the author must fix
  // first (here the lengths' dtype), not 5 for cuDNN's limit (a bias with a bottom-right diagonal).
  Status st =
      padded({"q", "k", "v", "bias", "lq", "lkv"},
             {{"padding_mask", true}, {"causal", true}, {"diagonal_alignment", "bottom_right"}}, {2, 1, 1, 1}, "fp32")
          .status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  // Found by review: lengths a node writes have no range to draw or check: refused.
  Json made = one_node({{"q", t({2, 4, 16, 64})},
                        {"k", t({2, 2, 32, 64})},
                        {"v", t({2, 2, 32, 64})},
                        {"lq", t({2, 1, 1, 1})},
                        {"raw", t({2, 1, 1, 1})}},
                       "sdpa", {"q", "k", "v", "lq", "lkv"}, {{"padding_mask", true}});
  made["tensors"]["lq"]["dtype"] = "int32";
  made["tensors"]["raw"]["dtype"] = "int32";
  made["nodes"].push_back({{"name", "copy"}, {"op", "identity"}, {"inputs", {"raw"}}, {"outputs", {"lkv"}}});
  made["tensors"]["lkv"] = {{"dtype", "int32"}};
  made["io_dtype"] = "bf16";
  EXPECT_ERROR_HAS(parse(made).status(), "input 'lkv': a padding mask's length must be a graph input");
}

// A ragged (THD) tensor of B 2, D 64: dims [2, heads, rows, 64] packed token-major.
Json thd(int64_t heads, int64_t rows) {
  Json j = t({2, heads, rows, 64});
  j["strides"] = {rows * heads * 64, 64, heads * 64, 1};
  return j;
}

// Ragged (THD) attention: four offsets after the lengths; each refused by name when wrong; the tensors packed
// token-major (o too, which an undeclared o gets); what is not run yet is NotSupported. The spec: B 2, q 4 heads
// over k, v 2, Sq 16, Skv 32, D 64; k and v share one offset tensor.
Json sdpa_ragged_spec() {
  Json base = one_node({{"q", thd(4, 16)},
                        {"k", thd(2, 32)},
                        {"v", thd(2, 32)},
                        {"lq", t({2, 1, 1, 1}, "int32")},
                        {"lkv", t({2, 1, 1, 1}, "int32")},
                        {"oq", t({3, 1, 1, 1}, "int32")},
                        {"okv", t({3, 1, 1, 1}, "int32")},
                        {"oo", t({3, 1, 1, 1}, "int32")}},
                       "sdpa", {"q", "k", "v", "lq", "lkv", "oq", "okv", "okv", "oo"},
                       {{"padding_mask", true}, {"ragged", true}});
  base["io_dtype"] = "bf16";
  return base;
}

TEST(SpecOps, SdpaRagged) {
  const Json base = sdpa_ragged_spec();
  StatusOr<Graph> g = parse(base);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const Node& n = g->nodes[0];
  EXPECT_EQ(sdpa_inputs(n).ragged_q, 5);
  EXPECT_EQ(sdpa_inputs(n).ragged_o, 8);
  const TensorDesc& o = g->tensors[static_cast<size_t>(n.outputs[0])];
  EXPECT_EQ(o.strides, (std::vector<int64_t>{16 * 4 * 64, 64, 4 * 64, 1})) << "an undeclared ragged o is token-major";
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  EXPECT_NE(sig->canonical.find("ragged=1"), std::string::npos) << sig->canonical;

  // With a bias (dense [B or 1, H or 1, Sq, Skv]) and the statistics (dense fp32 [B, H, Sq, 1]).
  Json j = base;
  j["tensors"]["bias"] = t({2, 4, 16, 32});
  j["nodes"][0]["inputs"].insert(j["nodes"][0]["inputs"].begin() + 3, "bias");
  j["nodes"][0]["outputs"] = {"y", "lse"};
  j["tensors"]["lse"] = {{"dtype", "float32"}};
  j["outputs"] = {"y", "lse"};
  StatusOr<Graph> gb = parse(j);
  ASSERT_TRUE(gb.is_ok()) << gb.status().to_string();
  EXPECT_EQ(sdpa_inputs(gb->nodes[0]).bias, 3);
  EXPECT_EQ(sdpa_inputs(gb->nodes[0]).ragged_q, 6);
  EXPECT_EQ(gb->tensors[static_cast<size_t>(gb->nodes[0].outputs[1])].dims.size(), 4u);
}

// A stride of an extent-1 dim is never read: one head (or one entry, or one query) takes any stride there, as
// PyTorch writes such views; a dim over 1 still must be token-major.
TEST(SpecOps, SdpaRaggedTakesAnyStrideOnAnExtentOneDim) {
  Json j = sdpa_ragged_spec();
  j["tensors"]["q"] = thd(1, 16);
  j["tensors"]["q"]["strides"][1] = 12345;  // the lone head's stride
  j["tensors"]["k"] = thd(1, 32);
  j["tensors"]["v"] = thd(1, 32);
  StatusOr<Graph> g = parse(j);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->tensors[static_cast<size_t>(g->find_tensor("q"))].strides, (std::vector<int64_t>{1024, 64, 64, 1}))
      << "the never-read stride is written token-major (what cuDNN is given)";
  j["tensors"]["q"]["strides"][1] = 64;
  auto same = parse(j);
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ(compute_signature(*g)->canonical, compute_signature(*same)->canonical) << "one graph, one signature";
  // A contiguous decode q (one query row, strides not written) is token-major too: it signs as the written form.
  Json decode = sdpa_ragged_spec(), written = sdpa_ragged_spec();
  decode["tensors"]["q"] = t({2, 4, 1, 64});
  written["tensors"]["q"] = thd(4, 1);
  auto a = parse(decode), b = parse(written);
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string() << b.status().to_string();
  EXPECT_EQ(compute_signature(*a)->canonical, compute_signature(*b)->canonical);
  j["tensors"]["k"]["strides"][2] = 65;  // keys' rows (32 of them) off by one element: refused
  EXPECT_ERROR_HAS(parse(j).status(), "input 'k': strides [2048,64,65,1] on dims [2,1,32,64]: a ragged tensor is "
                                      "packed token-major");
}

TEST(SpecErrors, SdpaRagged) {
  const Json base = sdpa_ragged_spec();
  struct Bad {
    std::function<void(Json&)> edit;
    const char* message;
    StatusCode code;
  };
  const std::vector<Bad> bad = {
      {[](Json& j) { j["nodes"][0].erase("padding_mask"); },
       "attribute 'ragged': ragged tensors need \"padding_mask\": true", StatusCode::kInvalidArgument},
      {[](Json& j) {  // an offset that is also another node's length
         j["tensors"]["q2"] = t({3, 2, 8, 64});
         j["tensors"]["k2"] = t({3, 2, 8, 64});
         j["tensors"]["v2"] = t({3, 2, 8, 64});
         j["tensors"]["l2"] = t({3, 1, 1, 1}, "int32");
         j["nodes"].push_back({{"name", "n2"},
                               {"op", "sdpa"},
                               {"padding_mask", true},
                               {"inputs", {"q2", "k2", "v2", "oq", "l2"}},
                               {"outputs", {"y2"}}});
         j["outputs"] = {"y", "y2"};
       },
       "input 'oq': a ragged offset is read by its node's offset roles only", StatusCode::kInvalidArgument},
      {[](Json& j) {  // a batch that is dynamic
         j["dynamic"] = {{"batch", 2}};
         for (const char* n : {"q", "k", "v", "lq", "lkv"}) j["tensors"][n]["dims"][0] = "batch";
       },
       "follow a dynamic dim, but a ragged tensor's dims are static", StatusCode::kInvalidArgument},
      {[](Json& j) {  // k read as v too (v then dropped: a tensor no node reads is refused)
         j["nodes"][0]["inputs"][2] = "k";
         j["tensors"].erase("v");
       },
       "input 'k': a ragged tensor is read by one role of its node only", StatusCode::kInvalidArgument},
      {[](Json& j) {  // with a bias, the stride the author must fix
         j["tensors"]["bias"] = t({2, 4, 16, 32});
         j["nodes"][0]["inputs"].insert(j["nodes"][0]["inputs"].begin() + 3, "bias");
         j["tensors"]["q"].erase("strides");
       },
       "input 'q': strides [4096,1024,64,1] on dims [2,4,16,64]: a ragged tensor is packed token-major",
       StatusCode::kInvalidArgument},
      {[](Json& j) {  // k and v share an offset tensor only where their tokens match
         j["tensors"]["v"] = {{"dims", {2, 2, 32, 32}}, {"strides", {32 * 2 * 32, 32, 2 * 32, 1}}};
       },
       "input 'okv': it serves as k's and v's ragged offset, whose tokens differ (128 and 64 elements)",
       StatusCode::kInvalidArgument},
      {[](Json& j) {  // 2^31 elements: past int32 offsets
         j["tensors"]["q"] = t({2, 64, 262144, 64});
         j["tensors"]["q"]["strides"] = {262144LL * 64 * 64, 64, 64 * 64, 1};
         j["tensors"]["k"] = t({2, 2, 262144, 64});
         j["tensors"]["k"]["strides"] = {262144LL * 2 * 64, 64, 2 * 64, 1};
         j["tensors"]["v"] = j["tensors"]["k"];
       },
       "input 'q' holds 2147483648 elements, past the int32 offsets", StatusCode::kNotSupported},
      {[](Json& j) {
         j["nodes"][0].erase("padding_mask");
         j["nodes"][0]["inputs"] = {"q", "k", "v", "oq", "okv", "okv", "oo"};
         j["tensors"].erase("lq");
         j["tensors"].erase("lkv");
       },
       "attribute 'ragged': ragged tensors need \"padding_mask\": true", StatusCode::kInvalidArgument},
      {[](Json& j) { j["tensors"]["oq"]["dtype"] = "fp16"; },
       "input 'oq': dtype fp16 is not supported for a ragged offset", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["oo"]["dims"] = {2, 1, 1, 1};
       },
       "input 'oo': dims [2,1,1,1] must be [B + 1, 1, 1, 1] = [3, 1, 1, 1]", StatusCode::kInvalidArgument},
      {[](Json& j) { j["nodes"][0]["inputs"][6] = "oq"; },
       "input 'oq': it serves as q's and k's ragged offset, but one counts queries", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["nodes"][0]["inputs"][8] = "okv";
         j["tensors"].erase("oo");
       },
       "input 'okv': it serves as k's and o's ragged offset, but one counts queries", StatusCode::kInvalidArgument},
      {[](Json& j) { j["tensors"]["q"].erase("strides"); },
       "input 'q': strides [4096,1024,64,1] on dims [2,4,16,64]: a ragged tensor is packed token-major",
       StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["y"] = {{"strides", {4096, 1024, 64, 1}}};
       },
       "output 'y': strides [4096,1024,64,1] on dims [2,4,16,64]: a ragged tensor is packed token-major",
       StatusCode::kInvalidArgument},
  };
  for (const Bad& b : bad) {
    Json j = base;
    b.edit(j);
    Status st = parse(j).status();
    EXPECT_EQ(st.code(), b.code) << st.to_string();
    EXPECT_ERROR_HAS(st, "node 'n1' (sdpa)", b.message);
  }
}

// The backward pass over ragged tensors: the four offsets after the lengths (q's also dq's, k's dk's, v's dv's, o's
// o's and do's); q, k, v, o and do packed token-major, and dq, dk, dv too (undeclared: token-major). B 2, q 4 heads
// over k, v 2, Sq 16, Skv 32, D 64.
Json sdpa_backward_ragged_spec() {
  Json base = one_node({{"q", thd(4, 16)},
                        {"k", thd(2, 32)},
                        {"v", thd(2, 32)},
                        {"o", thd(4, 16)},
                        {"do", thd(4, 16)},
                        {"stats", t({2, 4, 16, 1}, "float32")},
                        {"lq", t({2, 1, 1, 1}, "int32")},
                        {"lkv", t({2, 1, 1, 1}, "int32")},
                        {"oq", t({3, 1, 1, 1}, "int32")},
                        {"ok", t({3, 1, 1, 1}, "int32")},
                        {"ov", t({3, 1, 1, 1}, "int32")},
                        {"oo", t({3, 1, 1, 1}, "int32")}},
                       "sdpa_backward", {"q", "k", "v", "o", "do", "stats", "lq", "lkv", "oq", "ok", "ov", "oo"},
                       {{"padding_mask", true}, {"ragged", true}, {"causal", true}});
  base["nodes"][0]["outputs"] = {"dq", "dk", "dv"};
  base["outputs"] = {"dq", "dk", "dv"};
  base["io_dtype"] = "bf16";
  return base;
}

TEST(SpecOps, SdpaBackwardRagged) {
  StatusOr<Graph> g = parse(sdpa_backward_ragged_spec());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const Node& n = g->nodes[0];
  const SdpaInputs r = sdpa_inputs(n);
  EXPECT_EQ(r.bias, -1);
  EXPECT_EQ(r.seq_len_q, 6);
  EXPECT_EQ(r.seq_len_kv, 7);
  EXPECT_EQ(r.ragged_q, 8);
  EXPECT_EQ(r.ragged_k, 9);
  EXPECT_EQ(r.ragged_v, 10);
  EXPECT_EQ(r.ragged_o, 11);
  const std::vector<int64_t> q_strides{16 * 4 * 64, 64, 4 * 64, 1}, kv_strides{32 * 2 * 64, 64, 2 * 64, 1};
  EXPECT_EQ(g->tensors[static_cast<size_t>(n.outputs[0])].strides, q_strides) << "an undeclared ragged dq";
  EXPECT_EQ(g->tensors[static_cast<size_t>(n.outputs[1])].strides, kv_strides) << "an undeclared ragged dk";
  EXPECT_EQ(g->tensors[static_cast<size_t>(n.outputs[2])].strides, kv_strides) << "an undeclared ragged dv";
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  EXPECT_NE(sig->canonical.find("ragged=1"), std::string::npos) << sig->canonical;

  // With a bias: the seventh input, the lengths and offsets after it.
  Json j = sdpa_backward_ragged_spec();
  j["tensors"]["bias"] = t({1, 4, 16, 32});
  j["nodes"][0]["inputs"].insert(j["nodes"][0]["inputs"].begin() + 6, "bias");
  j["nodes"][0]["causal"] = false;
  StatusOr<Graph> gb = parse(j);
  ASSERT_TRUE(gb.is_ok()) << gb.status().to_string();
  EXPECT_EQ(sdpa_inputs(gb->nodes[0]).bias, 6);
  EXPECT_EQ(sdpa_inputs(gb->nodes[0]).seq_len_q, 7);
  EXPECT_EQ(sdpa_inputs(gb->nodes[0]).ragged_o, 12);
}

TEST(SpecErrors, SdpaBackwardRagged) {
  struct Bad {
    std::function<void(Json&)> edit;
    const char* message;
    StatusCode code;
  };
  const std::vector<Bad> bad = {
      {[](Json& j) { j["nodes"][0].erase("padding_mask"); },
       "attribute 'ragged': ragged tensors need \"padding_mask\": true", StatusCode::kInvalidArgument},
      {[](Json& j) { j["nodes"][0]["inputs"].erase(j["nodes"][0]["inputs"].end() - 1); },
       "11 inputs, expected 12 or 13", StatusCode::kInvalidArgument},
      {[](Json& j) { j["tensors"]["do"].erase("strides"); },
       "input 'do': strides [4096,1024,64,1] on dims [2,4,16,64]: a ragged tensor is packed token-major",
       StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["dk"] = {{"strides", {4096, 2048, 64, 1}}};
       },
       "output 'dk': strides [4096,2048,64,1] on dims [2,2,32,64]: a ragged tensor is packed token-major",
       StatusCode::kInvalidArgument},
      {[](Json& j) {  // o read as do too
         j["nodes"][0]["inputs"][4] = "o";
         j["tensors"].erase("do");
       },
       "input 'o': a ragged tensor is read by one role of its node only", StatusCode::kInvalidArgument},
      {[](Json& j) {  // q's offsets as k's: one counts queries, the other keys
         j["nodes"][0]["inputs"][9] = "oq";
         j["tensors"].erase("ok");
       },
       "input 'oq': it serves as q's and k's ragged offset, but one counts queries", StatusCode::kInvalidArgument},
      {[](Json& j) {  // dq read by another node: its unowned rows are not written
         j["nodes"].push_back({{"name", "n2"}, {"op", "relu"}, {"inputs", {"dq"}}, {"outputs", {"y2"}}});
         j["outputs"] = {"dq", "dk", "dv", "y2"};
       },
       "output 'dq': a ragged gradient must be a graph output that no node reads", StatusCode::kInvalidArgument},
      {[](Json& j) {
         j["tensors"]["ov"]["dims"] = {2, 1, 1, 1};
       },
       "input 'ov': dims [2,1,1,1] must be [B + 1, 1, 1, 1] = [3, 1, 1, 1]", StatusCode::kInvalidArgument},
      {[](Json& j) { j["tensors"]["oo"]["dtype"] = "int64"; },
       "input 'oo': dtype int64 is not supported for a ragged offset", StatusCode::kInvalidArgument},
      // Found by a hostile trial: a bias with o's offsets forgotten reads the bias as seq_len_q (12 inputs, no bias).
      {[](Json& j) {
         j["tensors"]["bias"] = t({1, 1, 16, 32});
         j["nodes"][0]["inputs"] = {"q", "k", "v", "o", "do", "stats", "bias", "lq", "lkv", "oq", "ok", "ov"};
         j["tensors"].erase("oo");
       },
       "input 'bias': bf16, where 12 inputs put seq_len_q (no bias): is an input missing or extra?",
       StatusCode::kInvalidArgument},
      // cuDNN 9.19 reads the backward's statistics and the index tensors packed (hostile trial: both passed).
      {[](Json& j) {
         j["tensors"]["stats"]["strides"] = {64, 1, 4, 1};
       },
       "input 'stats': strides [64,1,4,1] on dims [2,4,16,1]: cuDNN reads the statistics packed",
       StatusCode::kNotSupported},
      {[](Json& j) {
         j["tensors"]["oq"]["strides"] = {2, 1, 1, 1};
       },
       "input 'oq': strides [2,1,1,1] on dims [3,1,1,1]: cuDNN reads a ragged offset packed",
       StatusCode::kNotSupported},
  };
  for (const Bad& b : bad) {
    Json j = sdpa_backward_ragged_spec();
    b.edit(j);
    Status st = parse(j).status();
    EXPECT_EQ(st.code(), b.code) << st.to_string();
    EXPECT_ERROR_HAS(st, "node 'n1' (sdpa_backward)", b.message);
  }
}

// Paged K/V caches: "paged_kv": true with "padding_mask": true, the caches [blocks, Hk, block_size, D] and the page
// tables int32 [B, 1, pages, 1] last; Skv = pages * block_size.
TEST(SpecErrors, SdpaPagedCaches) {
  auto paged = [](Json attrs, std::vector<int64_t> table_k = {2, 1, 4, 1}, std::vector<int64_t> table_v = {2, 1, 4, 1},
                  const char* table_dtype = "int32") {
    Json tensors = {{"q", t({2, 4, 1, 64})}, {"k", t({10, 2, 16, 64})}, {"v", t({10, 2, 16, 64})},
                    {"lq", t({2, 1, 1, 1})}, {"lkv", t({2, 1, 1, 1})},  {"tk", t(table_k)},
                    {"tv", t(table_v)}};
    for (const char* n : {"lq", "lkv"}) tensors[n]["dtype"] = "int32";
    for (const char* n : {"tk", "tv"}) tensors[n]["dtype"] = table_dtype;
    Json s = one_node(tensors, "sdpa", {"q", "k", "v", "lq", "lkv", "tk", "tv"}, std::move(attrs));
    s["io_dtype"] = "bf16";
    return parse(s);
  };
  const Json on = {
      {"padding_mask", true}, {"paged_kv", true}, {"causal", true}, {"diagonal_alignment", "bottom_right"}};
  auto g = paged(on);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(sdpa_keys_extent(*g, g->nodes[0]), 64);
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).page_table_k, 5);
  EXPECT_EQ(sdpa_inputs(g->nodes[0]).seq_len_q, 3);
  EXPECT_EQ(out_shape(g), (V{2, 4, 1, 64}));
  EXPECT_ERROR_HAS(paged({{"paged_kv", true}}).status(), "7 inputs, expected 5 or 6");
  EXPECT_ERROR_HAS(paged(on, {2, 1, 4, 1}, {2, 1, 4, 1}, "int64").status(),
                   "input 'tk': dtype int64 is not supported for a page table (int32 only)");
  EXPECT_ERROR_HAS(paged(on, {3, 1, 4, 1}).status(), "input 'tk': dims [3,1,4,1] must be [B, 1, pages, 1] = [2, 1,");
  EXPECT_ERROR_HAS(paged(on, {2, 1, 4, 1}, {2, 1, 3, 1}).status(),
                   "input 'v' and input 'tv': the V cache [10,2,16,64] and its table [2,1,3,1] must have the K cache's "
                   "blocks and block size [10,2,16,64] and its table's pages [2,1,4,1]");
  // Found by review: pages * block size past int32 (cuDNN's lengths and max_seq_len_kv are int32).
  EXPECT_ERROR_HAS(paged(on, {2, 1, 1 << 28, 1}, {2, 1, 1 << 28, 1}).status(), "keys, past cuDNN's int32 lengths");
  Json no_padding = on;
  no_padding.erase("padding_mask");
  EXPECT_FALSE(paged(no_padding).is_ok());
}

// A chunked prefill: ragged q and o over paged caches. Two offsets (q's, o's) after the page tables; q and o
// token-major; k and v the caches, not ragged.
TEST(SpecErrors, SdpaRaggedOverPagedCaches) {
  const auto spec = [](bool token_major_q, std::vector<std::string> offsets) {
    Json tensors = {{"q", t({2, 4, 8, 64})}, {"k", t({10, 2, 16, 64})}, {"v", t({10, 2, 16, 64})},
                    {"lq", t({2, 1, 1, 1})}, {"lkv", t({2, 1, 1, 1})},  {"tk", t({2, 1, 4, 1})},
                    {"tv", t({2, 1, 4, 1})}};
    if (token_major_q) tensors["q"]["strides"] = {8 * 4 * 64, 64, 4 * 64, 1};
    std::vector<std::string> inputs = {"q", "k", "v", "lq", "lkv", "tk", "tv"};
    for (const std::string& o : offsets) {
      if (!tensors.contains(o)) tensors[o] = t({3, 1, 1, 1});
      inputs.push_back(o);
    }
    for (auto& [name, tj] : tensors.items())
      if (name != "q" && name != "k" && name != "v") tj["dtype"] = "int32";
    Json s = one_node(tensors, "sdpa", inputs,
                      {{"padding_mask", true},
                       {"paged_kv", true},
                       {"ragged", true},
                       {"causal", true},
                       {"diagonal_alignment", "bottom_right"}});
    s["io_dtype"] = "bf16";
    s["nodes"][0]["outputs"] = {"y", "lse"};
    s["tensors"]["lse"] = {{"dtype", "float32"}};
    s["outputs"] = {"y", "lse"};
    return parse(s);
  };
  auto g = spec(true, {"oq", "oo"});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const SdpaInputs r = sdpa_inputs(g->nodes[0]);
  EXPECT_EQ(r.page_table_v, 6);
  EXPECT_EQ(r.ragged_q, 7);
  EXPECT_EQ(r.ragged_k, -1);
  EXPECT_EQ(r.ragged_v, -1);
  EXPECT_EQ(r.ragged_o, 8);
  const TensorDesc& o = g->tensors[static_cast<size_t>(g->nodes[0].outputs[0])];
  EXPECT_EQ(o.strides, (std::vector<int64_t>{8 * 4 * 64, 64, 4 * 64, 1})) << "an undeclared ragged o is token-major";
  auto sig = compute_signature(*g);
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  EXPECT_NE(sig->canonical.find("ragged=1"), std::string::npos) << sig->canonical;
  // Four offsets are the dense form's: over paged caches the count names the two.
  EXPECT_ERROR_HAS(spec(true, {"oq", "ok", "ov", "oo"}).status(),
                   "the offsets of q, k, v and o (over paged caches of q and o)");
  EXPECT_ERROR_HAS(spec(false, {"oq", "oo"}).status(), "input 'q': strides");
  // q and o may share one offset tensor where their tokens match (D = Dv).
  EXPECT_TRUE(spec(true, {"oq", "oq"}).is_ok());
  // Three offsets (k's and v's shared, as the dense form allows) make the count of the form with a bias: the
  // length read as the bias is named, not a page table's dims (found by review).
  EXPECT_ERROR_HAS(spec(true, {"oq", "okv", "oo"}).status(),
                   "input 'lq': int32, where 10 inputs put the bias: is an input missing or extra?");
}

// A bias with one input too few after it reads as seq_len_q (the count of the form without a bias): named by its
// dtype, before the page tables' checks (found by review).
TEST(SpecErrors, SdpaBiasReadAsALengthIsNamed) {
  Json tensors = {{"q", t({2, 4, 8, 64})},    {"k", t({10, 2, 16, 64})}, {"v", t({10, 2, 16, 64})},
                  {"bias", t({2, 4, 8, 64})}, {"lq", t({2, 1, 1, 1})},   {"lkv", t({2, 1, 1, 1})},
                  {"tk", t({2, 1, 4, 1})}};
  for (const char* n : {"lq", "lkv", "tk"}) tensors[n]["dtype"] = "int32";
  Json s = one_node(tensors, "sdpa", {"q", "k", "v", "bias", "lq", "lkv", "tk"},
                    {{"padding_mask", true}, {"paged_kv", true}});
  s["io_dtype"] = "bf16";
  EXPECT_ERROR_HAS(parse(s).status(), "input 'bias': bf16, where 7 inputs put seq_len_q (no bias)");
}

TEST(SpecErrors, Fp8AndMixedDtypes) {
  Json s = one_node({{"a", t({16, 32}, "fp8_e4m3")}, {"b", t({32, 8}, "fp8_e5m2")}}, "matmul", {"a", "b"});
  s["tensors"]["y"] = {{"dtype", "bf16"}};
  EXPECT_TRUE(parse(s).is_ok()) << parse(s).status().message();
  s["tensors"]["y"] = {{"dtype", "fp8_e4m3"}};
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul): output 'y': an fp8 matmul writes fp16, bf16 or fp32");
  s["tensors"]["y"] = {{"dtype", "fp16"}};
  s["nodes"][0]["compute_dtype"] = "fp16";
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul): attribute 'compute_dtype': fp16 is not supported");
  s = one_node({{"a", t({16, 32}, "fp16")}, {"b", t({32, 8}, "bf16")}}, "matmul", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "input 'a' is fp16 but input 'b' is bf16");
  s = one_node({{"a", t({16, 32}, "int32")}, {"b", t({32, 8}, "int32")}}, "matmul", {"a", "b"});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (matmul): input 'a': dtype int32 is not supported by matmul");
}

TEST(SpecErrors, UnknownAndMissingNames) {
  Json s = one_node({{"x", t({2, 3})}}, "relu", {"nope"});
  EXPECT_ERROR_HAS(parse(s).status(),
                   "t.json: node 'n1' (relu): input 'nope' is not a declared tensor or a node output");
  s = one_node({{"x", t({2, 3})}}, "frobnicate", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: node 'n1': unknown op 'frobnicate'");
  s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  s["outputs"] = {"z"};
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: output 'z' is not a declared tensor or a node output");
  s = one_node({{"x", t({2, 3})}, {"extra", t({1})}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: tensor 'extra' is dangling");
  s = one_node({{"x", {{"dims", {"batch", 3}}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: tensor 'x': dim 0 uses dynamic dim 'batch', which is not declared");
  s = one_node({{"x", t({2, 0})}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: tensor 'x': dim 1 is 0; dims must be positive");
}

TEST(SpecErrors, UnknownKeysAreNamed) {
  Json s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  s["colour"] = "blue";
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: spec: unknown key 'colour'");
  s = one_node({{"x", {{"dims", {2, 3}}, {"shape", {2, 3}}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: tensor 'x': unknown key 'shape'");
  s = one_node({{"x", t({2, 3})}}, "relu", {"x"}, {{"alpha", 1}});
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: node 'n1' (relu): unknown key 'alpha'");
  s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  s.erase("nodes");
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: spec: missing key 'nodes'");
}

TEST(SpecErrors, DuplicateKeysAreNamed) {
  Status s =
      parse_spec_string(R"({"tensors": {"x": {"dims": [2], "dims": [3]}}, "nodes": [], "outputs": []})", "dup.json")
          .status();
  EXPECT_ERROR_HAS(s, "dup.json: duplicate key 'dims' in 'x'");
  s = parse_spec_string(R"({"tensors": {}, "nodes": [], "tensors": {}, "outputs": []})", "dup.json").status();
  EXPECT_ERROR_HAS(s, "dup.json: duplicate key 'tensors' in 'spec'");
  // The same key in two different objects is fine.
  Json ok = one_node({{"x", t({2, 3})}, {"y", {{"dtype", "fp16"}}}}, "relu", {"x"});
  EXPECT_TRUE(parse(ok).is_ok()) << parse(ok).status().message();
}

TEST(SpecErrors, TypesAndValues) {
  Json s = one_node({{"x", {{"dims", {2, 3.5}}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(),
                   "tensor 'x': attribute 'dims'[1]: expected an integer, got a number with a fraction");
  s = one_node({{"x", {{"dims", {2, 3}}, {"dtype", "fp64"}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "tensor 'x': attribute 'dtype': unknown dtype 'fp64'");
  s = one_node({{"x", {{"dims", {2, 3, 4}}, {"layout", "NWHC"}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "tensor 'x': attribute 'layout': unknown layout 'NWHC'");
  s = one_node({{"x", {{"dims", {2, 3}}, {"layout", "NCHW"}, {"strides", {3, 1}}}}}, "relu", {"x"});
  EXPECT_ERROR_HAS(parse(s).status(), "tensor 'x': give 'layout' or 'strides', not both");
  s = one_node({{"x", t({2, 3})}}, "sdpa", {"x"}, {{"causal", 1}});
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (sdpa): attribute 'causal': expected true or false");
  s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  s["nodes"][0]["inputs"] = "x";
  EXPECT_ERROR_HAS(parse(s).status(), "node 'n1' (relu): key 'inputs': expected an array of tensor names");
  s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  s["tensors"]["x"]["dims"] = {2, 18446744073709551615ull};
  const char* range = " is out of range (an integer here is from -9223372036854775808 to 9223372036854775807)";
  EXPECT_ERROR_HAS(parse(s).status(), "tensor 'x': attribute 'dims'[1]: 18446744073709551615 is out of range", range);
  // Past 64 bits the parser reads a double: what it read is named as such, with the same range (found by a
  // hostile trial: -18446744073709551617 was printed as -18446744073709551616, with only the upper bound).
  s = Json::parse(R"({"tensors": {"x": {"dims": [2, 3], "strides": [-18446744073709551617, 1]}},
                          "nodes": [{"name": "n1", "op": "relu", "inputs": ["x"], "outputs": ["y"]}],
                          "outputs": ["y"]})");
  EXPECT_ERROR_HAS(parse(s).status(), "tensor 'x': attribute 'strides'[0]: about -1.8446744073709552e+19 is out",
                   range);
}

TEST(SpecPin, PinIsKeptAndNotPartOfTheSignature) {
  Json s = one_node({{"x", t({2, 3})}}, "relu", {"x"});
  auto plain = parse(s);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_TRUE(plain->pin.empty());
  s["pin"] = "eng41_k2=4_k13=0";
  auto pinned = parse(s);
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().message();
  EXPECT_EQ(pinned->pin, "eng41_k2=4_k13=0");
  EXPECT_EQ(compute_signature(*plain)->structure, compute_signature(*pinned)->structure);
  for (const char* other : {"blt66_cluster=2_splitk=1_tile=18", "knl1_blocks=4_threads=256"}) {  // cuBLASLt's, Kiln's
    s["pin"] = other;
    auto p = parse(s);
    ASSERT_TRUE(p.is_ok()) << other << ": " << p.status().message();
    EXPECT_EQ(p->pin, other);
  }
  s["pin"] = "blt66_Tile=18";
  EXPECT_ERROR_HAS(parse(s).status(), "'blt66_Tile=18' is not an engine configuration identity");
  s["pin"] = "engine41";
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: spec: key 'pin': 'engine41' is not an engine configuration identity");
  s["pin"] = 41;
  EXPECT_ERROR_HAS(parse(s).status(), "t.json: spec: key 'pin'");
}

TEST(SpecErrors, MalformedJsonNamesTheByteAndLine) {
  Status s = parse_spec_string("{\n  \"name\": \"x\",\n  \"tensors\": {,}\n}", "bad.json").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(s, "bad.json: malformed JSON at byte", "line 3");
  EXPECT_ERROR_HAS(parse_spec_string("", "empty.json").status(), "empty.json: malformed JSON");
  EXPECT_ERROR_HAS(parse_spec_string("[1,2]", "arr.json").status(), "arr.json: spec: expected an object, got an array");
}

// Found by spec_fuzz: nlohmann throws out_of_range (not parse_error) for "3E984"; it was reported as Internal.
TEST(SpecRegression, NumberOverflowIsBadInputNotInternal) {
  for (const char* text : {"3E984", "{\"tensors\": {\"x\": {\"dims\": [1e999]}}}"}) {
    Status s = parse_spec_string(text, "big.json").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_ERROR_HAS(s, "big.json: malformed JSON", "number overflow");
  }
}

TEST(SpecFile, MissingFileIsNotFound) {
  Status s = parse_spec_file("/nonexistent/spec.json").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_ERROR_HAS(s, "/nonexistent/spec.json: cannot open spec file");
}

TEST(SpecFile, ForwardReferencesAndUndeclaredIntermediates) {
  // Nodes in reverse order; the intermediate "h" is never declared.
  Json s = {{"tensors", {{"x", t({4, 8})}}},
            {"nodes",
             {{{"name", "b"}, {"op", "exp"}, {"inputs", {"h"}}, {"outputs", {"y"}}},
              {{"name", "a"}, {"op", "relu"}, {"inputs", {"x"}}, {"outputs", {"h"}}}}},
            {"outputs", {"y"}}};
  StatusOr<Graph> g = parse(s);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(out_shape(g), (V{4, 8}));
  EXPECT_EQ(g->dtype_of(g->find_tensor("h")), DataType::kFloat32);
}

TEST(SpecExamples, AllExamplesValidate) {
  for (const char* dir : {"/examples/", "/examples/small/"})
    for (const char* name : {"conv_bias_relu", "matmul_bias_gelu", "matmul_amax", "layer_norm", "rms_norm", "sdpa_fwd",
                             "conv_dgrad", "conv_wgrad"}) {
      std::string path = std::string(KILN_SOURCE_DIR) + dir + name + ".json";
      StatusOr<Graph> g = parse_spec_file(path, ValidateOptions{90});
      EXPECT_TRUE(g.is_ok()) << g.status().message();
    }
  StatusOr<Graph> g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(out_shape(g), (V{32, 64, 56, 56}));
  EXPECT_EQ(g->tensors[g->find_tensor("y")].strides, (V{64 * 56 * 56, 1, 56 * 64, 64}));
  g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/matmul_amax.json");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(out_shape(g, "amax"), (V{1, 1, 1}));
  EXPECT_EQ(g->dtype_of(g->find_tensor("amax")), DataType::kFloat32);
  EXPECT_EQ(g->dtype_of(g->find_tensor("y")), DataType::kFloat16);
  g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/fp8_scale.json");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(out_shape(g, "scale"), (V{1, 1, 1}));
  EXPECT_EQ(g->dtype_of(g->find_tensor("scale")), DataType::kFloat32);
}

}  // namespace
}  // namespace kiln
