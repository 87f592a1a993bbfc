// Host tier: the known-defect table (lower/known_defects.h) and its rewrites. Each rewrite must be an
// equivalent graph over the same memory: checked here with the host reference on the caller's buffers.
#include <gtest/gtest.h>

#include <set>

#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/reference.h"
#include "lower/known_defects.h"
#include "lower/rewrite_test_util.h"

namespace kiln {
namespace {

using lower_detail::known_defects;
using lower_detail::work_around_known_defects;

const std::string kRoot = KILN_SOURCE_DIR;

std::string add_spec(const std::string& a, const std::string& b, const std::string& op = "add") {
  return R"({"name": "pw", "io_dtype": "fp32", "tensors": {"a": {"dims": )" + a + R"(}, "b": {"dims": )" + b +
         R"(}}, "nodes": [{"name": "n", "op": ")" + op +
         R"(", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})";
}

Graph parse(const std::string& text) {
  auto g = parse_spec_string(text, "t.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

std::vector<int64_t> dims(const Graph& g, const std::string& name) { return g.tensors[g.find_tensor(name)].shape(); }
std::vector<int64_t> strides(const Graph& g, const std::string& name) { return g.tensors[g.find_tensor(name)].strides; }

using V = std::vector<int64_t>;

TEST(KnownDefects, TableEntriesAreCompleteAndTheirExamplesShowTheDefect) {
  std::set<std::string> ids;
  for (const auto& d : known_defects()) {
    EXPECT_TRUE(ids.insert(d.id).second) << d.id << " listed twice";
    EXPECT_FALSE(d.seen_on.empty()) << d.id;
    EXPECT_NE(std::string(d.gpu_test).find(d.id), std::string::npos) << d.id;
    auto g = parse_spec_string(d.example_spec, d.id);
    ASSERT_TRUE(g.is_ok()) << d.id << ": " << g.status().to_string();
    EXPECT_FALSE(d.find(*g).empty()) << d.id << ": its example does not show it";
  }
}

// Regression: [4,16,64] + [1,1,64] was lowered as written and cuDNN 9.19 wrote only the first batch
// (in every engine configuration); it is lowered as [1,64,64] + [1,1,64] now.
TEST(KnownDefects, PointwiseVectorBroadcast_4x16x64Plus1x1x64IsLoweredAs1x64x64) {
  Graph g = parse(add_spec("[4, 16, 64]", "[1, 1, 64]"));
  auto w = work_around_known_defects(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_EQ(w->applied.size(), 1u);
  EXPECT_NE(w->applied[0].find("pointwise_vector_broadcast: node 'n' (add): input 'b' [1,1,64]"), std::string::npos)
      << w->applied[0];
  EXPECT_EQ(dims(w->graph, "a"), (V{1, 64, 64}));
  EXPECT_EQ(strides(w->graph, "a"), (V{4096, 64, 1}));
  EXPECT_EQ(dims(w->graph, "b"), (V{1, 1, 64}));
  EXPECT_EQ(strides(w->graph, "b"), (V{64, 64, 1}));
  EXPECT_EQ(dims(w->graph, "y"), (V{1, 64, 64}));
  // The caller's graph is untouched: same signature, same buffers.
  EXPECT_EQ(dims(g, "a"), (V{4, 16, 64}));
  expect_same_memory_results(g, w->graph);
}

TEST(KnownDefects, PointwiseVectorBroadcast_OtherShapesFoldTheAxesTheOperandBroadcastsOver) {
  struct Case {
    std::string a, b;
    V a_dims, b_dims;
  };
  for (const Case& c : std::vector<Case>{
           {"[4, 16, 64]", "[4, 1, 1]", {1, 4, 1024}, {1, 4, 1}},        // folds axes 1 and 2
           {"[64, 64]", "[1, 64]", {1, 64, 64}, {1, 1, 64}},             // rank 2: only a unit axis in front
           {"[1, 1, 64]", "[4, 16, 64]", {1, 1, 64}, {1, 64, 64}},       // the vector first
           {"[2, 3, 4, 64]", "[1, 1, 1, 64]", {1, 24, 64}, {1, 1, 64}},  // rank 4 folds to rank 3
           {"[4, 16, 64]", "[64]", {1, 64, 64}, {1, 1, 64}},             // numpy rank broadcast
       }) {
    SCOPED_TRACE(c.a + " + " + c.b);
    Graph g = parse(add_spec(c.a, c.b));
    auto w = work_around_known_defects(g);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_EQ(w->applied.size(), 1u);
    EXPECT_EQ(dims(w->graph, "a"), c.a_dims);
    EXPECT_EQ(dims(w->graph, "b"), c.b_dims);
    EXPECT_TRUE(known_defects()[0].find(w->graph).empty());
    expect_same_memory_results(g, w->graph);
  }
}

TEST(KnownDefects, PointwiseVectorBroadcast_AChainOfPointwiseOpsIsFoldedWhole) {
  Graph g =
      parse(R"({"name": "chain", "io_dtype": "fp32", "tensors": {"x": {"dims": [4, 16, 64]}, "b": {"dims": [1, 1, 64]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["t"]},
              {"name": "n", "op": "mul", "inputs": ["t", "b"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = work_around_known_defects(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_EQ(w->applied.size(), 1u);
  EXPECT_EQ(dims(w->graph, "t"), (V{1, 64, 64}));
  expect_same_memory_results(g, w->graph);
}

// No two adjacent axes can be folded: refused, with the reason, rather than computed wrong.
TEST(KnownDefects, PointwiseVectorBroadcast_NoFoldIsNotSupportedWithTheReason) {
  Graph g = parse(add_spec("[4, 16, 64]", "[1, 16, 1]"));
  auto w = work_around_known_defects(g);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotSupported);
  const std::string& m = w.status().message();
  EXPECT_NE(m.find("graph 'pw': node 'n' (add): input 'b' [1,16,1] broadcast into output 'y' [4,16,64]"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("known defect pointwise_vector_broadcast"), std::string::npos) << m;
  EXPECT_NE(m.find("no two adjacent axes"), std::string::npos) << m;
  // The same through lowering: deviceless compile refuses it before cuDNN builds anything.
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  LowerTarget target;
  target.profile = &*profile;
  auto lg = LoweredGraph::create(g, target);
  ASSERT_FALSE(lg.is_ok());
  EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported);
  // Rows of `a` padded apart (batch stride 2048, not 16 x 64): axes 0 and 1 are not one run of memory.
  Graph padded =
      parse(R"({"name": "pad", "io_dtype": "fp32", "tensors": {"a": {"dims": [4, 16, 64], "strides": [2048, 64, 1]},
    "b": {"dims": [1, 1, 64]}}, "nodes": [{"name": "n", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})");
  EXPECT_EQ(work_around_known_defects(padded).status().code(), StatusCode::kNotSupported);
}

// What cuDNN computes right is lowered as written (the shapes the H200 runs gave right answers for).
TEST(KnownDefects, PointwiseVectorBroadcast_ShapesCudnnGetsRightAreLeftAlone) {
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{{"[1, 64, 64]", "[1, 1, 64]"},
                                                                      {"[4, 16, 64]", "[1, 16, 64]"},
                                                                      {"[4, 16, 64]", "[4, 1, 64]"},
                                                                      {"[4, 16, 64]", "[4, 16, 1]"},
                                                                      {"[4, 16, 64]", "[1, 1, 1]"},
                                                                      {"[4, 1, 64]", "[1, 16, 64]"}}) {
    Graph g = parse(add_spec(a, b));
    auto w = work_around_known_defects(g);
    ASSERT_TRUE(w.is_ok()) << a << " + " << b << ": " << w.status().to_string();
    EXPECT_TRUE(w->applied.empty()) << a << " + " << b;
    EXPECT_EQ(dims(w->graph, "a"), dims(g, "a"));
  }
  // Channel-last (NHWC strides on NCHW dims), as a conv's bias add runs on its own in the unfused
  // alternative: computed right on the H200 (tune.gpu.Unfused), left alone.
  {
    Graph nhwc =
        parse(R"({"name": "nhwc", "io_dtype": "fp16", "tensors": {"a": {"dims": [2, 16, 8, 8], "layout": "NHWC"},
      "b": {"dims": [1, 16, 1, 1], "layout": "NHWC"}, "y": {"layout": "NHWC"}}, "nodes": [{"name": "n", "op": "add",
      "inputs": ["a", "b"], "outputs": ["y"]}], "outputs": ["y"]})");
    auto w = work_around_known_defects(nhwc);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_TRUE(w->applied.empty());
  }
  // A bias after a matmul runs in other engines (right at batch 4): not a pointwise-only graph.
  Graph mm =
      parse(R"({"name": "mm", "io_dtype": "fp16", "tensors": {"a": {"dims": [4, 16, 32]}, "w": {"dims": [4, 32, 64]},
    "bias": {"dims": [1, 1, 64]}}, "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["c"]},
    {"name": "bias", "op": "add", "inputs": ["c", "bias"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = work_around_known_defects(mm);
  ASSERT_TRUE(w.is_ok());
  EXPECT_TRUE(w->applied.empty());
}

// Lowering applies it: the deviceless H200 build lowers the rewrite and says so; the Kiln graph (and so
// the signature plans are stored under) is the caller's.
TEST(KnownDefects, LoweringUsesTheRewriteAndReportsIt) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  Graph g = parse(known_defects()[0].example_spec);
  LowerTarget target;
  target.profile = &*profile;
  auto lg = LoweredGraph::create(g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  ASSERT_EQ(lg->workarounds().size(), 1u);
  EXPECT_NE(lg->workarounds()[0].find("pointwise_vector_broadcast"), std::string::npos);
  Graph fine = parse(add_spec("[4, 16, 64]", "[1, 16, 64]"));
  auto plain = LoweredGraph::create(fine, target);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_TRUE(plain->workarounds().empty());
}

}  // namespace
}  // namespace kiln
