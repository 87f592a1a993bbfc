// Host tier: cuDNN's fixed limits (kiln/graph/limits.h) are known before cuDNN is called. Lowering is
// deviceless against the recorded H200 (profiles/h200.json): the operation graph is really built by cuDNN
// Frontend, whose std::array of MAX_OPGRAPH_OPS operations (1.23: 50, unchecked) overflowed (SIGSEGV) for
// one more. The tests take the limit from the build's frontend (cudnn_max_operations: 1.23 50, 1.32 250).
#include <gtest/gtest.h>

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
  EXPECT_TRUE(exceeds_cudnn_operation_limit(g));
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
  EXPECT_FALSE(exceeds_cudnn_operation_limit(g));
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
