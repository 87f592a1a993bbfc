// Device tier: the device reference (double-precision kernels) agrees with the host reference (double) on
// small random graphs of every op: values, magnitudes and scales.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

// Runs both references, with their magnitude passes, on random inputs: the device's values must pass the
// check against the host's (both compute in double, so they differ only where a near-tie rounds apart),
// and the magnitudes must agree (the same rules, reference_math.h; stored in fp32).
void expect_device_matches_host(const Graph& g, uint64_t seed = 1) {
  auto in = make_random_inputs(g, seed);
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  auto host = run_host_reference_with_magnitudes(g, *in);
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  auto dev = run_device_reference_with_magnitudes(g, *in);
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string() << "\n" << dev.status().trace();
  ASSERT_EQ(host->values.size(), dev->values.size());
  ASSERT_EQ(dev->magnitudes.size(), dev->values.size());
  EXPECT_EQ(dev->kind, ReferenceKind::kDevice);
  for (size_t i = 0; i < host->values.size(); ++i) {
    EXPECT_EQ(host->values[i].dims, dev->values[i].dims);
    EXPECT_EQ(host->values[i].strides, dev->values[i].strides);
    EXPECT_EQ(host->values[i].dtype, dev->values[i].dtype);
    ASSERT_EQ(dev->scales.size(), dev->values.size());
    for (const char* what : {"magnitude", "scale"}) {
      const bool mag = what[0] == 'm';
      const auto hm = (mag ? host->magnitudes : host->scales)[i].values();
      const auto dm = (mag ? dev->magnitudes : dev->scales)[i].values();
      ASSERT_EQ(hm.size(), dm.size());
      int off = 0;
      for (size_t j = 0; j < hm.size(); ++j)
        // Magnitudes and scales only size tolerances: agreement to 0.1% is plenty (softmax's exp in the two
        // references differs in the last digits, seen on the H200 at 5e-5 relative for sdpa).
        if (!(std::fabs(hm[j] - dm[j]) <= 1e-3 * std::fabs(hm[j]) + 1e-30) && off++ < 5)
          ADD_FAILURE() << g.name << " output " << i << " " << what << " " << j << ": host " << hm[j] << " device "
                        << dm[j];
    }
  }
  auto rep = check_outputs(g, dev->values, *host);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->verdict, Disposition::kPassed) << g.name << ":\n" << rep->summary();
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
  int a = add_tensor(g, "a", {3, 2, 37, 70}), b = add_tensor(g, "b", {1, 2, 70, 19}),
      c = add_tensor(g, "c", {3, 2, 37, 19});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  expect_device_matches_host(g);
}

TEST(DeviceReference, EveryPointwiseMode) {
  KILN_REQUIRE_GPU();
  const PointwiseMode unary[] = {PointwiseMode::kRelu, PointwiseMode::kGeluErf, PointwiseMode::kGeluTanh,
                                 PointwiseMode::kSilu, PointwiseMode::kSigmoid, PointwiseMode::kTanh,
                                 PointwiseMode::kExp,  PointwiseMode::kAbs,     PointwiseMode::kIdentity};
  for (PointwiseMode m : unary) {
    Graph g = make_graph("unary");
    int a = add_tensor(g, "a", {4, 33}), y = add_tensor(g, "y", {4, 33});
    add_node(g, "pw", OpKind::kPointwise, {a}, y).pointwise.mode = m;
    g.outputs = {y};
    SCOPED_TRACE(static_cast<int>(m));
    expect_device_matches_host(g);
  }
  const PointwiseMode binary[] = {PointwiseMode::kAdd, PointwiseMode::kSub, PointwiseMode::kMul,
                                  PointwiseMode::kDiv, PointwiseMode::kMin, PointwiseMode::kMax};
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

// Few outputs over many elements take the chunked two-pass kernels (a GEMM's AMAX over its whole output
// took two minutes one thread per output at 8192 x 8192): every mode, one output and a few, an inner
// reduced axis and an outer one.
TEST(DeviceReference, LargeReductionsToFewOutputs) {
  KILN_REQUIRE_GPU();
  for (ReductionMode m : {ReductionMode::kSum, ReductionMode::kMax, ReductionMode::kMin, ReductionMode::kAmax}) {
    SCOPED_TRACE(static_cast<int>(m));
    Graph all = make_graph("reduce_all");
    int x = add_tensor(all, "x", {2, 300, 1100}), y = add_tensor(all, "y", {1, 1, 1});
    Node& n = add_node(all, "red", OpKind::kReduction, {x}, y);
    n.reduction.mode = m;
    n.reduction.axes = {0, 1, 2};
    all.outputs = {y};
    expect_device_matches_host(all);
    Graph rows = make_graph("reduce_rows");
    x = add_tensor(rows, "x", {5, 70000, 1}), y = add_tensor(rows, "y", {5, 1, 1});
    Node& r = add_node(rows, "red", OpKind::kReduction, {x}, y);
    r.reduction.mode = m;
    r.reduction.axes = {1};
    rows.outputs = {y};
    expect_device_matches_host(rows);
    Graph outer = make_graph("reduce_outer");
    x = add_tensor(outer, "x", {40000, 3}), y = add_tensor(outer, "y", {1, 3});
    Node& o = add_node(outer, "red", OpKind::kReduction, {x}, y);
    o.reduction.mode = m;
    o.reduction.axes = {0};
    outer.outputs = {y};
    expect_device_matches_host(outer);
  }
}

TEST(DeviceReference, LayerNormAndRmsNorm) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("ln", DataType::kBFloat16);
  int x = add_tensor(g, "x", {5, 3, 300}), s = add_tensor(g, "scale", {1, 3, 300}),
      b = add_tensor(g, "bias", {1, 3, 300}), y = add_tensor(g, "y", {5, 3, 300});
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
    int q = add_tensor(g, "q", {2, 4, 17, 32}), k = add_tensor(g, "k", {2, 2, 17, 32}),
        v = add_tensor(g, "v", {2, 2, 17, 16}), o = add_tensor(g, "o", {2, 4, 17, 16});
    add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa.causal = causal;
    g.outputs = {o};
    expect_device_matches_host(g);
  }
}

// The band (windows, right bounds, bottom-right alignment) in the device reference as in the host's. fp16, as the
// test above: in bf16 the two references' magnitudes differ by up to 1.1e-3 at a few elements (seen on an H100,
// 2026-12-05), past this file's 1e-3, with the values agreeing: the output's rounding enters one pass and not the
// other (not yet traced).
TEST(DeviceReference, SdpaBand) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t sq, skv;
    bool causal;
    std::optional<int64_t> left, right;
    bool bottom_right;
  };
  for (const Case& c : {Case{33, 33, true, 7, std::nullopt, false}, Case{20, 33, false, 5, 3, false},
                        Case{9, 40, true, std::nullopt, std::nullopt, true}, Case{1, 40, true, 16, std::nullopt, true},
                        Case{12, 30, false, std::nullopt, 4, true}}) {
    Graph g = make_graph("sdpa_band", DataType::kFloat16);
    int q = add_tensor(g, "q", {2, 4, c.sq, 32}), k = add_tensor(g, "k", {2, 2, c.skv, 32}),
        v = add_tensor(g, "v", {2, 2, c.skv, 16}), o = add_tensor(g, "o", {2, 4, c.sq, 16});
    SdpaAttrs& a = add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa;
    a.causal = c.causal;
    a.left_bound = c.left;
    a.right_bound = c.right;
    a.alignment = c.bottom_right ? DiagonalAlignment::kBottomRight : DiagonalAlignment::kTopLeft;
    g.outputs = {o};
    SCOPED_TRACE("sq " + std::to_string(c.sq) + " skv " + std::to_string(c.skv));
    expect_device_matches_host(g);
  }
}

// An additive bias (broadcast over the batch or the heads) in the device reference as in the host's, with and
// without a causal window.
TEST(DeviceReference, SdpaBias) {
  KILN_REQUIRE_GPU();
  for (const std::vector<int64_t>& bd : {std::vector<int64_t>{1, 4, 19, 33}, {2, 1, 19, 33}, {2, 4, 19, 33}})
    for (bool window : {false, true}) {
      Graph g = make_graph("sdpa_bias", DataType::kFloat16);
      int q = add_tensor(g, "q", {2, 4, 19, 32}), k = add_tensor(g, "k", {2, 2, 33, 32}),
          v = add_tensor(g, "v", {2, 2, 33, 16}), bias = add_tensor(g, "bias", bd),
          o = add_tensor(g, "o", {2, 4, 19, 16});
      SdpaAttrs& a = add_node(g, "sdpa", OpKind::kSdpa, {q, k, v, bias}, o).sdpa;
      if (window) {
        a.causal = true;
        a.left_bound = 6;
      }
      g.outputs = {o};
      expect_device_matches_host(g);
    }
}

// A padding mask (random lengths, as the generator draws them) in the device reference as in the host's, with
// a top-left window, a bottom-right causal band and a bias.
TEST(DeviceReference, SdpaPaddingMask) {
  KILN_REQUIRE_GPU();
  for (int mode = 0; mode < 3; ++mode) {
    Graph g = make_graph("sdpa_padded", DataType::kFloat16);
    int q = add_tensor(g, "q", {3, 4, 19, 32}), k = add_tensor(g, "k", {3, 2, 33, 32}),
        v = add_tensor(g, "v", {3, 2, 33, 16}), lq = add_tensor(g, "lq", {3, 1, 1, 1}),
        lkv = add_tensor(g, "lkv", {3, 1, 1, 1}), o = add_tensor(g, "o", {3, 4, 19, 16});
    g.tensors[static_cast<size_t>(lq)].dtype = DataType::kInt32;
    g.tensors[static_cast<size_t>(lkv)].dtype = DataType::kInt32;
    std::vector<int> ins = {q, k, v};
    if (mode == 2) ins.push_back(add_tensor(g, "bias", {1, 4, 19, 33}));
    ins.insert(ins.end(), {lq, lkv});
    SdpaAttrs& a = add_node(g, "sdpa", OpKind::kSdpa, ins, o).sdpa;
    a.padding = true;
    a.causal = mode != 0;
    if (mode == 0) a.left_bound = 5;
    if (mode == 1) a.alignment = DiagonalAlignment::kBottomRight;
    g.outputs = {o};
    SCOPED_TRACE("mode " + std::to_string(mode));
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

// The device reference accumulates in double: a sum of 2^20 terms and a dot product of 100352 terms (the
// conv_wgrad length) agree with the host's to ~1e-12 of their magnitude, where fp32 accumulation would
// be ~1e-5 off.
TEST(DeviceReference, LongAccumulationsAreDouble) {
  KILN_REQUIRE_GPU();
  Graph r = make_graph("long_sum", DataType::kFloat32);
  int x = add_tensor(r, "x", {2, 1 << 20}), y = add_tensor(r, "y", {2, 1});
  Node& n = add_node(r, "sum", OpKind::kReduction, {x}, y);
  n.reduction.mode = ReductionMode::kSum;
  n.reduction.axes = {1};
  r.outputs = {y};
  Graph m = make_graph("long_dot", DataType::kFloat16);
  int a = add_tensor(m, "a", {2, 100352}), b = add_tensor(m, "b", {100352, 3}),
      c = add_tensor(m, "c", {2, 3}, DataType::kFloat32);
  add_node(m, "mm", OpKind::kMatmul, {a, b}, c);
  m.outputs = {c};
  for (const Graph* g : {&r, &m}) {
    auto in = make_random_inputs(*g, 4);
    ASSERT_TRUE(in.is_ok());
    auto host = run_host_reference_with_magnitudes(*g, *in);
    auto dev = run_device_reference_with_magnitudes(*g, *in);
    ASSERT_TRUE(host.is_ok() && dev.is_ok()) << dev.status().to_string();
    // Outputs are fp32: both round the same double to fp32, so they should be equal up to a tie; allow
    // one fp32 ulp plus 1e-12 of the magnitude.
    const auto hv = host->values[0].values(), dv = dev->values[0].values(), hm = host->magnitudes[0].values();
    for (size_t i = 0; i < hv.size(); ++i) {
      EXPECT_NEAR(dv[i], hv[i], 1.2e-7 * std::fabs(hv[i]) + 1e-12 * hm[i]) << g->name << " element " << i;
      std::printf("[ long ] %s[%zu]: host %.9g device %.9g magnitude %.6g\n", g->name.c_str(), i, hv[i], dv[i], hm[i]);
    }
  }
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
