// Host tier: the canonical rules (lower/canonicalize.h). Each rewrite must describe the same memory: checked
// with the host reference on the caller's buffers; and what cuDNN runs right as written is left alone.
#include <gtest/gtest.h>

#include <set>

#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"
#include "lower/canonicalize.h"
#include "lower/rewrite_test_util.h"

namespace kiln {
namespace {

using lower_detail::canonical_rules;
using lower_detail::rewrite_for_cudnn;
using V = std::vector<int64_t>;

const std::string kRoot = KILN_SOURCE_DIR;

Graph parse(const std::string& text) {
  auto g = parse_spec_string(text, "t.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

V dims(const Graph& g, const std::string& name) { return g.tensors[g.find_tensor(name)].shape(); }
V strides(const Graph& g, const std::string& name) { return g.tensors[g.find_tensor(name)].strides; }

// One pointwise node over `x` (and `b` when `b_dims` is not empty), io dtype fp32.
std::string pointwise_spec(const std::string& op, const std::string& x_dims, const std::string& b_dims = "") {
  std::string tensors = R"("x": {"dims": )" + x_dims + "}";
  std::string inputs = R"(["x"])";
  if (!b_dims.empty()) {
    tensors += R"(, "b": {"dims": )" + b_dims + "}";
    inputs = R"(["x", "b"])";
  }
  return R"({"name": "pw", "io_dtype": "fp32", "tensors": {)" + tensors + R"(}, "nodes": [{"name": "n", "op": ")" + op +
         R"(", "inputs": )" + inputs + R"(, "outputs": ["y"]}], "outputs": ["y"]})";
}

std::string applied_text(const lower_detail::DefectWorkaround& w) {
  std::string s;
  for (const std::string& a : w.applied) s += a + "; ";
  return s;
}

TEST(Canonicalize, RulesAreCompleteAndTheirExamplesMatch) {
  std::set<std::string> ids;
  for (const auto& r : canonical_rules()) {
    EXPECT_TRUE(ids.insert(r.id).second) << r.id << " listed twice";
    EXPECT_FALSE(r.seen_on.empty()) << r.id;
    EXPECT_NE(std::string(r.evidence).find("H200"), std::string::npos) << r.id << ": evidence names no device";
    EXPECT_EQ(std::string(r.gpu_test), std::string("lower.gpu.Table/CanonicalRules.WorkedAroundOnThisGpu/") + r.id);
    auto g = parse_spec_string(r.example_spec, r.id);
    ASSERT_TRUE(g.is_ok()) << r.id << ": " << g.status().to_string();
    EXPECT_FALSE(r.find(*g).empty()) << r.id << ": its example does not match it";
    for (const auto& d : lower_detail::known_defects()) EXPECT_NE(std::string(d.id), r.id) << "also a known defect";
  }
}

// Regression: relu on a rank-2 [256,4096] tensor was lowered as written and cuDNN 9.19 wrote the right
// values in the first row only (every engine, H200); it is lowered as [1,256,4096] now.
TEST(Canonicalize, Rank2PointwiseIsLoweredAtRank3) {
  Graph g = parse(pointwise_spec("relu", "[256, 4096]"));
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_EQ(w->applied.size(), 1u) << applied_text(*w);
  EXPECT_EQ(w->applied[0], "pointwise_rank_below_3: tensor 'x' [256,4096] (rank 2), lowered at rank 3");
  EXPECT_EQ(dims(w->graph, "x"), (V{1, 256, 4096}));
  EXPECT_EQ(strides(w->graph, "x"), (V{256 * 4096, 4096, 1}));
  EXPECT_EQ(dims(w->graph, "y"), (V{1, 256, 4096}));
  // The caller's graph is untouched (its signature, its buffers).
  EXPECT_EQ(dims(g, "x"), (V{256, 4096}));
  expect_same_memory_results(g, w->graph);
}

TEST(Canonicalize, Rank1AndChainsAreLiftedToo) {
  Graph one = parse(pointwise_spec("sigmoid", "[1000]"));
  auto w1 = rewrite_for_cudnn(one);
  ASSERT_TRUE(w1.is_ok()) << w1.status().to_string();
  EXPECT_EQ(dims(w1->graph, "x"), (V{1, 1, 1000}));
  EXPECT_EQ(strides(w1->graph, "x"), (V{1000, 1000, 1}));
  expect_same_memory_results(one, w1->graph);

  Graph chain = parse(R"({"name": "chain", "io_dtype": "fp16", "compute_dtype": "fp32",
    "tensors": {"x": {"dims": [4, 4]}, "b": {"dims": [4, 4]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["t1"]},
              {"name": "a", "op": "add", "inputs": ["t1", "b"], "outputs": ["t2"]},
              {"name": "s", "op": "tanh", "inputs": ["t2"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = rewrite_for_cudnn(chain);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  for (const char* t : {"x", "b", "t1", "t2", "y"}) EXPECT_EQ(dims(w->graph, t), (V{1, 4, 4})) << t;
  expect_same_memory_results(chain, w->graph);
}

// A strided (not packed) rank-2 view keeps its strides; the new axis steps over the whole view.
TEST(Canonicalize, AStridedRank2ViewKeepsItsMemory) {
  Graph g = parse(R"({"name": "pw", "io_dtype": "fp32", "tensors": {"x": {"dims": [4, 4], "strides": [8, 1]}},
    "nodes": [{"name": "n", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(dims(w->graph, "x"), (V{1, 4, 4}));
  EXPECT_EQ(strides(w->graph, "x"), (V{32, 8, 1}));
  expect_same_memory_results(g, w->graph);
}

// A transposed operand (column-major strides): the new axis steps over its whole span, not its first row's.
TEST(Canonicalize, ATransposedOperandGetsItsSpanAsTheNewStride) {
  Graph g = parse(R"({"name": "mm", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
    "tensors": {"a": {"dims": [16, 64]}, "w": {"dims": [64, 32], "strides": [1, 64]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(strides(w->graph, "w"), (V{2048, 1, 64}));
  EXPECT_EQ(strides(w->graph, "a"), (V{1024, 64, 1}));
  expect_same_memory_results(g, w->graph);
}

// An operand of lower rank broadcasts right-aligned (Kiln's rule): lifted to the output's rank, after
// which the vector-broadcast defect's rewrite applies as it does to a [1,1,64] operand.
TEST(Canonicalize, ALowerRankOperandIsRightAligned) {
  Graph g = parse(pointwise_spec("add", "[4, 16, 64]", "[64]"));
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_EQ(w->applied.size(), 2u) << applied_text(*w);
  EXPECT_EQ(w->applied[0].rfind("pointwise_rank_below_3: tensor 'b' [64] (rank 1)", 0), 0u) << w->applied[0];
  EXPECT_EQ(w->applied[1].rfind("pointwise_vector_broadcast:", 0), 0u) << w->applied[1];
  EXPECT_EQ(dims(w->graph, "x"), (V{1, 64, 64}));
  EXPECT_EQ(dims(w->graph, "b"), (V{1, 1, 64}));
  expect_same_memory_results(g, w->graph);
}

TEST(Canonicalize, Rank2MatmulGetsAUnitBatchWithItsEpilogue) {
  Graph g = parse(canonical_rules()[1].example_spec);
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_EQ(w->applied.size(), 1u) << applied_text(*w);
  EXPECT_EQ(w->applied[0], "matmul_rank_2: tensor 'a' [16,64] (rank 2), lowered at rank 3");
  EXPECT_EQ(dims(w->graph, "a"), (V{1, 16, 64}));
  EXPECT_EQ(dims(w->graph, "w"), (V{1, 64, 64}));
  EXPECT_EQ(dims(w->graph, "bias"), (V{1, 1, 64}));
  EXPECT_EQ(dims(w->graph, "y"), (V{1, 16, 64}));
  expect_same_memory_results(g, w->graph);
  // A rank-2 weight shared by a batched activation: the weight broadcasts over the batch.
  Graph b = parse(R"({"name": "mm", "io_dtype": "fp32", "tensors": {"a": {"dims": [3, 8, 16]}, "w": {"dims": [16, 4]}},
    "nodes": [{"name": "mm", "op": "matmul", "inputs": ["a", "w"], "outputs": ["y"]}], "outputs": ["y"]})");
  auto wb = rewrite_for_cudnn(b);
  ASSERT_TRUE(wb.is_ok()) << wb.status().to_string();
  EXPECT_EQ(dims(wb->graph, "w"), (V{1, 16, 4}));
  EXPECT_EQ(dims(wb->graph, "a"), (V{3, 8, 16}));
  expect_same_memory_results(b, wb->graph);
}

// What cuDNN runs right as written is lowered as written: rank-3 pointwise, batched matmuls, convs, norms,
// and graphs with ops whose attributes name axes (reductions), which the rule does not renumber.
TEST(Canonicalize, GraphsAlreadyInCanonicalFormAreLeftAlone) {
  std::vector<std::string> specs = {pointwise_spec("relu", "[1, 256, 4096]"),
                                    pointwise_spec("add", "[4, 16, 64]", "[4, 16, 64]"),
                                    R"({"name": "red", "io_dtype": "fp32", "tensors": {"x": {"dims": [16, 64]}},
      "nodes": [{"name": "r", "op": "reduce_sum", "inputs": ["x"], "outputs": ["y"], "axes": [1]}], "outputs": ["y"]})"};
  for (const char* f : {"conv_bias_relu", "matmul_bias_gelu", "layer_norm", "sdpa_fwd", "matmul_amax"}) {
    auto text = parse_spec_file(kRoot + "/examples/small/" + f + ".json");
    ASSERT_TRUE(text.is_ok()) << f << ": " << text.status().to_string();
    auto w = rewrite_for_cudnn(*text);
    ASSERT_TRUE(w.is_ok()) << f << ": " << w.status().to_string();
    EXPECT_TRUE(w->applied.empty()) << f << ": " << applied_text(*w);
  }
  for (const std::string& s : specs) {
    auto g = parse_spec_string(s, "t.json");
    if (!g.is_ok()) {
      ADD_FAILURE() << s << ": " << g.status().to_string();
      continue;
    }
    auto w = rewrite_for_cudnn(*g);
    ASSERT_TRUE(w.is_ok()) << s << ": " << w.status().to_string();
    EXPECT_TRUE(w->applied.empty()) << s << ": " << applied_text(*w);
  }
}

// Dynamic dims keep their symbols through the lift (the dynamic-shape build and stopgaps read them).
TEST(Canonicalize, DynamicDimsKeepTheirSymbols) {
  Graph g = parse(R"({"name": "dyn", "io_dtype": "fp16", "compute_dtype": "fp32", "dynamic": {"tokens": 64},
    "tensors": {"x": {"dims": ["tokens", 128]}}, "nodes": [{"name": "n", "op": "relu", "inputs": ["x"],
    "outputs": ["y"]}], "outputs": ["y"]})");
  auto w = rewrite_for_cudnn(g);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const TensorDesc& x = w->graph.tensors[w->graph.find_tensor("x")];
  ASSERT_EQ(x.dims.size(), 3u);
  EXPECT_EQ(x.dims[1].symbol, "tokens");
  EXPECT_EQ(w->graph.dynamic_dims, g.dynamic_dims);
}

// Lowering applies it: the deviceless H200 build lowers the rank-3 graph and says so, for pointwise and
// for the matmul cuDNN had no configuration for.
TEST(Canonicalize, LoweringUsesItAndReportsIt) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  LowerTarget target;
  target.profile = &*profile;
  for (const auto& r : canonical_rules()) {
    Graph g = parse(r.example_spec);
    auto lg = LoweredGraph::create(g, target);
    if (!r.rewrite(g, "example").is_ok()) {  // a rule that refuses: lowering refuses, naming why
      ASSERT_FALSE(lg.is_ok()) << r.id;
      EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported) << lg.status().to_string();
      continue;
    }
    ASSERT_TRUE(lg.is_ok()) << r.id << ": " << lg.status().to_string();
    bool named = false;
    for (const std::string& w : lg->workarounds()) named = named || w.rfind(r.id, 0) == 0;
    EXPECT_TRUE(named) << r.id << " not among the workarounds applied to its example";
  }
}

// The rules that refuse say why, naming the graph, the node or tensor and the form cuDNN would need.
TEST(Canonicalize, RefusalsNameWhatCuDnnCannotRun) {
  Graph column = parse(R"({"name": "col", "io_dtype": "fp32", "tensors": {"x": {"dims": [4, 64, 128]}},
    "nodes": [{"name": "r", "op": "reduce_amax", "inputs": ["x"], "outputs": ["y"], "axes": [0]}], "outputs": ["y"]})");
  auto c = rewrite_for_cudnn(column);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(c.status().message().find("graph 'col': node 'r' (reduce_amax): the reduced axes are not the innermost in "
                                      "memory (in memory order, [4,8192] -> [1,8192])"),
            std::string::npos)
      << c.status().message();

  Graph strided = parse(R"({"name": "st", "io_dtype": "fp16", "tensors": {"x": {"dims": [4, 100, 1],
    "strides": [900, 9, 1]}}, "nodes": [{"name": "t", "op": "tanh", "inputs": ["x"], "outputs": ["y"]}],
    "outputs": ["y"]})");
  auto st = rewrite_for_cudnn(strided);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(
      st.status().message().find("graph 'st': tensor 'x' [4,100,1] strides [900,9,1] (its innermost axis steps 9 "
                                 "elements): cuDNN 9.19's pointwise kernels read the innermost axis as contiguous"),
      std::string::npos)
      << st.status().message();
}

// A graph cuDNN offers nothing for, and the registry knows: the deviceless H200 build's refusal names the gap after
// cuDNN's own words.
TEST(Canonicalize, ARefusalByCuDnnNamesTheEngineCoverageGap) {
  auto profile = load_device_profile(kRoot + "/profiles/h200.json");
  ASSERT_TRUE(profile.is_ok());
  LowerTarget target;
  target.profile = &*profile;
  Graph g = parse(R"({"name": "red16", "io_dtype": "fp16", "tensors": {"x": {"dims": [64, 128]}},
    "nodes": [{"name": "r", "op": "reduce_sum", "inputs": ["x"], "outputs": ["y"], "axes": [1]}], "outputs": ["y"]})");
  auto lg = LoweredGraph::create(g, target);
  ASSERT_TRUE(lg.is_ok()) << lg.status().to_string();
  Status st = lg->build_heuristic();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_NE(st.message().find(" [engine coverage gap reduction_output_not_fp32: node 'r' (reduce_sum) writes 'y' as "
                              "fp16 (declare it \"dtype\": \"fp32\""),
            std::string::npos)
      << st.message();
}

// pointwise_long_rows: rows past 2^18 elements are cut into rows of the largest divisor up to 2^18, the
// cut's outer part taking a unit axis's place; where no divisor or unit axis exists the graph is refused,
// naming the limit, before cuDNN sees it (relu over [1, 2^31-1] bf16 failed at launch, exit 10).
TEST(Canonicalize, LongPointwiseRowsAreCutOrRefusedBeforeTheGpu) {
  auto relu = [](const std::string& dims, const std::string& b = "") {
    return parse(R"({"name": "r", "io_dtype": "bf16", "tensors": {"x": {"dims": )" + dims + "}" +
                 (b.empty() ? "" : R"(, "b": {"dims": )" + b + "}") + R"(}, "nodes": [{"name": "n", "op": ")" +
                 (b.empty() ? "relu" : "add") + R"(", "inputs": )" + (b.empty() ? R"(["x"])" : R"(["x", "b"])") +
                 R"(, "outputs": ["y"]}], "outputs": ["y"]})");
  };
  auto form = [](const Graph& g) { return lower_detail::rewrite_for_cudnn(g); };
  // [1, 2^20]: lifted to [1,1,2^20], cut into [1, 4, 2^18].
  auto a = form(relu("[1, 1048576]"));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  const TensorDesc& x = a->graph.tensors[static_cast<size_t>(a->graph.find_tensor("x"))];
  EXPECT_EQ(x.shape(), (std::vector<int64_t>{1, 4, 262144}));
  EXPECT_EQ(x.strides, (std::vector<int64_t>{1048576, 262144, 1}));
  EXPECT_NE(applied_text(*a).find("pointwise_long_rows"), std::string::npos) << applied_text(*a);
  // Rows of many rows: [64, 2^22] + a broadcast row [1, 2^22]: the unit first axis takes the cut.
  auto b = form(relu("[64, 4194304]", "[1, 4194304]"));
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  const Graph& bg = b->graph;
  EXPECT_EQ(bg.tensors[static_cast<size_t>(bg.find_tensor("x"))].shape(), (std::vector<int64_t>{64, 16, 262144}));
  EXPECT_EQ(bg.tensors[static_cast<size_t>(bg.find_tensor("b"))].shape(), (std::vector<int64_t>{1, 16, 262144}));
  // An operand broadcast along the row beside the cut rows would be known defect pointwise_vector_broadcast
  // ([4,2,150000] + [4,1,1], which cuDNN reads wrong): refused, naming both.
  auto c = form(relu("[1, 4, 300000]", "[1, 4, 1]"));
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(c.status().message().find("longer than 262144 elements"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("meets known cuDNN defect pointwise_vector_broadcast"), std::string::npos)
      << c.status().message();
  // Neither leading axis a unit, both dense: they are merged, [3, 5, 2^20] as [15, 4, 2^18].
  auto merged = form(relu("[3, 5, 1048576]"));
  ASSERT_TRUE(merged.is_ok()) << merged.status().to_string();
  EXPECT_EQ(merged->graph.tensors[static_cast<size_t>(merged->graph.find_tensor("x"))].shape(),
            (std::vector<int64_t>{15, 4, 262144}));
  // Cut rows that a known defect's fold joins again ([4,4,262144] + [4,1,1] folds into rows of 2^20): refused.
  auto folded = form(relu("[4, 4, 262144]", "[4, 1, 1]"));
  ASSERT_FALSE(folded.is_ok());
  EXPECT_NE(folded.status().message().find("after the known-defect rewrites (pointwise_vector_broadcast"),
            std::string::npos)
      << folded.status().message();
  // 2^31-1 is prime: refused before the GPU, naming the limit.
  auto p = form(relu("[1, 2147483647]"));
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(p.status().message().find("fail to launch on rows (the innermost axis) longer than 262144 elements"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("2147483647 has no divisor from 1024 to 262144"), std::string::npos)
      << p.status().message();
  // Rows at the limit stay as they are.
  auto at = form(relu("[1, 262144]"));
  ASSERT_TRUE(at.is_ok());
  EXPECT_EQ(applied_text(*at).find("pointwise_long_rows"), std::string::npos) << applied_text(*at);
}

}  // namespace
}  // namespace kiln
