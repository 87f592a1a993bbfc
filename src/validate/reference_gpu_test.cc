// Device tier: the device reference (fp32 kernels) agrees with the host reference (double) on small
// random graphs of every op.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "kiln/numerics.h"
#include "kiln/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

// Runs both references on random inputs and requires agreement within fp32-accumulation tolerance
// (or the output dtype's, when coarser).
void expect_device_matches_host(const Graph& g, uint64_t seed = 1) {
  auto in = make_random_inputs(g, seed);
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  auto host = run_host_reference(g, *in);
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  auto dev = run_device_reference(g, *in);
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string() << "\n" << dev.status().trace();
  ASSERT_EQ(host->size(), dev->size());
  for (size_t i = 0; i < host->size(); ++i) {
    EXPECT_EQ((*host)[i].dims, (*dev)[i].dims);
    EXPECT_EQ((*host)[i].strides, (*dev)[i].strides);
    EXPECT_EQ((*host)[i].dtype, (*dev)[i].dtype);
  }
  auto rep = check_outputs(g, *dev, *host);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->verdict, Verdict::kPassed) << g.name << ":\n" << rep->summary();
}

TEST(DeviceReference, ConvFpropNchwAndNhwcGrouped) {
  KILN_REQUIRE_GPU();
  for (bool nhwc : {false, true}) {
    Graph g = make_graph(nhwc ? "conv_nhwc" : "conv_nchw");
    std::vector<int64_t> xd{2, 8, 9, 7}, wd{6, 4, 3, 3}, yd{2, 6, 5, 2};
    auto st = [&](const std::vector<int64_t>& d) { return nhwc ? nhwc_strides(d) : std::vector<int64_t>{}; };
    int x = add_tensor(g, "x", xd, std::nullopt, st(xd)), w = add_tensor(g, "w", wd, std::nullopt, st(wd)),
        y = add_tensor(g, "y", yd, std::nullopt, st(yd));
    Node& n = add_node(g, "conv", OpKind::kConvFprop, {x, w}, y);
    n.conv.groups = 2;
    n.conv.pre_padding = {1, 0};
    n.conv.post_padding = {1, 0};
    n.conv.stride = {2, 2};
    n.conv.dilation = {1, 2};
    g.outputs = {y};
    expect_device_matches_host(g);
  }
}

TEST(DeviceReference, ConvDgradAndWgrad) {
  KILN_REQUIRE_GPU();
  const std::vector<int64_t> xd{2, 4, 7, 6}, wd{6, 2, 3, 3}, yd{2, 6, 4, 3};
  auto attrs = [](Node& n) {
    n.conv.groups = 2;
    n.conv.pre_padding = {1, 1};
    n.conv.post_padding = {1, 1};
    n.conv.stride = {2, 2};
    n.conv.dilation = {1, 1};
  };
  Graph d = make_graph("dgrad");
  int ddy = add_tensor(d, "dy", yd), dw = add_tensor(d, "w", wd), ddx = add_tensor(d, "dx", xd);
  attrs(add_node(d, "dgrad", OpKind::kConvDgrad, {ddy, dw}, ddx));
  d.outputs = {ddx};
  expect_device_matches_host(d);
  Graph w = make_graph("wgrad");
  int wx = add_tensor(w, "x", xd), wdy = add_tensor(w, "dy", yd), wdw = add_tensor(w, "dw", wd);
  attrs(add_node(w, "wgrad", OpKind::kConvWgrad, {wx, wdy}, wdw));
  w.outputs = {wdw};
  expect_device_matches_host(w);
}

TEST(DeviceReference, Conv3dFprop) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("conv3d");
  int x = add_tensor(g, "x", {1, 3, 4, 5, 6}), w = add_tensor(g, "w", {4, 3, 2, 3, 3}),
      y = add_tensor(g, "y", {1, 4, 3, 5, 6});
  Node& n = add_node(g, "conv", OpKind::kConvFprop, {x, w}, y);
  n.conv.pre_padding = {0, 1, 1};
  n.conv.post_padding = {0, 1, 1};
  g.outputs = {y};
  expect_device_matches_host(g);
}

TEST(DeviceReference, MatmulBatchBroadcastFp16) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("matmul", DataType::kFloat16);
  int a = add_tensor(g, "a", {3, 2, 37, 70}), b = add_tensor(g, "b", {1, 2, 70, 19}), c = add_tensor(g, "c", {3, 2, 37, 19});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  expect_device_matches_host(g);
}

TEST(DeviceReference, EveryPointwiseMode) {
  KILN_REQUIRE_GPU();
  const PointwiseMode unary[] = {PointwiseMode::kRelu, PointwiseMode::kGeluErf, PointwiseMode::kGeluTanh,
                                 PointwiseMode::kSilu, PointwiseMode::kSigmoid, PointwiseMode::kTanh,
                                 PointwiseMode::kExp, PointwiseMode::kIdentity};
  for (PointwiseMode m : unary) {
    Graph g = make_graph("unary");
    int a = add_tensor(g, "a", {4, 33}), y = add_tensor(g, "y", {4, 33});
    add_node(g, "pw", OpKind::kPointwise, {a}, y).pointwise.mode = m;
    g.outputs = {y};
    SCOPED_TRACE(static_cast<int>(m));
    expect_device_matches_host(g);
  }
  const PointwiseMode binary[] = {PointwiseMode::kAdd, PointwiseMode::kSub, PointwiseMode::kMul, PointwiseMode::kDiv,
                                  PointwiseMode::kMin, PointwiseMode::kMax};
  for (PointwiseMode m : binary) {
    Graph g = make_graph("binary");
    int a = add_tensor(g, "a", {2, 3, 5}), b = add_tensor(g, "b", {3, 1}), y = add_tensor(g, "y", {2, 3, 5});
    add_node(g, "pw", OpKind::kPointwise, {a, b}, y).pointwise.mode = m;
    g.outputs = {y};
    SCOPED_TRACE(static_cast<int>(m));
    expect_device_matches_host(g);
  }
  // scale by value and bias along channels, chained, fp16 io with fp32 intermediates.
  Graph g = make_graph("scale_bias", DataType::kFloat16);
  int x = add_tensor(g, "x", {2, 5, 3, 3}), s = add_tensor(g, "s", {1}), t = add_tensor(g, "t", {2, 5, 3, 3}),
      bias = add_tensor(g, "bias", {5}), y = add_tensor(g, "y", {2, 5, 3, 3});
  g.tensors[static_cast<size_t>(s)].by_value = true;
  g.tensors[static_cast<size_t>(s)].value = 0.75;
  add_node(g, "scale", OpKind::kPointwise, {x, s}, t).pointwise.mode = PointwiseMode::kScale;
  add_node(g, "bias", OpKind::kPointwise, {t, bias}, y).pointwise.mode = PointwiseMode::kBiasAdd;
  g.outputs = {y};
  expect_device_matches_host(g);
}

TEST(DeviceReference, Reductions) {
  KILN_REQUIRE_GPU();
  for (ReductionMode m : {ReductionMode::kSum, ReductionMode::kMax, ReductionMode::kMin, ReductionMode::kAmax}) {
    Graph g = make_graph("reduce");
    int x = add_tensor(g, "x", {3, 40, 7}), y = add_tensor(g, "y", {3, 1, 7});
    Node& n = add_node(g, "red", OpKind::kReduction, {x}, y);
    n.reduction.mode = m;
    n.reduction.axes = {1};
    g.outputs = {y};
    SCOPED_TRACE(static_cast<int>(m));
    expect_device_matches_host(g);
    g.tensors[static_cast<size_t>(y)].dims = {Dim{1, ""}, Dim{1, ""}, Dim{1, ""}};
    g.tensors[static_cast<size_t>(y)].strides = {1, 1, 1};
    g.nodes[0].reduction.axes = {0, 1, 2};
    expect_device_matches_host(g);
  }
}

TEST(DeviceReference, LayerNormAndRmsNorm) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("ln", DataType::kBFloat16);
  int x = add_tensor(g, "x", {5, 3, 300}), s = add_tensor(g, "scale", {1, 3, 300}), b = add_tensor(g, "bias", {1, 3, 300}),
      y = add_tensor(g, "y", {5, 3, 300});
  add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y);
  g.outputs = {y};
  expect_device_matches_host(g);
  Graph r = make_graph("rms", DataType::kFloat32);
  int rx = add_tensor(r, "x", {7, 1000}), rs = add_tensor(r, "scale", {1000}), ry = add_tensor(r, "y", {7, 1000});
  add_node(r, "rms", OpKind::kRmsNorm, {rx, rs}, ry);
  r.outputs = {ry};
  expect_device_matches_host(r);
}

TEST(DeviceReference, SdpaCausalAndGroupedQuery) {
  KILN_REQUIRE_GPU();
  for (bool causal : {false, true}) {
    Graph g = make_graph("sdpa", DataType::kFloat16);
    int q = add_tensor(g, "q", {2, 4, 17, 32}), k = add_tensor(g, "k", {2, 2, 17, 32}), v = add_tensor(g, "v", {2, 2, 17, 16}),
        o = add_tensor(g, "o", {2, 4, 17, 16});
    add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa.causal = causal;
    g.outputs = {o};
    expect_device_matches_host(g);
  }
}

TEST(DeviceReference, IntermediateRoundingFp16) {
  KILN_REQUIRE_GPU();
  // matmul -> gelu with fp16 intermediates: both references round the virtual tensor the same way.
  Graph g = make_graph("mm_gelu", DataType::kFloat16, DataType::kFloat16);
  int a = add_tensor(g, "a", {16, 64}), b = add_tensor(g, "b", {64, 24}), t = add_tensor(g, "t", {16, 24}),
      y = add_tensor(g, "y", {16, 24});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, t);
  add_node(g, "gelu", OpKind::kPointwise, {t}, y).pointwise.mode = PointwiseMode::kGeluErf;
  g.outputs = {y};
  expect_device_matches_host(g);
}

TEST(DeviceReference, LargeMatmulBeyondTheHostCap) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("big", DataType::kFloat16);
  int a = add_tensor(g, "a", {1536, 1536}), b = add_tensor(g, "b", {1536, 1536}), c = add_tensor(g, "c", {1536, 1536});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  auto in = make_random_inputs(g, 3);
  ASSERT_TRUE(in.is_ok());
  HostReferenceOptions small;
  small.max_macs = 1e9;
  EXPECT_EQ(run_host_reference(g, *in, small).status().code(), StatusCode::kInvalidArgument);
  auto dev = run_device_reference(g, *in);
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
  // Spot-check one element against a double dot product.
  const auto av = in->at(a).values(), bv = in->at(b).values();
  double ref = 0;
  for (int k = 0; k < 1536; ++k) ref += av[static_cast<size_t>(100 * 1536 + k)] * bv[static_cast<size_t>(k * 1536 + 7)];
  EXPECT_NEAR((*dev)[0].at({100, 7}), ref, 0.02 + 0.01 * std::fabs(ref));
}

}  // namespace
}  // namespace kiln
