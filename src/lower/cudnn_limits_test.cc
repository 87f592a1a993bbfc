// Host tier: cuDNN's fixed limits (kiln/graph/limits.h) are known before cuDNN is called. Lowering is
// deviceless against the recorded H200 (profiles/h200.json): the operation graph is really built by cuDNN
// Frontend, whose std::array of MAX_OPGRAPH_OPS operations (1.23: 50, unchecked) overflowed (SIGSEGV) for
// one more. The tests take the limit from the build's frontend (cudnn_max_operations: 1.23 50, 1.32 250).
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "cli_test_util.h"
#include "kiln/graph/decompose.h"
#include "kiln/graph/limits.h"
#include "kiln/lower/cudnn_limits.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/segments.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const std::string kRoot = KILN_SOURCE_DIR;

const DeviceProfile& h200() {
  static const DeviceProfile p = [] {
    auto loaded = load_device_profile(kRoot + "/profiles/h200.json");
    EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    return loaded.is_ok() ? *loaded : DeviceProfile{};
  }();
  return p;
}

StatusOr<LoweredGraph> lower_for_h200(const Graph& g) {
  LowerTarget target;
  target.profile = &h200();
  return LoweredGraph::create(g, target);
}

// x [4,16,64] -> n relus -> y (a spec, as users write it).
std::string chain_spec(int n) {
  std::ostringstream s;
  s << R"({"name": "chain)" << n << R"(", "io_dtype": "fp32", "tensors": {"x": {"dims": [4, 16, 64]}}, "nodes": [)";
  for (int i = 0; i < n; ++i) {
    std::string in = i == 0 ? "x" : "t" + std::to_string(i - 1), out = i == n - 1 ? "y" : "t" + std::to_string(i);
    s << (i ? "," : "") << R"({"name": "n)" << i << R"(", "op": "relu", "inputs": [")" << in << R"("], "outputs": [")"
      << out << R"("]})";
  }
  s << R"(], "outputs": ["y"]})";
  return s.str();
}

Graph chain(int n) {
  auto g = parse_spec_string(chain_spec(n), "chain.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

const int kMax = static_cast<int>(cudnn_max_operations());

TEST(CudnnLimits, TheLimitsAreTheFrontendsOwn) {
  EXPECT_TRUE(kMax == 50 || kMax == 250) << kMax;  // MAX_OPGRAPH_OPS: frontend 1.23 or 1.32
  EXPECT_EQ(limits::kCudnnDimMax, 8u);             // CUDNN_DIM_MAX; plan.cc static_asserts it
  EXPECT_EQ(limits::kMaxRank, limits::kCudnnDimMax);
}

// Regression: a valid graph of 51 pointwise nodes crashed the process with SIGSEGV inside frontend 1.23.
TEST(CudnnLimits, OperationLimit_51NodeChainIsNotSupportedNotASegfault) {
  const int n = kMax + 1;
  Graph g = chain(n);
  EXPECT_EQ(cudnn_operation_count(g), n);
  EXPECT_TRUE(exceeds_cudnn_graph_limits(g));
  auto lg = lower_for_h200(g);
  ASSERT_FALSE(lg.is_ok());
  EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported);
  const std::string& m = lg.status().message();
  const std::string N = std::to_string(n);
  EXPECT_NE(m.find("graph 'chain" + N + "': needs " + N + " cuDNN operations (" + N + " nodes), over the limit of " +
                   std::to_string(kMax) + " operations"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("MAX_OPGRAPH_OPS"), std::string::npos) << m;
  EXPECT_NE(m.find("segments"), std::string::npos) << m;
}

// The model is exact at the boundary: 50 operations is one operation graph, built for real.
TEST(CudnnLimits, FiftyNodeChainBuildsItsOperationGraph) {
  Graph g = chain(kMax);
  EXPECT_FALSE(exceeds_cudnn_graph_limits(g));
  auto lg = lower_for_h200(g);
  EXPECT_TRUE(lg.is_ok()) << lg.status().to_string();
}

TEST(CudnnLimits, LongChainIsCutIntoSegmentsThatEachLower) {
  Graph g = chain(2 * kMax + 20);
  auto groups = cudnn_segment_groups(g);
  ASSERT_TRUE(groups.is_ok()) << groups.status().to_string();
  auto parts = partition_graph(g, *groups, g.intermediate_dtype);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0].graph.nodes.size(), static_cast<size_t>(kMax));
  EXPECT_EQ((*parts)[1].graph.nodes.size(), static_cast<size_t>(kMax));
  EXPECT_EQ((*parts)[2].graph.nodes.size(), 20u);
  for (const GraphPart& p : *parts) {
    EXPECT_LE(cudnn_operation_count(p.graph), kMax) << p.graph.name;
    auto lg = lower_for_h200(p.graph);
    EXPECT_TRUE(lg.is_ok()) << p.graph.name << ": " << lg.status().to_string();
  }
  // graph_segments (what run, tune and compile cut by) gives the same parts.
  auto segs = graph_segments(g);
  ASSERT_TRUE(segs.is_ok()) << segs.status().to_string();
  EXPECT_EQ(segs->size(), 3u);
}

// A matmul whose output the caller reads and another node consumes costs an IDENTITY copy as well; the
// cut counts it for every matmul, since a segment boundary can make any output one that is read back.
TEST(CudnnLimits, MatmulOutputsReadBackCountTheirCopy) {
  std::ostringstream s;
  s << R"({"name": "mm", "io_dtype": "fp16", "tensors": {"a": {"dims": [1, 64, 64]}, "b": {"dims": [1, 64, 64]}}, "nodes": [)";
  s << R"({"name": "mm", "op": "matmul", "inputs": ["a", "b"], "outputs": ["c"]},)";
  s << R"({"name": "act", "op": "relu", "inputs": ["c"], "outputs": ["y"]}], "outputs": ["c", "y"]})";
  auto g = parse_spec_string(s.str(), "mm.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(cudnn_operation_count(*g), 3);
}

TEST(CudnnLimits, SdpaCountsItsCompositeExpansion) {
  auto g = parse_spec_file(kRoot + "/examples/small/sdpa_fwd.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_TRUE(g->nodes[0].sdpa.causal);
  EXPECT_GE(cudnn_operation_count(*g), 12);  // bmm1, scale, 4 mask ops, 5 softmax ops, bmm2
  g->nodes[0].sdpa.causal = false;
  EXPECT_GE(cudnn_operation_count(*g), 8);
}

// Attention tensors cuDNN cannot read are refused by lowering with the tensor named (NotSupported), before the
// frontend is asked: q in an NHWC layout (its last dim not contiguous).
TEST(CudnnLimits, AttentionTensorsWithoutAContiguousLastDimAreNotSupported) {
  auto spec = [](const std::string& q_layout) {
    return R"({"name": "a", "io_dtype": "bf16",
    "tensors": {"q": {"dims": [1, 2, 64, 64], "layout": ")" +
           q_layout + R"("}, "k": {"dims": [1, 2, 64, 64]}, "v": {"dims": [1, 2, 64, 64]},
                "o": {"dims": [1, 2, 64, 64]}, "do": {"dims": [1, 2, 64, 64]},
                "stats": {"dims": [1, 2, 64, 1], "dtype": "float32"}},
    "nodes": [{"name": "bwd", "op": "sdpa_backward", "inputs": ["q", "k", "v", "o", "do", "stats"],
               "outputs": ["dq", "dk", "dv"]}],
    "outputs": ["dq", "dk", "dv"]})";
  };
  auto ok = parse_spec_string(spec("row_major"), "a.json");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(check_cudnn_limits(*ok).is_ok()) << check_cudnn_limits(*ok).to_string();
  auto nhwc = parse_spec_string(spec("NHWC"), "a.json");
  ASSERT_TRUE(nhwc.is_ok()) << nhwc.status().to_string();
  Status st = check_cudnn_limits(*nhwc);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_NE(st.message().find("node 'bwd' (sdpa_backward): tensor 'q': strides [8192,1,128,2]"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("last dim contiguous"), std::string::npos) << st.message();
  EXPECT_EQ(lower_for_h200(*nhwc).status().code(), StatusCode::kNotSupported);
}

// A q whose rows are 65 fp8 elements apart (not a multiple of 16 bytes) is refused before the frontend, naming the
// tensor, its stride and its dim; 80 apart (80 bytes) passes.
TEST(CudnnLimits, AttentionStridesOffSixteenBytesAreNotSupported) {
  auto spec = [](int64_t row) {
    std::string s = R"({"name": "a", "io_dtype": "fp8_e4m3", "tensors": {"q": {"dims": [2, 8, 128, 64], "strides": [)" +
                    std::to_string(8 * 128 * row) + ", " + std::to_string(128 * row) + ", " + std::to_string(row) +
                    R"(, 1]}, "k": {"dims": [2, 2, 256, 64]}, "v": {"dims": [2, 2, 256, 64]},
                "o": {"dtype": "fp8_e4m3"}, "amax_o": {"dtype": "float32"})";
    for (const char* n : {"dq", "dk", "dv", "ds", "ss", "so"})
      s += std::string(R"(, ")") + n + R"(": {"dims": [1, 1, 1, 1], "dtype": "float32"})";
    return s +
           R"(}, "nodes": [{"name": "attn", "op": "sdpa_fp8", "inputs": ["q", "k", "v", "dq", "dk", "dv", "ds", "ss",
               "so"], "outputs": ["o", "amax_o"]}], "outputs": ["o", "amax_o"]})";
  };
  auto ok = parse_spec_string(spec(80), "a.json");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(check_cudnn_limits(*ok).is_ok()) << check_cudnn_limits(*ok).to_string();
  auto off = parse_spec_string(spec(65), "a.json");
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  const Status st = check_cudnn_limits(*off);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_NE(st.message().find("node 'attn' (sdpa_fp8): tensor 'q': stride 65 of dim 2 is 65 bytes, not a multiple "
                              "of 16"),
            std::string::npos)
      << st.message();
  // A backward's do is read 16 bytes at a time, its statistics are not: [1, 2, 5, 1] fp32 (20-byte rows) passes.
  auto bwd = [](int64_t do_row) {
    return R"({"name": "b", "io_dtype": "bf16", "tensors": {"q": {"dims": [1, 2, 5, 64]}, "k": {"dims": [1, 2, 5, 64]},
      "v": {"dims": [1, 2, 5, 64]}, "o": {"dims": [1, 2, 5, 64]}, "do": {"dims": [1, 2, 5, 64], "strides": [)" +
           std::to_string(2 * 5 * do_row) + ", " + std::to_string(5 * do_row) + ", " + std::to_string(do_row) +
           R"(, 1]}, "stats": {"dims": [1, 2, 5, 1], "dtype": "float32"}},
      "nodes": [{"name": "bwd", "op": "sdpa_backward", "inputs": ["q", "k", "v", "o", "do", "stats"],
                 "outputs": ["dq", "dk", "dv"]}], "outputs": ["dq", "dk", "dv"]})";
  };
  auto bwd_ok = parse_spec_string(bwd(64), "b.json");
  ASSERT_TRUE(bwd_ok.is_ok()) << bwd_ok.status().to_string();
  EXPECT_TRUE(check_cudnn_limits(*bwd_ok).is_ok()) << check_cudnn_limits(*bwd_ok).to_string();
  auto bwd_off = parse_spec_string(bwd(65), "b.json");
  ASSERT_TRUE(bwd_off.is_ok()) << bwd_off.status().to_string();
  const Status bst = check_cudnn_limits(*bwd_off);
  EXPECT_EQ(bst.code(), StatusCode::kNotSupported) << bst.to_string();
  EXPECT_NE(bst.message().find("tensor 'do': stride 325 of dim 1 is 650 bytes, not a multiple of 16"),
            std::string::npos)
      << bst.message();
}

// x [1,64,64] fp16 -> k relus, each an output (tests/sweep/regressions/fan_out_51_outputs.json at k = 51).
// With `from_node`, the relus read a first relu's output instead of x: the same width, one entrance node.
Graph fan_out(int k, bool from_node = false) {
  std::ostringstream s;
  s << R"({"name": "fan)" << k << R"(", "io_dtype": "fp16", "tensors": {"x": {"dims": [1, 64, 64]}}, "nodes": [)";
  if (from_node) s << R"({"name": "h", "op": "relu", "inputs": ["x"], "outputs": ["hx"]},)";
  for (int i = 0; i < k; ++i)
    s << (i ? "," : "") << R"({"name": "r)" << i << R"(", "op": "relu", "inputs": [")" << (from_node ? "hx" : "x")
      << R"("], "outputs": ["y)" << i << R"("]})";
  s << R"(], "outputs": [)";
  for (int i = 0; i < k; ++i) s << (i ? "," : "") << "\"y" << i << "\"";
  s << "]}";
  auto g = parse_spec_string(s.str(), "fan.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

// Issue 31: 51 relus of one input failed to build with "out of host memory" (exit 3), and 14 already took
// 8 s in cuDNN's pattern matcher. Past limits::kCudnnMaxEntranceNodes the graph is refused by lowering with
// the limit named, and cut into segments of at most that many entrance nodes, without asking cuDNN.
TEST(CudnnLimits, WideFanOutOfGraphInputsIsCutIntoSegments) {
  Graph g = fan_out(51);
  EXPECT_EQ(entrance_node_count(g), 51);
  EXPECT_TRUE(exceeds_cudnn_graph_limits(g));
  Status st = check_cudnn_limits(g);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_NE(st.message().find("graph 'fan51': 51 nodes read graph inputs only (entrance nodes), over the limit of " +
                              std::to_string(limits::kCudnnMaxEntranceNodes) + " per cuDNN operation graph"),
            std::string::npos)
      << st.message();
  auto lg = lower_for_h200(g);
  ASSERT_FALSE(lg.is_ok());
  EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported);

  auto d = segments_if_unfusable(g, nullptr);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  const size_t want = (51 + limits::kCudnnMaxEntranceNodes - 1) / limits::kCudnnMaxEntranceNodes;
  ASSERT_EQ(d->segments.size(), want);
  EXPECT_NE(d->why.find("entrance nodes"), std::string::npos) << d->why;
  size_t outputs = 0;
  for (const GraphPart& p : d->segments) {
    EXPECT_LE(entrance_node_count(p.graph), limits::kCudnnMaxEntranceNodes) << p.graph.name;
    EXPECT_FALSE(exceeds_cudnn_graph_limits(p.graph)) << p.graph.name;
    outputs += p.graph.outputs.size();
  }
  EXPECT_EQ(outputs, 51u);
  // Each segment is one operation graph cuDNN builds at once (deviceless, the H200 profile).
  auto first = lower_for_h200(d->segments.front().graph);
  EXPECT_TRUE(first.is_ok()) << first.status().to_string();
}

// A fan-out from a node's output is one entrance node but as many exit nodes: 51 of them failed with "out
// of host memory" too (deviceless, from 30). Cut into segments of at most kCudnnMaxExitNodes exits.
TEST(CudnnLimits, WideFanOutFromANodeIsCutByItsExitNodes) {
  Graph tree = fan_out(51, /*from_node=*/true);
  EXPECT_EQ(entrance_node_count(tree), 1);
  EXPECT_EQ(exit_node_count(tree), 51);
  EXPECT_TRUE(exceeds_cudnn_graph_limits(tree));
  EXPECT_NE(check_cudnn_limits(tree).message().find("51 nodes have an output no node reads (exit nodes), over the "
                                                    "limit of " +
                                                    std::to_string(limits::kCudnnMaxExitNodes)),
            std::string::npos)
      << check_cudnn_limits(tree).message();
  auto d = segments_if_unfusable(tree, nullptr);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  // h and 16 relus of it; then the other 35 read h from memory, which makes each an entrance node of its
  // segment: 8, 8, 8, 8 and 3.
  EXPECT_EQ(d->segments.size(), 6u);
  for (const GraphPart& p : d->segments) {
    EXPECT_LE(exit_node_count(p.graph), limits::kCudnnMaxExitNodes) << p.graph.name;
    EXPECT_FALSE(exceeds_cudnn_graph_limits(p.graph)) << p.graph.name;
    auto lg = lower_for_h200(p.graph);
    EXPECT_TRUE(lg.is_ok()) << p.graph.name << ": " << lg.status().to_string();
  }
}

// x -> relu a -> k relus of a -> added back together by a chain of adds: one entrance and one exit node,
// but k nodes reading a. The hostile trial of issue 31 found it at 24 took 24 s and 2.5 GB to finalize,
// 28 all of the host's memory, and from 30 "out of host memory".
Graph diamond(int k) {
  std::ostringstream s;
  s << R"({"name": "diamond)" << k << R"(", "io_dtype": "fp16", "tensors": {"x": {"dims": [1, 64, 64]}}, "nodes": [)"
    << R"({"name": "a", "op": "relu", "inputs": ["x"], "outputs": ["ax"]})";
  for (int i = 0; i < k; ++i)
    s << R"(,{"name": "r)" << i << R"(", "op": "relu", "inputs": ["ax"], "outputs": ["y)" << i << R"("]})";
  std::string prev = "y0";
  for (int i = 1; i < k; ++i) {
    const std::string out = "s" + std::to_string(i);
    s << R"(,{"name": "add)" << i << R"(", "op": "add", "inputs": [")" << prev << R"(", "y)" << i
      << R"("], "outputs": [")" << out << R"("]})";
    prev = out;
  }
  s << R"(], "outputs": [")" << prev << R"("]})";
  auto g = parse_spec_string(s.str(), "diamond.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

TEST(CudnnLimits, ManyReadersOfOneTensorAreCutIntoSegments) {
  Graph g = diamond(30);
  EXPECT_EQ(entrance_node_count(g), 1);
  EXPECT_EQ(exit_node_count(g), 1);
  EXPECT_EQ(max_tensor_readers(g), 30);
  EXPECT_TRUE(exceeds_cudnn_graph_limits(g));
  EXPECT_NE(check_cudnn_limits(g).message().find("30 nodes read one tensor, over the limit of " +
                                                 std::to_string(limits::kCudnnMaxTensorReaders)),
            std::string::npos)
      << check_cudnn_limits(g).message();
  auto d = segments_if_unfusable(g, nullptr);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_GE(d->segments.size(), 2u);
  size_t nodes = 0;
  for (const GraphPart& p : d->segments) {
    EXPECT_FALSE(exceeds_cudnn_graph_limits(p.graph)) << p.graph.name;
    nodes += p.graph.nodes.size();
    auto lg = lower_for_h200(p.graph);  // each segment is handed to cuDNN (deviceless) and comes back
    EXPECT_TRUE(lg.is_ok()) << p.graph.name << ": " << lg.status().to_string();
  }
  EXPECT_EQ(nodes, g.nodes.size());
  EXPECT_FALSE(exceeds_cudnn_graph_limits(diamond(static_cast<int>(limits::kCudnnMaxTensorReaders))));
}

// A graph and node named at the name limit still cut into parts whose names are within it, all distinct.
TEST(CudnnLimits, SegmentNamesStayWithinTheNameLimit) {
  Graph g = fan_out(20);
  g.name = std::string(limits::kMaxNameBytes, 'G');
  for (Node& n : g.nodes) n.name = std::string(limits::kMaxNameBytes - 4, 'n') + n.name.substr(0, 3);
  auto d = segments_if_unfusable(g, nullptr);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  std::set<std::string> names;
  for (const GraphPart& p : d->segments) {
    EXPECT_LE(p.graph.name.size(), limits::kMaxNameBytes);
    EXPECT_TRUE(names.insert(p.graph.name).second) << p.graph.name;
    EXPECT_TRUE(check_graph_limits(p.graph).is_ok()) << check_graph_limits(p.graph).message();
  }
}

// Exactly at the limits a graph stays whole, and a chain never counts more than one of each.
TEST(CudnnLimits, FanOutAtTheLimitsStaysWhole) {
  Graph tree = fan_out(static_cast<int>(limits::kCudnnMaxExitNodes), /*from_node=*/true);
  EXPECT_FALSE(exceeds_cudnn_graph_limits(tree));
  EXPECT_TRUE(exceeds_cudnn_graph_limits(fan_out(static_cast<int>(limits::kCudnnMaxExitNodes) + 1, true)));
  EXPECT_EQ(exit_node_count(chain(60)), 1);
  EXPECT_EQ(entrance_node_count(chain(60)), 1);
  Graph at = fan_out(static_cast<int>(limits::kCudnnMaxEntranceNodes));
  EXPECT_FALSE(exceeds_cudnn_graph_limits(at));
  EXPECT_TRUE(check_cudnn_limits(at).is_ok());
  auto groups = cudnn_segment_groups(at);
  ASSERT_TRUE(groups.is_ok());
  for (int gi : *groups) EXPECT_EQ(gi, 0);
  EXPECT_TRUE(exceeds_cudnn_graph_limits(fan_out(static_cast<int>(limits::kCudnnMaxEntranceNodes) + 1)));
}

// split_by_budget's entrance and exit budgets: a node reading an earlier group's output is an entrance of
// its own group, and a node reading its own group's output is not; a node read in its group is no exit.
TEST(CudnnLimits, EntranceBudgetCountsNodesReadingOnlyOutsideTheirGroup) {
  Graph g = fan_out(5);
  std::vector<int> base(g.nodes.size(), 0);
  std::vector<int64_t> cost(g.nodes.size(), 1);
  auto groups = split_by_budget(g, base, cost, 100, GroupShape{2, 100});
  ASSERT_TRUE(groups.is_ok());
  EXPECT_EQ(*groups, (std::vector<int>{0, 0, 1, 1, 2}));
  auto by_exits = split_by_budget(g, base, cost, 100, GroupShape{100, 3});
  ASSERT_TRUE(by_exits.is_ok());
  EXPECT_EQ(*by_exits, (std::vector<int>{0, 0, 0, 1, 1}));
  Graph c = chain(10);  // one entrance and one exit node, however small the budgets
  auto one = split_by_budget(c, std::vector<int>(c.nodes.size(), 0), std::vector<int64_t>(c.nodes.size(), 1), 100,
                             GroupShape{1, 1});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, std::vector<int>(10, 0));
}

// A node that alone needs more operations than a graph holds cannot be cut: NotSupported, named.
TEST(CudnnLimits, SegmentsOfTheOperationLimitNameANodeTooLargeAlone) {
  Graph g = chain(60);
  std::vector<int> base(g.nodes.size(), 0);
  std::vector<int64_t> cost(g.nodes.size(), 1);
  cost[7] = 51;
  auto groups = split_by_budget(g, base, cost, 50);
  ASSERT_FALSE(groups.is_ok());
  EXPECT_NE(groups.status().message().find("node 'n7' alone costs 51, over the budget of 50"), std::string::npos)
      << groups.status().message();
}

// run and tune decide segments before they touch cuDNN: no handle is needed past the operation limit.
TEST(CudnnLimits, SegmentsIfUnfusableCutsWithoutAskingCudnn) {
  Graph g = chain(kMax + 1);
  auto d = segments_if_unfusable(g, nullptr);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_EQ(d->segments.size(), 2u);
  EXPECT_NE(d->why.find("over the limit of " + std::to_string(kMax) + " operations"), std::string::npos) << d->why;
}

// Rank past CUDNN_DIM_MAX: validation refuses it (exit 2); lowering checks again for any graph that did
// not come through validation, before the frontend copies dims into arrays of CUDNN_DIM_MAX + 1.
TEST(CudnnLimits, RankPastCudnnDimMaxIsNotSupportedBeforeTheFrontend) {
  Graph g = chain(1);
  for (int i : {0, 1}) {
    TensorDesc& t = g.tensors[static_cast<size_t>(i)];
    while (t.dims.size() < 12) {
      t.dims.insert(t.dims.begin(), Dim{1, ""});
      t.strides.insert(t.strides.begin(), t.strides.front() * t.dims[1].value);
    }
  }
  Status st = check_cudnn_limits(g);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_NE(st.message().find("tensor 'x' has 12 dims; cuDNN takes at most 8 (CUDNN_DIM_MAX)"), std::string::npos)
      << st.message();
  auto lg = lower_for_h200(g);
  ASSERT_FALSE(lg.is_ok());
  EXPECT_EQ(lg.status().code(), StatusCode::kNotSupported);
}

TEST(CudnnLimits, ExtentsAndStridesOutsideWhatKilnHandsOverAreNotSupported) {
  Graph g = chain(1);
  g.tensors[0].strides[0] = 0;  // a graph mutated after validation
  Status st = check_cudnn_limits(g);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported);
  EXPECT_NE(st.message().find("tensor 'x': dim 0 is 4 with stride 0"), std::string::npos) << st.message();
}

// Uids: canonical id + 1, so 1..tensors, distinct and never 0 (the frontend numbers its virtual tensors
// from 1 upward skipping used uids; a plan binds the caller's buffers by them).
TEST(CudnnLimits, UidsAreOneToTensorCountAndDistinct) {
  Graph g = chain(30);
  auto sig = compute_signature(g);
  ASSERT_TRUE(sig.is_ok());
  std::vector<bool> seen(g.tensors.size() + 1, false);
  for (int id : sig->tensor_ids) {
    ASSERT_GE(id + 1, limits::kCudnnMinUid);
    ASSERT_LE(id + 1, static_cast<int>(g.tensors.size()));
    EXPECT_FALSE(seen[static_cast<size_t>(id + 1)]) << "uid " << id + 1 << " twice";
    seen[static_cast<size_t>(id + 1)] = true;
  }
}

// The CLI, as a user meets it: `kiln compile` of a 51-node chain crashed (SIGSEGV, no exit code). Now it
// compiles the graph's segments; without a GPU the pointwise engines (runtime-compiled) cannot be built,
// so it ends NotSupported (exit 5), having said why for each segment.
TEST(CudnnLimitsCli, Compile51NodeChainIsCutIntoSegmentsNotASegfault) {
  const int n = kMax + 1;
  const std::string name = "chain" + std::to_string(n);
  const test::TempDir dir("kiln_limits");
  const std::string spec = dir.write("chain.json", chain_spec(n)), store = dir.file("store.db");
  const test::CliResult r =
      test::run_kiln("compile " + spec + " --target " + kRoot + "/profiles/h200.json --store " + store);
  const std::string text = r.output();
  ASSERT_TRUE(r.code >= 0) << "kiln compile died of a signal (" << r.how_it_ended() << "):\n" << text;
  // 0, or 3 where the segments need a GPU (runtime-compiled engines without a driver), or 5: never a signal.
  EXPECT_TRUE(r.code == 0 || r.code == 3 || r.code == 5) << text;
  EXPECT_NE(text.find("over the limit of " + std::to_string(kMax) + " operations"), std::string::npos) << text;
  EXPECT_NE(text.find("compiling its 2 segments"), std::string::npos) << text;
  EXPECT_NE(text.find(name + "/n0+" + std::to_string(kMax - 1)), std::string::npos) << text;
  EXPECT_NE(text.find(name + "/n" + std::to_string(kMax)), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln
