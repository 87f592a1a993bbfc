// Signature properties: stable pinned value, independence of names/order/whitespace, sensitivity to
// everything that changes the computation, dynamic dims in the shape key only.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/graph_test_util.h"
#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// conv + bias + relu, NHWC, batch dynamic: the shape of examples/conv_bias_relu.json, smaller.
Json conv_spec() {
  return Json::parse(R"({
    "name": "cbr", "io_dtype": "fp16", "dynamic": {"batch": 8},
    "tensors": {
      "x": {"dims": ["batch", 16, 12, 12], "layout": "NHWC"},
      "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"},
      "b": {"dims": [1, 32, 1, 1], "layout": "NHWC"}
    },
    "nodes": [
      {"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"], "padding": [1, 1]},
      {"name": "bias", "op": "bias_add", "inputs": ["c", "b"], "outputs": ["cb"]},
      {"name": "act", "op": "relu", "inputs": ["cb"], "outputs": ["y"]}
    ],
    "outputs": ["y"]
  })");
}

GraphSignature sig_of(const std::string& text) {
  StatusOr<Graph> g = parse_spec_string(text, "s.json");
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  if (!g.is_ok()) return {};
  StatusOr<GraphSignature> s = compute_signature(*g);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? *s : GraphSignature{};
}
GraphSignature sig_of(const Json& j) { return sig_of(j.dump()); }

TEST(Signature, PinnedValue) {
  // A change here changes every stored plan's key: bump the canonical version line on purpose, never by accident.
  GraphSignature s = sig_of(conv_spec());
  EXPECT_EQ(s.structure, "382d24e207f76c59e0c7f15914cfa2b4");
  EXPECT_EQ(s.shape_key, "batch=8");
  EXPECT_EQ(s.canonical,
            "kiln-graph 1\n"
            "tensor t0 input dtype=fp16 dims=[$0,16,12,12] layout=NHWC\n"
            "tensor t1 input dtype=fp16 dims=[32,16,3,3] layout=NHWC\n"
            "node n0 conv_fprop compute=fp32 pre_padding=[1,1] post_padding=[1,1] stride=[1,1] dilation=[1,1] "
            "groups=1 in=[t0,t1] out=t2\n"
            "tensor t2 virtual dtype=fp32 dims=[$0,32,12,12] layout=NHWC\n"
            "tensor t3 input dtype=fp16 dims=[1,32,1,1] layout=NHWC\n"
            "node n1 bias_add compute=fp32 in=[t2,t3] out=t4\n"
            "tensor t4 virtual dtype=fp32 dims=[$0,32,12,12] layout=NHWC\n"
            "node n2 relu compute=fp32 in=[t4] out=t5\n"
            "tensor t5 output 0 dtype=fp16 dims=[$0,32,12,12] layout=NHWC\n");
}

TEST(Signature, IndependentOfNamesKeyOrderAndWhitespace) {
  GraphSignature base = sig_of(conv_spec());
  // Whitespace and key order.
  Json j = conv_spec();
  Json reordered;
  for (const char* k : {"outputs", "nodes", "tensors", "dynamic", "io_dtype", "name"}) reordered[k] = j[k];
  EXPECT_EQ(sig_of(reordered.dump(7)).structure, base.structure);
  EXPECT_EQ(sig_of(j.dump()).structure, base.structure);
  // Tensor, node, symbol and graph names.
  std::string text = j.dump();
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{{"\"x\"", "\"input\""},
                                                                          {"\"w\"", "\"filter\""},
                                                                          {"\"cb\"", "\"z\""},
                                                                          {"\"conv\"", "\"c1\""},
                                                                          {"\"cbr\"", "\"other\""},
                                                                          {"\"batch\"", "\"n\""}}) {
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  }
  EXPECT_EQ(sig_of(text).structure, base.structure) << text;
  // Node declaration order; tensor declaration order.
  Json n = conv_spec();
  std::swap(n["nodes"][0], n["nodes"][2]);
  Json t = n["tensors"];
  n["tensors"] = Json::object();
  for (const char* k : {"b", "w", "x"}) n["tensors"][k] = t[k];
  EXPECT_EQ(sig_of(n).structure, base.structure);
  // Spelling out defaults: explicit dtypes equal to the defaults, stride and dilation of 1, padding as pre/post.
  Json d = conv_spec();
  d["tensors"]["x"]["dtype"] = "fp16";
  d["nodes"][0]["stride"] = {1, 1};
  d["nodes"][0]["dilation"] = 1;
  d["nodes"][0].erase("padding");
  d["nodes"][0]["pre_padding"] = 1;
  d["nodes"][0]["post_padding"] = {1, 1};
  d["nodes"][0]["compute_dtype"] = "fp32";
  d["intermediate_dtype"] = "fp32";
  EXPECT_EQ(sig_of(d).structure, base.structure);
}

// A stored plan binds tensors by canonical number (cuDNN uid = id + 1): the same tensor, by role, must get
// the same number whatever order tensors and nodes were declared in. Found on the H200: a plan stored for
// matmul_amax.json ran for the same-signature first segment of fp8_recipe.json, whose tensors are
// declared in another order, and wrote amax into y's buffer (an illegal address) while ids were indices.
TEST(Signature, TensorIdsFollowRolesNotDeclarationOrder) {
  auto ids_by_name = [](const Json& spec) {
    auto g = parse_spec_string(spec.dump(), "t.json");
    EXPECT_TRUE(g.is_ok()) << g.status().message();
    std::map<std::string, int> out;
    if (!g.is_ok()) return out;
    auto sig = compute_signature(*g);
    EXPECT_TRUE(sig.is_ok());
    EXPECT_EQ(sig->tensor_ids.size(), g->tensors.size());
    std::set<int> distinct(sig->tensor_ids.begin(), sig->tensor_ids.end());
    EXPECT_EQ(distinct.size(), g->tensors.size());  // a numbering, every tensor once
    for (size_t i = 0; i < g->tensors.size(); ++i) out[g->tensors[i].name] = sig->tensor_ids[i];
    return out;
  };
  Json base = conv_spec();
  auto a = ids_by_name(base);
  Json n = conv_spec();
  std::swap(n["nodes"][0], n["nodes"][2]);
  Json t = n["tensors"];
  n["tensors"] = Json::object();
  for (const char* k : {"b", "w", "x"}) n["tensors"][k] = t[k];
  EXPECT_EQ(ids_by_name(n), a);
}

TEST(Signature, ChangesWithEverythingThatMatters) {
  std::string base = sig_of(conv_spec()).structure;
  std::vector<std::function<void(Json&)>> edits = {
      [](Json& j) { j["io_dtype"] = "bf16"; },
      [](Json& j) { j["intermediate_dtype"] = "fp16"; },
      [](Json& j) { j["tensors"]["b"]["dtype"] = "fp32"; },
      [](Json& j) { j["tensors"]["x"]["layout"] = "NCHW"; },
      [](Json& j) {
        j["tensors"]["b"].erase("layout");
        j["tensors"]["b"]["strides"] = {32, 1, 32, 32};
      },
      [](Json& j) {
        j["nodes"][0]["padding"] = {0, 0};
      },
      [](Json& j) {
        j["nodes"][0]["stride"] = {2, 2};
      },
      [](Json& j) {
        j["nodes"][0]["dilation"] = {2, 2};
      },
      [](Json& j) { j["nodes"][2]["op"] = "gelu_erf"; },
      [](Json& j) {
        j["tensors"]["w"]["dims"] = {32, 16, 5, 5};
        j["nodes"][0]["padding"] = 2;
      },
      [](Json& j) {
        j["tensors"]["x"]["dims"] = {"batch", 16, 14, 14};
      },
      [](Json& j) {
        j["tensors"]["x"]["dims"][0] = 8;
        j.erase("dynamic");
      },  // same value, no longer dynamic
      [](Json& j) {
        j["nodes"][1]["compute_dtype"] = "fp16";
        j["nodes"][1]["op"] = "add";
      },
      [](Json& j) {
        j["outputs"] = {"y", "c"};
      },
  };
  std::set<std::string> seen = {base};
  for (size_t i = 0; i < edits.size(); ++i) {
    Json j = conv_spec();
    edits[i](j);
    StatusOr<Graph> g = parse_spec_string(j.dump(), "e.json");
    if (!g.is_ok()) {
      // compute_dtype fp16 on a pointwise op is rejected; that edit still proves the check exists.
      EXPECT_NE(g.status().message().find("compute_dtype"), std::string::npos) << i << ": " << g.status().message();
      continue;
    }
    std::string s = compute_signature(*g)->structure;
    EXPECT_TRUE(seen.insert(s).second) << "edit " << i << " did not change the signature";
  }
}

// A by-value scalar is baked into the plan cuDNN Frontend builds (graph_lowering.cc hands it over as a
// float): a graph scaled by 0.5 and the same graph scaled by 2.0 must not share a plan, in the store or in a
// Planner's memory. Values that round to one float are one computation and share one.
TEST(Signature, ByValueScalarValueIsPartOfTheStructure) {
  auto scaled = [](double v) {
    Json j = Json::parse(R"({"name": "s", "io_dtype": "fp16",
      "tensors": {"x": {"dims": [1, 8, 8]}, "s": {"value": 0.5}},
      "nodes": [{"name": "n", "op": "scale", "inputs": ["x", "s"], "outputs": ["y"]}], "outputs": ["y"]})");
    j["tensors"]["s"]["value"] = v;
    return sig_of(j);
  };
  const GraphSignature half = scaled(0.5), two = scaled(2.0);
  EXPECT_NE(half.structure, two.structure);
  EXPECT_NE(half.canonical.find("by_value=0.5"), std::string::npos) << half.canonical;
  EXPECT_EQ(half.shape_key, two.shape_key);
  // 0.1 and the next double up are one float: one computation, one structure.
  EXPECT_EQ(scaled(0.1).structure, scaled(std::nextafter(0.1, 1.0)).structure);
  EXPECT_NE(scaled(0.1).structure, scaled(0.1000001).structure);
}

// Op attributes that change what is computed change the structure: two graphs differing only there must
// never share plans (issue 14 item 6: a signature leaving out SDPA's `causal` fails here; one leaving out a
// reduction's `axes` does not, as the axes are implied by the dims: PinnedReductionAndSdpaNodeLines sees it).
TEST(Signature, OpAttributesThatChangeTheComputationChangeIt) {
  auto sig = [](const std::string& spec) {
    auto g = parse_spec_string(spec, "a.json");
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    auto s = compute_signature(*g);
    EXPECT_TRUE(s.is_ok());
    return s.is_ok() ? s->structure : std::string();
  };
  auto sdpa = [](const std::string& attrs) {
    return R"({"name": "a", "io_dtype": "bf16", "tensors": {"q": {"dims": [1, 2, 32, 16]}, "k": {"dims": [1, 2, 32, 16]},
      "v": {"dims": [1, 2, 32, 16]}}, "nodes": [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"])" +
           attrs + "}], \"outputs\": [\"o\"]}";
  };
  const std::string causal = sig(sdpa(R"(, "causal": true)")), plain = sig(sdpa(""));
  EXPECT_NE(causal, plain);
  EXPECT_NE(sig(sdpa(R"(, "attn_scale": 0.5)")), plain);
  // The band as it applies: a right bound of 0 is causal however given; a window, a right bound and the
  // bottom-right alignment each sign apart.
  EXPECT_EQ(sig(sdpa(R"(, "right_bound": 0)")), causal);
  EXPECT_EQ(sig(sdpa(R"(, "causal": true, "right_bound": 0)")), causal);
  EXPECT_EQ(sig(sdpa(R"(, "causal": true, "diagonal_alignment": "top_left")")), causal);
  const std::string window = sig(sdpa(R"(, "causal": true, "left_bound": 8)"));
  EXPECT_NE(window, causal);
  EXPECT_NE(window, sig(sdpa(R"(, "causal": true, "left_bound": 9)")));
  EXPECT_NE(sig(sdpa(R"(, "right_bound": 4)")), plain);
  EXPECT_NE(sig(sdpa(R"(, "right_bound": 4)")), sig(sdpa(R"(, "right_bound": 5)")));
  EXPECT_NE(sig(sdpa(R"(, "causal": true, "diagonal_alignment": "bottom_right")")), causal);
  auto reduce = [](const std::string& op, const std::string& axes, const std::string& out_dims) {
    return R"({"name": "r", "io_dtype": "fp16", "tensors": {"x": {"dims": [4, 8, 16]}, "y": {"dims": )" + out_dims +
           R"(, "dtype": "fp32"}}, "nodes": [{"name": "red", "op": ")" + op +
           R"(", "inputs": ["x"], "outputs": ["y"], "axes": )" + axes + R"(}], "outputs": ["y"]})";
  };
  const std::string sum2 = sig(reduce("reduce_sum", "[2]", "[4, 8, 1]"));
  EXPECT_NE(sum2, sig(reduce("reduce_sum", "[1, 2]", "[4, 1, 1]")));
  EXPECT_NE(sum2, sig(reduce("reduce_max", "[2]", "[4, 8, 1]")));
  auto norm = [](const std::string& eps) {
    return R"({"name": "n", "io_dtype": "fp16", "tensors": {"x": {"dims": [8, 64, 1, 1]}, "g": {"dims": [1, 64, 1, 1]}},
      "nodes": [{"name": "rms", "op": "rms_norm", "inputs": ["x", "g"], "outputs": ["y"], "epsilon": )" +
           eps + R"(}], "outputs": ["y"]})";
  };
  EXPECT_NE(sig(norm("1e-5")), sig(norm("1e-6")));
}

// The node lines of docs/spec.md "Canonical text" for a reduction and an SDPA, pinned like PinnedValue's
// conv: a reduction's `axes` (normalized: sorted, non-negative) and SDPA's `causal` are written out. The
// axes are implied by the output's dims (a reduced axis has extent 1), so two reductions that differ only
// there differ in their dims too, and OpAttributesThatChangeTheComputationChangeIt cannot see a signature
// that leaves them out (issue 14 item 6); such a signature would still change every stored reduction's key.
TEST(Signature, PinnedReductionAndSdpaNodeLines) {
  GraphSignature red = sig_of(std::string(R"({"name": "r", "io_dtype": "fp16", "tensors": {"x": {"dims": [4, 8, 16]},
    "y": {"dims": [4, 1, 1], "dtype": "fp32"}}, "nodes": [{"name": "red", "op": "reduce_sum", "inputs": ["x"],
    "outputs": ["y"], "axes": [-1, 1]}], "outputs": ["y"]})"));
  EXPECT_EQ(red.canonical, "kiln-graph 1\n"
                           "tensor t0 input dtype=fp16 dims=[4,8,16] layout=row_major\n"
                           "node n0 reduce_sum compute=fp32 axes=[1,2] in=[t0] out=t1\n"
                           "tensor t1 output 0 dtype=fp32 dims=[4,1,1] layout=row_major\n");
  GraphSignature attn =
      sig_of(std::string(R"({"name": "a", "io_dtype": "bf16", "tensors": {"q": {"dims": [1, 2, 32, 16]},
    "k": {"dims": [1, 2, 32, 16]}, "v": {"dims": [1, 2, 32, 16]}}, "nodes": [{"name": "attn", "op": "sdpa",
    "inputs": ["q", "k", "v"], "outputs": ["o"], "causal": true}], "outputs": ["o"]})"));
  EXPECT_NE(attn.canonical.find("node n0 sdpa compute=fp32 causal=1 attn_scale=0.25 in=[t0,t1,t2] out=t3\n"),
            std::string::npos)
      << attn.canonical;
}

TEST(Signature, DynamicValueChangesOnlyTheShapeKey) {
  Json a = conv_spec();
  Json b = conv_spec();
  b["dynamic"]["batch"] = 64;
  GraphSignature sa = sig_of(a), sb = sig_of(b);
  EXPECT_EQ(sa.structure, sb.structure);
  EXPECT_EQ(sa.shape_key, "batch=8");
  EXPECT_EQ(sb.shape_key, "batch=64");
  // A static graph has an empty shape key.
  Json c = conv_spec();
  c.erase("dynamic");
  c["tensors"]["x"]["dims"][0] = 8;
  EXPECT_EQ(sig_of(c).shape_key, "");
}

// A conv whose input height and width are dynamic: its output extents are derived from them, so they are
// written "~", and every image size is one structure (buckets and the kernel cache span sizes).
Json image_spec(int64_t h, int64_t w, int stride = 1) {
  Json j = conv_spec();
  j["dynamic"] = {{"h", h}, {"w", w}};
  j["tensors"]["x"]["dims"] = {8, 16, "h", "w"};
  j["nodes"][0]["stride"] = {stride, stride};
  return j;
}

TEST(Signature, DerivedExtentsAreSymbolicSoEveryImageSizeIsOneStructure) {
  GraphSignature a = sig_of(image_spec(12, 12)), b = sig_of(image_spec(20, 16));
  EXPECT_EQ(a.structure, b.structure) << a.canonical << "\n" << b.canonical;
  EXPECT_EQ(a.shape_key, "h=12,w=12");
  EXPECT_EQ(b.shape_key, "h=20,w=16");
  EXPECT_NE(a.canonical.find("tensor t2 virtual dtype=fp32 dims=[8,32,~,~] layout=NHWC"), std::string::npos)
      << a.canonical;
  EXPECT_NE(a.canonical.find("tensor t5 output 0 dtype=fp16 dims=[8,32,~,~] layout=NHWC"), std::string::npos)
      << "the bias and the activation keep the derived extents: " << a.canonical;
  // A strided conv too, where neighbouring sizes give the same output extent (7 and 8 -> 4) and 1 -> 1.
  GraphSignature s7 = sig_of(image_spec(7, 9, 2)), s8 = sig_of(image_spec(8, 9, 2)), s1 = sig_of(image_spec(1, 1, 2));
  EXPECT_EQ(s7.structure, s8.structure);
  EXPECT_EQ(s7.structure, s1.structure);
  EXPECT_NE(s7.structure, a.structure) << "the stride is structure";
  // A dynamic batch alone derives nothing: the pinned text above has numbers for the output's extents.
  EXPECT_EQ(sig_of(conv_spec()).canonical.find('~'), std::string::npos);
}

TEST(Signature, RevalidateWithNewDynamicValue) {
  // The runtime changes a dynamic dim on a validated graph and validates again.
  StatusOr<Graph> g = parse_spec_string(conv_spec().dump(), "s.json");
  ASSERT_TRUE(g.is_ok());
  std::string structure = compute_signature(*g)->structure;
  g->dynamic_dims["batch"] = 64;
  ASSERT_TRUE(validate_graph(*g).is_ok()) << validate_graph(*g).message();
  int y = g->find_tensor("y");
  EXPECT_EQ(g->tensors[y].dims[0].value, 64);
  EXPECT_EQ(g->tensors[y].strides[0], 32 * 12 * 12);
  EXPECT_EQ(compute_signature(*g)->structure, structure);
  EXPECT_EQ(compute_signature(*g)->shape_key, "batch=64");
}

TEST(Signature, SymbolsAreCanonicalAndShared) {
  Json j = Json::parse(R"({"dynamic": {"m": 4, "n": 4},
    "tensors": {"a": {"dims": ["m", 8]}, "b": {"dims": ["n", 8]}},
    "nodes": [{"name": "s", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})");
  GraphSignature two = sig_of(j);
  EXPECT_NE(two.canonical.find("$1"), std::string::npos);
  EXPECT_EQ(two.shape_key, "m=4,n=4");
  j["tensors"]["b"]["dims"][0] = "m";
  j["dynamic"].erase("n");
  GraphSignature one = sig_of(j);
  EXPECT_EQ(one.canonical.find("$1"), std::string::npos);
  EXPECT_NE(one.structure, two.structure);  // one shared symbol is a different contract than two
}

TEST(Signature, OutputOrderAndOperandOrder) {
  Json j = Json::parse(R"({"tensors": {"a": {"dims": [4, 8]}, "b": {"dims": [4, 8]}},
    "nodes": [{"name": "d", "op": "sub", "inputs": ["a", "b"], "outputs": ["y"]},
              {"name": "e", "op": "exp", "inputs": ["a"], "outputs": ["z"]}], "outputs": ["y", "z"]})");
  std::string base = sig_of(j).structure;
  Json k = j;
  k["outputs"] = {"z", "y"};
  EXPECT_EQ(sig_of(k).structure, base);  // outputs are sorted structurally
  Json l = j;
  l["nodes"][0]["inputs"] = {"b", "a"};  // a - b vs b - a: a reads both, exp reads the first
  EXPECT_NE(sig_of(l).structure, base);
}

TEST(Signature, RejectsUnvalidatedGraph) {
  Graph g;
  g.nodes.push_back(Node{});
  EXPECT_FALSE(compute_signature(g).is_ok());
  Graph empty;
  EXPECT_FALSE(compute_signature(empty).is_ok());
}

}  // namespace
}  // namespace kiln
