#include <gtest/gtest.h>
#include <functional>

#include <random>

#include <cmath>

#include "kiln/spec/spec.h"
#include "kiln/validate/reference.h"
#include "validate/reference_common.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

std::vector<double> run1(const Graph& g, const std::map<int, HostTensor>& in) {
  auto r = run_host_reference(g, in);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok() || r->empty()) return {};
  return (*r)[0].values();
}

HostTensor vals(const Graph& g, int t, const std::vector<double>& v) {
  std::vector<int64_t> dims;
  for (const Dim& d : g.tensors[static_cast<size_t>(t)].dims) dims.push_back(d.value);
  return HostTensor::from_values(g.tensors[static_cast<size_t>(t)].dtype.value_or(g.io_dtype), dims, v,
                                 g.tensors[static_cast<size_t>(t)].strides);
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(HostReference, ConvOneChannelKnownKernel) {
  Graph g = make_graph("conv");
  int x = add_tensor(g, "x", {1, 1, 3, 3});
  int w = add_tensor(g, "w", {1, 1, 2, 2});
  int y = add_tensor(g, "y", {1, 1, 2, 2});
  add_node(g, "conv", OpKind::kConvFprop, {x, w}, y);
  g.outputs = {y};
  std::map<int, HostTensor> in{{x, vals(g, x, {1, 2, 3, 4, 5, 6, 7, 8, 9})}, {w, vals(g, w, {1, 0, 0, -1})}};
  // y[i][j] = x[i][j] - x[i+1][j+1] = -4
  expect_near(run1(g, in), {-4, -4, -4, -4}, 0);
}

TEST(HostReference, ConvPaddingStrideDilation) {
  Graph g = make_graph("conv");
  int x = add_tensor(g, "x", {1, 1, 3, 3});
  int w = add_tensor(g, "w", {1, 1, 2, 2});
  int y = add_tensor(g, "y", {1, 1, 2, 2});  // (3 + 1 + 1 - 2*(2-1) - 1) / 2 + 1 = 2
  Node& n = add_node(g, "conv", OpKind::kConvFprop, {x, w}, y);
  n.conv.pre_padding = {1, 1};
  n.conv.post_padding = {1, 1};
  n.conv.stride = {2, 2};
  n.conv.dilation = {2, 2};
  g.outputs = {y};
  std::map<int, HostTensor> in{{x, vals(g, x, {1, 2, 3, 4, 5, 6, 7, 8, 9})}, {w, vals(g, w, {1, 10, 100, 1000})}};
  // Output (0,0) samples padded x at (-1,-1),(-1,1),(1,-1),(1,1) -> only (1,1)=5 with w=1000.
  // (0,1): x at (-1,1),(-1,3),(1,1),(1,3) -> 5*100. (1,0): (1,-1),(1,1),(3,-1),(3,1) -> 5*10. (1,1): 5*1.
  expect_near(run1(g, in), {5000, 500, 50, 5}, 0);
}

TEST(HostReference, ConvGeometryMismatchNamesTheTensor) {
  Graph g = make_graph("conv");
  int x = add_tensor(g, "x", {1, 1, 3, 3});
  int w = add_tensor(g, "w", {1, 1, 2, 2});
  int y = add_tensor(g, "y_out", {1, 1, 3, 3});
  add_node(g, "conv0", OpKind::kConvFprop, {x, w}, y);
  g.outputs = {y};
  auto r = run_host_reference(g, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("node 'conv0'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'y_out'"), std::string::npos) << r.status().message();
}

// The same grouped, strided, padded conv with NCHW and NHWC strides on every tensor.
TEST(HostReference, NhwcConvEqualsNchwConv) {
  auto build = [](bool nhwc) {
    Graph g = make_graph("conv");
    std::vector<int64_t> xd{2, 4, 5, 6}, wd{6, 2, 3, 3}, yd{2, 6, 3, 3};
    int x = add_tensor(g, "x", xd, std::nullopt, nhwc ? nhwc_strides(xd) : std::vector<int64_t>{});
    int w = add_tensor(g, "w", wd, std::nullopt, nhwc ? nhwc_strides(wd) : std::vector<int64_t>{});
    int y = add_tensor(g, "y", yd, std::nullopt, nhwc ? nhwc_strides(yd) : std::vector<int64_t>{});
    Node& n = add_node(g, "conv", OpKind::kConvFprop, {x, w}, y);
    n.conv.groups = 2;
    n.conv.pre_padding = {1, 1};
    n.conv.post_padding = {1, 1};
    n.conv.stride = {2, 2};
    n.conv.dilation = {1, 1};
    g.outputs = {y};
    return g;
  };
  Graph a = build(false), b = build(true);
  auto ia = make_random_inputs(a, 5);
  ASSERT_TRUE(ia.is_ok());
  // Same logical values, NHWC storage.
  std::map<int, HostTensor> ib;
  for (auto& [t, h] : *ia) ib[t] = vals(b, t, h.values());
  auto ra = run_host_reference(a, *ia), rb = run_host_reference(b, ib);
  ASSERT_TRUE(ra.is_ok() && rb.is_ok());
  EXPECT_EQ((*rb)[0].strides, nhwc_strides({2, 6, 3, 3}));
  EXPECT_NE((*ra)[0].storage, (*rb)[0].storage);    // different memory order...
  EXPECT_EQ((*ra)[0].values(), (*rb)[0].values());  // ...same tensor
}

// dgrad and wgrad are the adjoints of fprop: <fprop(x, w), dy> = <x, dgrad(dy, w)> = <w, wgrad(x, dy)>.
TEST(HostReference, ConvDgradWgradAreAdjointsOfFprop) {
  const std::vector<int64_t> xd{2, 4, 7, 5}, wd{6, 2, 3, 2}, yd{2, 6, 4, 2};
  auto conv_attrs = [](Node& n) {
    n.conv.groups = 2;
    n.conv.pre_padding = {1, 0};
    n.conv.post_padding = {1, 1};
    n.conv.stride = {2, 2};
    n.conv.dilation = {1, 2};
  };
  Graph f = make_graph("f"), d = make_graph("d"), w = make_graph("w");
  int fx = add_tensor(f, "x", xd), fw = add_tensor(f, "w", wd), fy = add_tensor(f, "y", yd);
  conv_attrs(add_node(f, "fprop", OpKind::kConvFprop, {fx, fw}, fy));
  f.outputs = {fy};
  int ddy = add_tensor(d, "dy", yd), dw = add_tensor(d, "w", wd), ddx = add_tensor(d, "dx", xd);
  conv_attrs(add_node(d, "dgrad", OpKind::kConvDgrad, {ddy, dw}, ddx));
  d.outputs = {ddx};
  int wx = add_tensor(w, "x", xd), wdy = add_tensor(w, "dy", yd), wdw = add_tensor(w, "dw", wd);
  conv_attrs(add_node(w, "wgrad", OpKind::kConvWgrad, {wx, wdy}, wdw));
  w.outputs = {wdw};
  HostTensor x = HostTensor::zeros(DataType::kFloat32, xd), wt = HostTensor::zeros(DataType::kFloat32, wd),
             dy = HostTensor::zeros(DataType::kFloat32, yd);
  x.fill_uniform(1);
  wt.fill_uniform(2);
  dy.fill_uniform(3);
  // Small integers keep every product exact, so the three dot products agree exactly in double even
  // after the fp32 output rounding.
  for (HostTensor* t : {&x, &wt, &dy}) {
    auto v = t->values();
    for (double& e : v) e = std::round(e * 4);
    t->set_values(v);
  }
  auto y = run1(f, {{fx, x}, {fw, wt}});
  auto dx = run1(d, {{ddy, dy}, {dw, wt}});
  auto dwv = run1(w, {{wx, x}, {wdy, dy}});
  ASSERT_EQ(y.size(), dy.values().size());
  ASSERT_EQ(dx.size(), x.values().size());
  ASSERT_EQ(dwv.size(), wt.values().size());
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const double lhs = dot(y, dy.values());
  EXPECT_NE(lhs, 0.0);
  EXPECT_EQ(lhs, dot(x.values(), dx));
  EXPECT_EQ(lhs, dot(wt.values(), dwv));
}

TEST(HostReference, Matmul2x2AndBatchBroadcast) {
  Graph g = make_graph("mm");
  int a = add_tensor(g, "a", {2, 2, 2}), b = add_tensor(g, "b", {1, 2, 2}), c = add_tensor(g, "c", {2, 2, 2});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  std::map<int, HostTensor> in{{a, vals(g, a, {1, 2, 3, 4, 1, 0, 0, 1})}, {b, vals(g, b, {5, 6, 7, 8})}};
  expect_near(run1(g, in), {19, 22, 43, 50, 5, 6, 7, 8}, 0);
}

double pointwise1(PointwiseMode mode, double x) {
  Graph g = make_graph("pw");
  int a = add_tensor(g, "a", {1}), y = add_tensor(g, "y", {1});
  add_node(g, "pw", OpKind::kPointwise, {a}, y).pointwise.mode = mode;
  g.outputs = {y};
  g.io_dtype = DataType::kFloat32;
  auto v = run1(g, {{a, vals(g, a, {x})}});
  return v.empty() ? NAN : v[0];
}

TEST(HostReference, Activations) {
  const double f = 1e-7;  // fp32 output rounding
  EXPECT_NEAR(pointwise1(PointwiseMode::kGeluErf, 1.0), 0.8413447460685429, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kGeluErf, -1.0), -0.15865525393145707, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kGeluTanh, 1.0), 0.8411919906082768, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kSilu, 1.0), 0.7310585786300049, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kSigmoid, 0.0), 0.5, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kTanh, 0.5), 0.46211715726000974, f);
  EXPECT_NEAR(pointwise1(PointwiseMode::kExp, 1.0), 2.718281828459045, 3e-7);
  EXPECT_EQ(pointwise1(PointwiseMode::kRelu, -3.0), 0.0);
  EXPECT_EQ(pointwise1(PointwiseMode::kRelu, 3.0), 3.0);
  EXPECT_EQ(pointwise1(PointwiseMode::kIdentity, 0.25), 0.25);
}

TEST(HostReference, AbsAndItsMagnitude) {
  EXPECT_EQ(pointwise1(PointwiseMode::kAbs, -0.75), 0.75);
  EXPECT_EQ(pointwise1(PointwiseMode::kAbs, 2.5), 2.5);
  EXPECT_EQ(pointwise1(PointwiseMode::kAbs, 0.0), 0.0);
  // |abs(x)| = |x| and the error passes through unscaled (L = 1): the magnitude of x, as identity's.
  Graph g = make_graph("abs");
  int a = add_tensor(g, "a", {2, 3}), b = add_tensor(g, "b", {3, 2}), c = add_tensor(g, "c", {2, 2}),
      y = add_tensor(g, "y", {2, 2});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  add_node(g, "abs", OpKind::kPointwise, {c}, y).pointwise.mode = PointwiseMode::kAbs;
  g.outputs = {y};
  g.io_dtype = g.intermediate_dtype = DataType::kFloat32;
  auto r = run_host_reference_with_magnitudes(
      g, {{a, vals(g, a, {1, -2, 3, -4, 5, -6})}, {b, vals(g, b, {1, 0, 0, 1, 1, 1})}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  expect_near(r->values[0].values(), {4, 1, 10, 1}, 0);       // |[[4, 1], [-10, -1]]|
  expect_near(r->magnitudes[0].values(), {4, 5, 10, 11}, 0);  // sum_k |a||b| of the matmul
}

// A by-value scalar reaches cuDNN in the compute dtype (fp32 here), so the reference must not round it to
// the io dtype: 0.1 in a bf16 graph would become 0.10009765625 (found by the PyTorch cross-check).
TEST(HostReference, ByValueScalarKeepsTheComputeDtype) {
  auto g = parse_spec_string(R"({"name": "s", "io_dtype": "bf16", "compute_dtype": "fp32",
      "tensors": {"x": {"dims": [4], "dtype": "fp32"}, "k": {"dims": [1], "value": 0.1}, "y": {"dtype": "fp32"}},
      "nodes": [{"name": "m", "op": "scale", "inputs": ["x", "k"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "s.json");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  auto inputs = make_random_inputs(*g, 3);
  ASSERT_TRUE(inputs.is_ok());
  auto out = run_host_reference(*g, *inputs);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const auto x = inputs->at(g->find_tensor("x")).values();
  const auto y = (*out)[0].values();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(y[i]), static_cast<float>(x[i] * 0.1)) << i;
}

TEST(HostReference, BinaryBroadcastScaleAndBias) {
  Graph g = make_graph("pw");
  int a = add_tensor(g, "a", {2, 3}), b = add_tensor(g, "b", {1, 3}), y = add_tensor(g, "y", {2, 3});
  add_node(g, "sub", OpKind::kPointwise, {a, b}, y).pointwise.mode = PointwiseMode::kSub;
  g.outputs = {y};
  std::map<int, HostTensor> in{{a, vals(g, a, {1, 2, 3, 4, 5, 6})}, {b, vals(g, b, {1, 1, 2})}};
  expect_near(run1(g, in), {0, 1, 1, 3, 4, 4}, 0);

  // Scale by a by-value scalar that is not passed as an input.
  Graph s = make_graph("scale");
  int sx = add_tensor(s, "x", {3}), ss = add_tensor(s, "s", {1}), sy = add_tensor(s, "y", {3});
  s.tensors[static_cast<size_t>(ss)].by_value = true;
  s.tensors[static_cast<size_t>(ss)].value = 2.5;
  add_node(s, "scale", OpKind::kPointwise, {sx, ss}, sy).pointwise.mode = PointwiseMode::kScale;
  s.outputs = {sy};
  expect_near(run1(s, {{sx, vals(s, sx, {1, -2, 4})}}), {2.5, -5, 10}, 0);

  // bias_add along the channel axis of [N, C, H, W].
  Graph bg = make_graph("bias");
  int bx = add_tensor(bg, "x", {1, 3, 1, 2}), bb = add_tensor(bg, "bias", {3}), by = add_tensor(bg, "y", {1, 3, 1, 2});
  add_node(bg, "bias", OpKind::kPointwise, {bx, bb}, by).pointwise.mode = PointwiseMode::kBiasAdd;
  bg.outputs = {by};
  expect_near(run1(bg, {{bx, vals(bg, bx, {0, 0, 0, 0, 0, 0})}, {bb, vals(bg, bb, {1, 2, 3})}}), {1, 1, 2, 2, 3, 3}, 0);
  // ... and along the last axis (matmul epilogue form).
  Graph bl = make_graph("bias_last");
  int lx = add_tensor(bl, "x", {2, 3}), lb = add_tensor(bl, "bias", {3}), ly = add_tensor(bl, "y", {2, 3});
  add_node(bl, "bias", OpKind::kPointwise, {lx, lb}, ly).pointwise.mode = PointwiseMode::kBiasAdd;
  bl.outputs = {ly};
  expect_near(run1(bl, {{lx, vals(bl, lx, {0, 0, 0, 1, 1, 1})}, {lb, vals(bl, lb, {1, 2, 3})}}), {1, 2, 3, 2, 3, 4}, 0);
}

TEST(HostReference, Reductions) {
  auto reduce = [](ReductionMode mode, std::vector<int> axes, std::vector<int64_t> out_dims) {
    Graph g = make_graph("red");
    int x = add_tensor(g, "x", {2, 3}), y = add_tensor(g, "y", out_dims);
    Node& n = add_node(g, "red", OpKind::kReduction, {x}, y);
    n.reduction.mode = mode;
    n.reduction.axes = std::move(axes);
    g.outputs = {y};
    return run1(g, {{x, vals(g, x, {1, -5, 3, 4, 2, -6})}});
  };
  expect_near(reduce(ReductionMode::kSum, {1}, {2, 1}), {-1, 0}, 0);
  expect_near(reduce(ReductionMode::kMax, {1}, {2, 1}), {3, 4}, 0);
  expect_near(reduce(ReductionMode::kMin, {1}, {2, 1}), {-5, -6}, 0);
  expect_near(reduce(ReductionMode::kAmax, {1}, {2, 1}), {5, 6}, 0);
  expect_near(reduce(ReductionMode::kSum, {0}, {1, 3}), {5, -3, -3}, 0);
  expect_near(reduce(ReductionMode::kAmax, {0, 1}, {1, 1}), {6}, 0);
  expect_near(reduce(ReductionMode::kSum, {}, {1, 1}), {-1}, 0);  // axes inferred from the output dims
}

TEST(HostReference, LayerNormAndRmsNorm) {
  Graph g = make_graph("ln");
  int x = add_tensor(g, "x", {1, 4}), s = add_tensor(g, "scale", {1, 4}), b = add_tensor(g, "bias", {1, 4}),
      y = add_tensor(g, "y", {1, 4});
  add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y).norm.epsilon = 0.0;
  g.outputs = {y};
  std::map<int, HostTensor> in{
      {x, vals(g, x, {1, 2, 3, 4})}, {s, vals(g, s, {1, 1, 1, 1})}, {b, vals(g, b, {0, 0, 0, 0})}};
  // mean 2.5, biased var 1.25
  expect_near(run1(g, in), {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738}, 1e-7);
  in[s] = vals(g, s, {2, 2, 2, 2});
  in[b] = vals(g, b, {1, 1, 1, 1});
  expect_near(run1(g, in), {-1.6832815729997476, 0.1055728090000842, 1.8944271909999157, 3.6832815729997476}, 2e-7);

  Graph r = make_graph("rms");
  int rx = add_tensor(r, "x", {1, 4}), rs = add_tensor(r, "scale", {4}), ry = add_tensor(r, "y", {1, 4});
  add_node(r, "rms", OpKind::kRmsNorm, {rx, rs}, ry).norm.epsilon = 0.0;
  r.outputs = {ry};
  const double k = 1.0 / std::sqrt(7.5);
  expect_near(run1(r, {{rx, vals(r, rx, {1, 2, 3, 4})}, {rs, vals(r, rs, {1, 1, 1, 2})}}), {k, 2 * k, 3 * k, 8 * k},
              1e-7);
}

Graph sdpa_graph(int64_t sq, int64_t skv, int64_t d, bool causal) {
  Graph g = make_graph("sdpa");
  int q = add_tensor(g, "q", {1, 1, sq, d}), k = add_tensor(g, "k", {1, 1, skv, d}),
      v = add_tensor(g, "v", {1, 1, skv, d}), o = add_tensor(g, "o", {1, 1, sq, d});
  add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa.causal = causal;
  g.outputs = {o};
  return g;
}

TEST(HostReference, SdpaOneKeyPassesValueThrough) {
  Graph g = sdpa_graph(3, 1, 2, false);
  std::map<int, HostTensor> in{
      {0, vals(g, 0, {1, 2, -3, 4, 0.5, 0.25})}, {1, vals(g, 1, {7, -8})}, {2, vals(g, 2, {0.5, -1.5})}};
  expect_near(run1(g, in), {0.5, -1.5, 0.5, -1.5, 0.5, -1.5}, 0);
}

TEST(HostReference, SdpaCausalMask) {
  Graph g = sdpa_graph(2, 2, 2, true);
  std::map<int, HostTensor> in{
      {0, vals(g, 0, {1, 0, 0, 1})}, {1, vals(g, 1, {1, 0, 0, 1})}, {2, vals(g, 2, {1, 2, 3, 4})}};
  // Row 0 sees key 0 only. Row 1: scores (q1.k0, q1.k1)/sqrt(2) = (0, 1/sqrt2).
  const double e = std::exp(1.0 / std::sqrt(2.0));
  const double p0 = 1.0 / (1.0 + e), p1 = e / (1.0 + e);
  expect_near(run1(g, in), {1, 2, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, 1e-6);
  g.nodes[0].sdpa.causal = false;
  // Row 0 without the mask: scores (1, 0)/sqrt2.
  const double p = e / (1.0 + e);
  auto o = run1(g, in);
  EXPECT_NEAR(o[0], p * 1 + (1 - p) * 3, 1e-6);
}

// The softmax statistics (an sdpa's second output): each row's log-sum-exp of its scaled (and masked) scores,
// written out here from the definition; o is the same as without them, and the magnitudes bound the values.
TEST(HostReference, SdpaStatsAreEachRowsLogSumExp) {
  for (bool causal : {false, true}) {
    Graph g = sdpa_graph(3, 4, 2, causal);
    const int stats = add_tensor(g, "lse", {1, 1, 3, 1}, DataType::kFloat32);
    g.nodes[0].outputs.push_back(stats);
    g.outputs = {g.find_tensor("o"), stats};
    const std::vector<double> q = {0.5, -1, 2, 0.25, -0.75, 1.5}, k = {1, 2, -1, 0.5, 0.25, -2, 3, 1},
                              v = {1, 2, 3, 4, 5, 6, 7, 8};
    std::map<int, HostTensor> in{{0, vals(g, 0, q)}, {1, vals(g, 1, k)}, {2, vals(g, 2, v)}};
    auto r = run_host_reference(g, in);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 2u);
    const std::vector<double> lse = (*r)[1].values();
    ASSERT_EQ(lse.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      double sum = 0.0;
      for (int j = 0; j <= (causal ? i : 3); ++j)
        sum += std::exp((q[2 * i] * k[2 * j] + q[2 * i + 1] * k[2 * j + 1]) / std::sqrt(2.0));
      EXPECT_NEAR(lse[static_cast<size_t>(i)], std::log(sum), 1e-6) << "row " << i << (causal ? " causal" : "");
    }
    Graph plain = sdpa_graph(3, 4, 2, causal);
    expect_near((*r)[0].values(), run1(plain, in), 0);
    auto m = run_host_reference_with_magnitudes(g, in);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    const std::vector<double> bound = m->magnitudes[1].values();
    for (size_t i = 0; i < lse.size(); ++i) {
      EXPECT_GE(bound[i], std::fabs(lse[i]));
      EXPECT_GE(bound[i], 1.0);  // at least the sum's own relative error, carried through the log
    }
  }
}

// The backward pass against central differences of the forward reference: with o and the statistics from the
// forward, dq, dk and dv are the gradients of sum(do * o) in q, k and v. Causal and with a window, grouped heads,
// a bias, a padding mask (two entries of lengths 2, 3 queries over 3, 4 keys: a padded query's or key's gradient
// is 0, since the forward does not read it, and the statistics of a padded row are -infinity); nothing here
// restates the backward's formulas.
TEST(HostReference, SdpaBackwardIsTheForwardsGradient) {
  struct Case {
    bool causal;
    std::optional<int64_t> left;
    bool bias;
    bool padding = false;
  };
  for (const Case& c : {Case{false, std::nullopt, false}, Case{true, std::nullopt, true}, Case{true, 2, false},
                        Case{false, std::nullopt, false, true}, Case{true, std::nullopt, true, true}}) {
    const int64_t b = c.padding ? 2 : 1, h = 2, hk = 1, sq = 3, skv = 4, d = 8;
    SdpaAttrs a;
    a.causal = c.causal;
    a.left_bound = c.left;
    a.padding = c.padding;
    const std::vector<double> lengths_q = {2, 3}, lengths_kv = {3, 4};
    Graph fwd = make_graph("fwd");
    const int q = add_tensor(fwd, "q", {b, h, sq, d}), k = add_tensor(fwd, "k", {b, hk, skv, d}),
              v = add_tensor(fwd, "v", {b, hk, skv, d});
    std::vector<int> fin = {q, k, v};
    if (c.bias) fin.push_back(add_tensor(fwd, "bias", {1, h, sq, skv}));
    std::vector<int> lengths;  // graph inputs, held fixed (not differentiated)
    if (c.padding)
      for (const char* n : {"seq_len_q", "seq_len_kv"})
        lengths.push_back(add_tensor(fwd, n, {b, 1, 1, 1}, DataType::kInt32));
    for (int t : lengths) fin.push_back(t);
    const int o = add_tensor(fwd, "o", {b, h, sq, d}), lse = add_tensor(fwd, "lse", {b, h, sq, 1});
    add_node(fwd, "attn", OpKind::kSdpa, fin, o).sdpa = a;
    fwd.nodes[0].outputs.push_back(lse);
    fwd.outputs = {o, lse};
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    // Values on a grid of 2^-10 and steps of 2^-7: x +- step is exact in the fp32 the reference rounds inputs to.
    auto draw = [&](const Graph& g, int t) {
      std::vector<double> x(static_cast<size_t>(g.tensors[static_cast<size_t>(t)].element_count()));
      for (double& e : x) e = std::round(u(rng) * 1024.0) / 1024.0;
      return x;
    };
    std::map<int, std::vector<double>> xs;
    for (int t : fin) xs[t] = draw(fwd, t);
    if (c.padding) xs[lengths[0]] = lengths_q, xs[lengths[1]] = lengths_kv;
    const std::vector<double> dout = draw(fwd, o);
    auto forward = [&](const std::map<int, std::vector<double>>& at) {
      std::map<int, HostTensor> in;
      for (const auto& [t, x] : at) in.emplace(t, vals(fwd, t, x));
      auto r = run_host_reference(fwd, in);
      EXPECT_TRUE(r.is_ok()) << r.status().to_string();
      return r.is_ok() ? std::make_pair((*r)[0].values(), (*r)[1].values())
                       : std::make_pair(std::vector<double>{}, std::vector<double>{});
    };
    const auto [ov, lv] = forward(xs);

    Graph bwd = make_graph("bwd");
    const int bq = add_tensor(bwd, "q", {b, h, sq, d}), bk = add_tensor(bwd, "k", {b, hk, skv, d}),
              bv = add_tensor(bwd, "v", {b, hk, skv, d}), bo = add_tensor(bwd, "o", {b, h, sq, d}),
              bg = add_tensor(bwd, "do", {b, h, sq, d}), bl = add_tensor(bwd, "stats", {b, h, sq, 1});
    std::vector<int> bin = {bq, bk, bv, bo, bg, bl};
    if (c.bias) bin.push_back(add_tensor(bwd, "bias", {1, h, sq, skv}));
    if (c.padding)
      for (const char* n : {"seq_len_q", "seq_len_kv"})
        bin.push_back(add_tensor(bwd, n, {b, 1, 1, 1}, DataType::kInt32));
    const int dq = add_tensor(bwd, "dq", {b, h, sq, d}), dk = add_tensor(bwd, "dk", {b, hk, skv, d}),
              dv = add_tensor(bwd, "dv", {b, hk, skv, d});
    add_node(bwd, "grad", OpKind::kSdpaBackward, bin, dq).sdpa = a;
    bwd.nodes[0].outputs = {dq, dk, dv};
    bwd.outputs = {dq, dk, dv};
    std::map<int, HostTensor> in{{bq, vals(bwd, bq, xs[q])}, {bk, vals(bwd, bk, xs[k])}, {bv, vals(bwd, bv, xs[v])},
                                 {bo, vals(bwd, bo, ov)},    {bg, vals(bwd, bg, dout)},  {bl, vals(bwd, bl, lv)}};
    if (c.bias) in.emplace(bin[6], vals(bwd, bin[6], xs[fin[3]]));
    if (c.padding) {
      in.emplace(bin[bin.size() - 2], vals(bwd, bin[bin.size() - 2], lengths_q));
      in.emplace(bin.back(), vals(bwd, bin.back(), lengths_kv));
      int padded = 0;
      for (double l : lv) padded += l == -INFINITY;
      EXPECT_EQ(padded, 2) << "entry 0's third query, in each of its 2 heads, is padded";
    }
    auto grads = run_host_reference(bwd, in);
    ASSERT_TRUE(grads.is_ok()) << grads.status().to_string();
    ASSERT_EQ(grads->size(), 3u);
    const int wrt[3] = {q, k, v};
    double worst = 0.0, largest = 0.0;
    for (int w = 0; w < 3; ++w) {
      const std::vector<double> got = (*grads)[static_cast<size_t>(w)].values();
      ASSERT_EQ(got.size(), xs[wrt[w]].size());
      for (size_t e = 0; e < got.size(); ++e) {
        // Central differences at steps h and h/2, extrapolated (Richardson): the step's error is O(h^4); what is
        // left is o's fp32 rounding over the step, about 1e-5 here.
        auto diff = [&](double step) {
          auto plus = xs, minus = xs;
          plus[wrt[w]][e] += step;
          minus[wrt[w]][e] -= step;
          const std::vector<double> op = forward(plus).first, om = forward(minus).first;
          double fd = 0.0;
          for (size_t i = 0; i < dout.size(); ++i) fd += dout[i] * (op[i] - om[i]) / (2 * step);
          return fd;
        };
        const double h1 = 0x1p-6, fd = (4.0 * diff(h1 / 2) - diff(h1)) / 3.0;
        EXPECT_NEAR(got[e], fd, 1e-4) << "d"
                                      << "qkv"[w] << "[" << e << "]" << (c.causal ? " causal" : "")
                                      << (c.bias ? " bias" : "") << (c.left ? " window" : "");
        worst = std::max(worst, std::fabs(got[e] - fd));
        largest = std::max(largest, std::fabs(got[e]));
      }
    }
    EXPECT_GT(largest, 0.05) << "gradients too small to tell a wrong formula from a right one";
    std::printf("[ sdpa backward ] causal=%d window=%d bias=%d padding=%d: largest gradient %.3g, worst difference "
                "%.2g\n",
                c.causal, c.left.has_value(), c.bias, c.padding, largest, worst);
    // The magnitudes bound every value.
    auto m = run_host_reference_with_magnitudes(bwd, in);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    for (size_t w = 0; w < 3; ++w) {
      const std::vector<double> val = m->values[w].values(), mag = m->magnitudes[w].values();
      for (size_t e = 0; e < val.size(); ++e) ASSERT_GE(mag[e], std::fabs(val[e]));
    }
  }
}

// A ragged output `got`, the dense view of a token-major [b, heads, rows, d] buffer read through the element
// offsets `off`, against the dense `want`: each entry's first `len` rows equal, every element no entry owns NaN
// (unwritten). Returns the largest |want| compared.
double expect_ragged_output(const std::vector<double>& got, const std::vector<double>& want, int64_t b, int64_t heads,
                            int64_t rows, int64_t d, const std::vector<double>& off, const std::vector<double>& len,
                            const std::string& what) {
  std::vector<bool> written(got.size(), false);
  double largest = 0;
  for (int64_t e = 0; e < b; ++e)
    for (int64_t s = 0; s < static_cast<int64_t>(len[static_cast<size_t>(e)]); ++s)
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t c = 0; c < d; ++c) {
          const int64_t t = static_cast<int64_t>(off[static_cast<size_t>(e)]) / (heads * d) + s;
          const size_t g = static_cast<size_t>((((t / rows) * heads + hh) * rows + t % rows) * d + c);
          const double w = want[static_cast<size_t>(((e * heads + hh) * rows + s) * d + c)];
          written[g] = true;
          largest = std::max(largest, std::fabs(w));
          EXPECT_EQ(got[g], w) << what << ": entry " << e << " row " << s << " head " << hh;
        }
  for (size_t i = 0; i < got.size(); ++i)
    if (!written[i]) {
      EXPECT_TRUE(std::isnan(got[i])) << what << ": element " << i << " is no entry's, yet written";
    }
  return largest;
}

// `x`, a dense [b, heads, rows, d], written into `buf`, the dense view of a token-major [b, heads, rows, d] buffer:
// each entry's first len[e] rows go to the tokens from its element offset off[e] on; the rest of `buf` keeps what
// it held (junk the reference must not read).
std::vector<double> scatter_token_major(const std::vector<double>& x, std::vector<double> buf, int64_t b, int64_t heads,
                                        int64_t rows, int64_t d, const std::vector<double>& off,
                                        const std::vector<double>& len) {
  for (int64_t e = 0; e < b; ++e)
    for (int64_t s = 0; s < static_cast<int64_t>(len[static_cast<size_t>(e)]); ++s)
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t c = 0; c < d; ++c) {
          const int64_t t = static_cast<int64_t>(off[static_cast<size_t>(e)]) / (heads * d) + s;
          buf[static_cast<size_t>((((t / rows) * heads + hh) * rows + t % rows) * d + c)] =
              x[static_cast<size_t>(((e * heads + hh) * rows + s) * d + c)];
        }
  return buf;
}

// The host reference of `g` with input ins[i] holding values[i]; fails the test where it does not run.
std::vector<HostTensor> run_inputs(const Graph& g, const std::vector<int>& ins,
                                   const std::vector<std::vector<double>>& values) {
  std::map<int, HostTensor> in;
  for (size_t i = 0; i < ins.size(); ++i) in.emplace(ins[i], vals(g, ins[i], values[i]));
  auto out = run_host_reference(g, in);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? *std::move(out) : std::vector<HostTensor>{};
}

// One ragged attention: B entries of lq[e] queries (H heads) over lkv[e] keys (Hk heads), head dim d, each tensor's
// entries at the element offsets given (B + 1 each), the mask in attrs (padding on).
struct RaggedCase {
  int64_t b, h, hk, sq, skv, d;
  std::vector<double> lq, lkv, off_q, off_k, off_v, off_o;
  SdpaAttrs attrs;
};

// A drawn ragged attention: entries, grouped heads, queries and keys, head dims, lengths (every valid query with a
// key), packings with gaps of 0-2 tokens (each tensor's own offsets; k's and v's shared or not), and the mask (none,
// causal top-left or bottom-right, a sliding window where the keys cover the queries).
RaggedCase draw_ragged_case(std::mt19937& rng) {
  auto below = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
  RaggedCase c{};
  c.b = 1 + below(3);
  c.hk = 1 + below(2);
  c.h = c.hk * (1 + below(3));
  c.sq = 1 + below(6);
  c.skv = 1 + below(7);
  c.d = 8 * (1 + below(2));
  for (int64_t e = 0; e < c.b; ++e) {
    c.lkv.push_back(static_cast<double>(1 + below(c.skv)));
    c.lq.push_back(static_cast<double>(1 + below(std::min(c.sq, static_cast<int64_t>(c.lkv.back())))));
  }
  // Each entry's first token, in order, within the b * rows tokens of the declared [b, heads, rows, d]; as element
  // offsets, the last one past the last entry.
  auto offsets = [&](int64_t heads, int64_t rows, const std::vector<double>& len) {
    std::vector<double> off;
    int64_t token = 0, left = 0;
    for (double l : len) left += static_cast<int64_t>(l);
    for (double l : len) {
      token += std::min<int64_t>(below(3), c.b * rows - token - left);
      off.push_back(static_cast<double>(token * heads * c.d));
      token += static_cast<int64_t>(l);
      left -= static_cast<int64_t>(l);
    }
    off.push_back(static_cast<double>(token * heads * c.d));
    return off;
  };
  c.off_q = offsets(c.h, c.sq, c.lq);
  c.off_k = offsets(c.hk, c.skv, c.lkv);
  c.off_v = below(2) ? c.off_k : offsets(c.hk, c.skv, c.lkv);
  c.off_o = offsets(c.h, c.sq, c.lq);
  const int64_t mask = below(4);
  c.attrs.causal = mask >= 1;
  if (mask >= 2 && c.sq <= c.skv) c.attrs.alignment = DiagonalAlignment::kBottomRight;
  if (mask == 3 && c.sq <= c.skv) c.attrs.left_bound = 1 + below(c.skv);
  c.attrs.padding = true;
  return c;
}

// Values on a 1/64 grid in [-1, 1] (exact in bf16), drawn from `rng`.
std::function<std::vector<double>(int64_t)> grid_values(std::mt19937& rng) {
  return [&rng](int64_t n) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = std::round(u(rng) * 64.0) / 64.0;
    return x;
  };
}

// The hand-made ragged case (B 2, q 2 heads over k, v 1, Sq 5, Skv 6, D 8; q's tokens at 1 and 5, k's at 0 and 5,
// o's packed, v's at `off_v`), without and with a causal mask, then `drawn` cases of draw_ragged_case; padding on.
std::vector<RaggedCase> ragged_cases(std::mt19937& rng, const std::vector<double>& off_v, int drawn) {
  std::vector<RaggedCase> cases;
  for (bool causal : {false, true}) {
    RaggedCase c{2, 2, 1, 5, 6, 8, {3, 5}, {4, 6}, {16, 80, 160}, {0, 40, 88}, off_v, {0, 48, 128}, {}};
    c.attrs.causal = causal;
    c.attrs.padding = true;
    cases.push_back(c);
  }
  for (int i = 0; i < drawn; ++i) cases.push_back(draw_ragged_case(rng));
  return cases;
}

// The ragged graph against the padded dense one: each entry's valid rows scattered to the tokens its offsets name
// (gaps and the tail hold junk the reference must not read), o read back from its own offsets; rows no entry
// covers are NaN (what an unwritten, poisoned output holds).
void expect_ragged_is_padded_dense(const RaggedCase& c, const std::function<std::vector<double>(int64_t)>& draw) {
  const int64_t b = c.b, h = c.h, hk = c.hk, sq = c.sq, skv = c.skv, d = c.d;
  Graph dense = make_graph("dense", DataType::kBFloat16);
  const int q = add_tensor(dense, "q", {b, h, sq, d}), k = add_tensor(dense, "k", {b, hk, skv, d}),
            v = add_tensor(dense, "v", {b, hk, skv, d}), lq_t = add_tensor(dense, "lq", {b, 1, 1, 1}, DataType::kInt32),
            lkv_t = add_tensor(dense, "lkv", {b, 1, 1, 1}, DataType::kInt32), o = add_tensor(dense, "o", {b, h, sq, d});
  add_node(dense, "attn", OpKind::kSdpa, {q, k, v, lq_t, lkv_t}, o).sdpa = c.attrs;
  dense.outputs = {o};
  const std::vector<double> qd = draw(b * h * sq * d), kd = draw(b * hk * skv * d), vd = draw(b * hk * skv * d);
  auto want = run_host_reference(dense, {{q, vals(dense, q, qd)},
                                         {k, vals(dense, k, kd)},
                                         {v, vals(dense, v, vd)},
                                         {lq_t, vals(dense, lq_t, c.lq)},
                                         {lkv_t, vals(dense, lkv_t, c.lkv)}});
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();

  Graph rg = make_graph("ragged", DataType::kBFloat16);
  const auto thd = [&](const char* n, int64_t heads, int64_t rows) {
    return add_tensor(rg, n, {b, heads, rows, d}, std::nullopt, {rows * heads * d, d, heads * d, 1});
  };
  const int rq = thd("q", h, sq), rk = thd("k", hk, skv), rv = thd("v", hk, skv), ro = thd("o", h, sq);
  std::vector<int> ins = {rq, rk, rv, add_tensor(rg, "lq", {b, 1, 1, 1}, DataType::kInt32),
                          add_tensor(rg, "lkv", {b, 1, 1, 1}, DataType::kInt32)};
  for (const char* n : {"off_q", "off_k", "off_v", "off_o"})
    ins.push_back(add_tensor(rg, n, {b + 1, 1, 1, 1}, DataType::kInt32));
  SdpaAttrs ra = c.attrs;
  ra.ragged = true;
  add_node(rg, "attn", OpKind::kSdpa, ins, ro).sdpa = ra;
  rg.outputs = {ro};
  const auto scatter = [&](const std::vector<double>& x, int64_t heads, int64_t rows, const std::vector<double>& off,
                           const std::vector<double>& len) {
    return scatter_token_major(x, draw(b * heads * rows * d), b, heads, rows, d, off, len);
  };
  std::vector<std::vector<double>> in = {scatter(qd, h, sq, c.off_q, c.lq), scatter(kd, hk, skv, c.off_k, c.lkv),
                                         scatter(vd, hk, skv, c.off_v, c.lkv)};
  for (const std::vector<double>* x : {&c.lq, &c.lkv, &c.off_q, &c.off_k, &c.off_v, &c.off_o}) in.push_back(*x);
  const std::vector<HostTensor> got = run_inputs(rg, ins, in);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GT(expect_ragged_output(got[0].values(), (*want)[0].values(), b, h, sq, d, c.off_o, c.lq, "o"), 0.0);
}

// Ragged (THD) attention against the padded dense one: a hand-made packing (q's tokens at 1 and 5, k's and v's at 0
// and 5, o's packed), without and with a causal mask; then 40 drawn cases: entries, grouped heads, queries and
// keys, head dims, lengths, packings with gaps (each tensor's own offsets, k's and v's shared or not), and the
// mask (none, causal top-left or bottom-right, a sliding window where the keys cover the queries).
TEST(HostReference, SdpaRaggedIsThePaddedDenseAttention) {
  std::mt19937 rng(5);
  const std::vector<RaggedCase> cases = ragged_cases(rng, {0, 40, 88}, 40);
  const auto draw = grid_values(rng);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    expect_ragged_is_padded_dense(cases[i], draw);
  }
}

// The backward pass over ragged tensors against the padded dense one (case `c`, padding on): q, k, v, o and do
// scattered to the tokens their own offsets name (junk in the gaps and the tail), the statistics dense; dq, dk and
// dv read back from q's, k's and v's offsets equal the dense gradients of each entry's own rows, and every element
// no entry owns is NaN (unwritten).
void expect_ragged_backward_is_padded_dense(const RaggedCase& c,
                                            const std::function<std::vector<double>(int64_t)>& draw) {
  const int64_t b = c.b, h = c.h, hk = c.hk, sq = c.sq, skv = c.skv, d = c.d;
  const auto scatter = [&](const std::vector<double>& x, int64_t heads, int64_t rows, const std::vector<double>& off,
                           const std::vector<double>& len) {
    return scatter_token_major(x, draw(b * heads * rows * d), b, heads, rows, d, off, len);
  };
  Graph dense = make_graph("dense", DataType::kBFloat16);
  std::vector<int> din_t = {add_tensor(dense, "q", {b, h, sq, d}),
                            add_tensor(dense, "k", {b, hk, skv, d}),
                            add_tensor(dense, "v", {b, hk, skv, d}),
                            add_tensor(dense, "o", {b, h, sq, d}),
                            add_tensor(dense, "do", {b, h, sq, d}),
                            add_tensor(dense, "stats", {b, h, sq, 1}),
                            add_tensor(dense, "lq", {b, 1, 1, 1}, DataType::kInt32),
                            add_tensor(dense, "lkv", {b, 1, 1, 1}, DataType::kInt32)};
  dense.tensors[static_cast<size_t>(din_t[5])].dtype = DataType::kFloat32;
  const int dq = add_tensor(dense, "dq", {b, h, sq, d}), dk = add_tensor(dense, "dk", {b, hk, skv, d}),
            dv = add_tensor(dense, "dv", {b, hk, skv, d});
  add_node(dense, "grad", OpKind::kSdpaBackward, din_t, dq).sdpa = c.attrs;
  dense.nodes[0].outputs = {dq, dk, dv};
  dense.outputs = {dq, dk, dv};
  const std::vector<double> qd = draw(b * h * sq * d), kd = draw(b * hk * skv * d), vd = draw(b * hk * skv * d),
                            od = draw(b * h * sq * d), gd = draw(b * h * sq * d);
  std::vector<double> ld = draw(b * h * sq);
  for (double& x : ld) x = 1.0 + (x + 1.0) / 2.0;  // near ln Skv
  const std::vector<std::vector<double>> dvals = {qd, kd, vd, od, gd, ld, c.lq, c.lkv};
  std::map<int, HostTensor> din;
  for (size_t i = 0; i < din_t.size(); ++i) din.emplace(din_t[i], vals(dense, din_t[i], dvals[i]));
  auto want = run_host_reference(dense, din);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();

  Graph rg = make_graph("ragged", DataType::kBFloat16);
  const auto thd = [&](const char* n, int64_t heads, int64_t rows) {
    return add_tensor(rg, n, {b, heads, rows, d}, std::nullopt, {rows * heads * d, d, heads * d, 1});
  };
  std::vector<int> ins = {thd("q", h, sq),
                          thd("k", hk, skv),
                          thd("v", hk, skv),
                          thd("o", h, sq),
                          thd("do", h, sq),
                          add_tensor(rg, "stats", {b, h, sq, 1}),
                          add_tensor(rg, "lq", {b, 1, 1, 1}, DataType::kInt32),
                          add_tensor(rg, "lkv", {b, 1, 1, 1}, DataType::kInt32)};
  rg.tensors[static_cast<size_t>(ins[5])].dtype = DataType::kFloat32;
  for (const char* n : {"off_q", "off_k", "off_v", "off_o"})
    ins.push_back(add_tensor(rg, n, {b + 1, 1, 1, 1}, DataType::kInt32));
  const int rdq = thd("dq", h, sq), rdk = thd("dk", hk, skv), rdv = thd("dv", hk, skv);
  SdpaAttrs ra = c.attrs;
  ra.ragged = true;
  add_node(rg, "grad", OpKind::kSdpaBackward, ins, rdq).sdpa = ra;
  rg.nodes[0].outputs = {rdq, rdk, rdv};
  rg.outputs = {rdq, rdk, rdv};
  std::vector<std::vector<double>> rvals = {scatter(qd, h, sq, c.off_q, c.lq),    scatter(kd, hk, skv, c.off_k, c.lkv),
                                            scatter(vd, hk, skv, c.off_v, c.lkv), scatter(od, h, sq, c.off_o, c.lq),
                                            scatter(gd, h, sq, c.off_o, c.lq),    ld};
  for (const std::vector<double>* x : {&c.lq, &c.lkv, &c.off_q, &c.off_k, &c.off_v, &c.off_o}) rvals.push_back(*x);
  const std::vector<HostTensor> got = run_inputs(rg, ins, rvals);
  ASSERT_EQ(got.size(), 3u);
  struct Out {
    const char* name;
    int64_t heads, rows;
    const std::vector<double>* off;
    const std::vector<double>* len;
  };
  const Out outs[3] = {
      {"dq", h, sq, &c.off_q, &c.lq}, {"dk", hk, skv, &c.off_k, &c.lkv}, {"dv", hk, skv, &c.off_v, &c.lkv}};
  double largest = 0;
  for (size_t w = 0; w < 3; ++w)
    largest = std::max(largest, expect_ragged_output(got[w].values(), (*want)[w].values(), b, outs[w].heads,
                                                     outs[w].rows, d, *outs[w].off, *outs[w].len, outs[w].name));
  EXPECT_GT(largest, 0.0);
}

// The ragged backward against the padded dense one: a hand-made packing (k's and v's tokens apart), without and
// with a causal mask, then 30 drawn cases (draw_ragged_case).
TEST(HostReference, SdpaBackwardRaggedIsThePaddedDenseBackward) {
  std::mt19937 rng(7);
  const std::vector<RaggedCase> cases = ragged_cases(rng, {8, 48, 96}, 30);  // v's tokens apart from k's
  const auto draw = grid_values(rng);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    expect_ragged_backward_is_padded_dense(cases[i], draw);
  }
}

// FP8 attention against attention written out here from its definition (scores descale_q descale_k attn_scale
// q.k, causal; o = softmax . v descale_v descale_s scale_s, written times scale_o; amax_o = max |o| before it; the
// statistics each row's log-sum-exp), on fp8-exact values and scales that are not 1 or each other's inverse.
TEST(HostReference, SdpaFp8IsAttentionOnTheDescaledOperands) {
  const int64_t b = 1, h = 2, hk = 1, sq = 5, skv = 7, d = 16;
  Graph g = make_graph("fp8", DataType::kFp8E4M3);
  const int q = add_tensor(g, "q", {b, h, sq, d}), k = add_tensor(g, "k", {b, hk, skv, d}),
            v = add_tensor(g, "v", {b, hk, skv, d});
  const double scale_values[6] = {0.75, 0.5, 0.625, 1.0 / 160.0, 200.0, 1.5};
  std::vector<int> in = {q, k, v};
  for (int i = 0; i < 6; ++i) {
    const int t = add_tensor(g, "s" + std::to_string(i), {1, 1, 1, 1});
    g.tensors[static_cast<size_t>(t)].dtype = DataType::kFloat32;
    in.push_back(t);
  }
  const int o = add_tensor(g, "o", {b, h, sq, d}), amax = add_tensor(g, "amax_o", {1, 1, 1, 1}),
            lse = add_tensor(g, "lse", {b, h, sq, 1});
  g.tensors[static_cast<size_t>(amax)].dtype = g.tensors[static_cast<size_t>(lse)].dtype = DataType::kFloat32;
  Node& n = add_node(g, "attn", OpKind::kSdpaFp8, in, o);
  n.sdpa.causal = true;
  n.outputs = {o, amax, lse};
  g.outputs = {o, amax, lse};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> eighths(-8, 8);  // k/8 in [-1, 1]: exact in e4m3
  auto draw = [&](int t) {
    std::vector<double> x(static_cast<size_t>(g.tensors[static_cast<size_t>(t)].element_count()));
    for (double& e : x) e = eighths(rng) / 8.0;
    return x;
  };
  std::map<int, std::vector<double>> xs = {{q, draw(q)}, {k, draw(k)}, {v, draw(v)}};
  std::map<int, HostTensor> inputs;
  for (const auto& [t, x] : xs) inputs.emplace(t, vals(g, t, x));
  for (int i = 0; i < 6; ++i)
    inputs.emplace(in[3 + static_cast<size_t>(i)], vals(g, in[3 + static_cast<size_t>(i)], {scale_values[i]}));
  auto r = run_host_reference(g, inputs);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  const std::vector<double> got_o = (*r)[0].values(), got_amax = (*r)[1].values(), got_lse = (*r)[2].values();
  const double attn_scale = 1.0 / std::sqrt(static_cast<double>(d));
  double want_amax = 0.0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t i = 0; i < sq; ++i) {
      std::vector<double> sc;
      for (int64_t j = 0; j <= i && j < skv; ++j) {  // causal, top-left
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e)
          dot += xs[q][static_cast<size_t>((hh * sq + i) * d + e)] * xs[k][static_cast<size_t>(j * d + e)];
        sc.push_back(dot * attn_scale * scale_values[0] * scale_values[1]);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0.0;
      for (double x : sc) sum += std::exp(x - mx);
      EXPECT_NEAR(got_lse[static_cast<size_t>(hh * sq + i)], mx + std::log(sum), 1e-7);  // stored as fp32
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0.0;
        for (size_t j = 0; j < sc.size(); ++j)
          acc += std::exp(sc[j] - mx) / sum * xs[v][j * static_cast<size_t>(d) + static_cast<size_t>(e)];
        const double out = acc * scale_values[2] * scale_values[3] * scale_values[4];
        want_amax = std::max(want_amax, std::fabs(out));
        // o as stored: rounded to its dtype (e4m3)
        EXPECT_EQ(got_o[static_cast<size_t>((hh * sq + i) * d + e)],
                  round_to_dtype(out * scale_values[5], DataType::kFp8E4M3));
      }
    }
  ASSERT_EQ(got_amax.size(), 1u);
  EXPECT_NEAR(got_amax[0], want_amax, 1e-7);  // stored as fp32
  EXPECT_GT(want_amax, 0.1) << "outputs too small to tell a wrong scale from a right one";
  // The magnitudes bound every value, amax_o's included.
  auto m = run_host_reference_with_magnitudes(g, inputs);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  for (size_t w = 0; w < 3; ++w) {
    const std::vector<double> val = m->values[w].values(), mag = m->magnitudes[w].values();
    for (size_t e = 0; e < val.size(); ++e) ASSERT_GE(mag[e], std::fabs(val[e])) << "output " << w;
  }
}

// FP8 attention's backward pass against the gradients written out here from their definition (q, k, v, o, do each
// times its descale; P = exp(attn_scale q.k - L), causal; dP = do.v, D = do.o, dS = P (dP - D); dV = sum P do times
// descale_s scale_s, dQ = attn_scale sum dS k and dK = attn_scale sum dS q times descale_dp scale_dp; the stored
// gradients times scale_dq, scale_dk, scale_dv, rounded to e4m3; the amax of each before that, amax_dp
// max |attn_scale dS|, as cuDNN Frontend 1.32 takes it), on
// fp8-exact values, grouped heads, and scales that are not 1 or each other's inverse.
TEST(HostReference, SdpaFp8BackwardIsTheBackwardOnTheDescaledOperands) {
  const int64_t h = 2, hk = 1, sq = 5, skv = 7, d = 16;
  Graph g = make_graph("fp8_bwd", DataType::kFp8E4M3);
  const int q = add_tensor(g, "q", {1, h, sq, d}), k = add_tensor(g, "k", {1, hk, skv, d}),
            v = add_tensor(g, "v", {1, hk, skv, d}), o = add_tensor(g, "o", {1, h, sq, d}),
            dout = add_tensor(g, "do", {1, h, sq, d}), lse = add_tensor(g, "stats", {1, h, sq, 1});
  g.tensors[static_cast<size_t>(lse)].dtype = DataType::kFloat32;
  // descale_q, _k, _v, _o, _do, _s, _dp, scale_s, _dq, _dk, _dv, _dp
  const double sv[12] = {0.75, 0.5, 0.625, 0.875, 0.5625, 1.0 / 96.0, 0.1875, 112.0, 1.5, 1.25, 1.75, 6.0};
  std::vector<int> in = {q, k, v, o, dout, lse};
  for (int i = 0; i < 12; ++i) {
    in.push_back(add_tensor(g, "s" + std::to_string(i), {1, 1, 1, 1}));
    g.tensors.back().dtype = DataType::kFloat32;
  }
  std::vector<int> outs = {add_tensor(g, "dq", {1, h, sq, d}), add_tensor(g, "dk", {1, hk, skv, d}),
                           add_tensor(g, "dv", {1, hk, skv, d})};
  for (const char* name : {"amax_dq", "amax_dk", "amax_dv", "amax_dp"}) {
    outs.push_back(add_tensor(g, name, {1, 1, 1, 1}));
    g.tensors.back().dtype = DataType::kFloat32;
  }
  Node& n = add_node(g, "grad", OpKind::kSdpaFp8Backward, in, outs[0]);
  n.sdpa.causal = true;
  n.outputs = outs;
  g.outputs = outs;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> eighths(-8, 8);  // k/8 in [-1, 1]: exact in e4m3
  std::map<int, std::vector<double>> xs;
  for (int t : {q, k, v, o, dout}) {
    std::vector<double> x(static_cast<size_t>(g.tensors[static_cast<size_t>(t)].element_count()));
    for (double& e : x) e = eighths(rng) / 8.0;
    xs[t] = x;
  }
  std::uniform_int_distribution<int> sixteenths(16, 31);
  xs[lse] = std::vector<double>(static_cast<size_t>(h * sq));
  for (double& e : xs[lse]) e = sixteenths(rng) / 16.0;  // [1, 2): the checks' own draw
  std::map<int, HostTensor> inputs;
  for (const auto& [t, x] : xs) inputs.emplace(t, vals(g, t, x));
  for (int i = 0; i < 12; ++i)
    inputs.emplace(in[6 + static_cast<size_t>(i)], vals(g, in[6 + static_cast<size_t>(i)], {sv[i]}));
  auto r = run_host_reference(g, inputs);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 7u);
  // The gradients written out (real-valued, before their scales).
  const auto x = [&](int t, int64_t row, int64_t e, double descale) {
    return xs[t][static_cast<size_t>(row * d + e)] * descale;
  };
  const double attn_scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> want[3] = {std::vector<double>(static_cast<size_t>(h * sq * d)),
                                 std::vector<double>(static_cast<size_t>(skv * d)),
                                 std::vector<double>(static_cast<size_t>(skv * d))};
  double want_dp = 0.0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t row = hh * sq + i;
      double di = 0.0;
      for (int64_t e = 0; e < d; ++e) di += x(dout, row, e, sv[4]) * x(o, row, e, sv[3]);
      for (int64_t j = 0; j <= i && j < skv; ++j) {  // causal, top-left
        double dot = 0.0, dp = 0.0;
        for (int64_t e = 0; e < d; ++e) {
          dot += x(q, row, e, sv[0]) * x(k, j, e, sv[1]);
          dp += x(dout, row, e, sv[4]) * x(v, j, e, sv[2]);
        }
        const double p = std::exp(dot * attn_scale - xs[lse][static_cast<size_t>(row)]);
        const double ds = p * (dp - di);
        want_dp = std::max(want_dp, std::fabs(attn_scale * ds));  // cuDNN's dS carries attn_scale
        for (int64_t e = 0; e < d; ++e) {
          want[0][static_cast<size_t>(row * d + e)] += attn_scale * ds * sv[6] * sv[11] * x(k, j, e, sv[1]);
          want[1][static_cast<size_t>(j * d + e)] += attn_scale * ds * sv[6] * sv[11] * x(q, row, e, sv[0]);
          want[2][static_cast<size_t>(j * d + e)] += p * sv[5] * sv[7] * x(dout, row, e, sv[4]);
        }
      }
    }
  for (int t = 0; t < 3; ++t) {
    const std::vector<double> got = (*r)[static_cast<size_t>(t)].values();
    double amax = 0.0;
    for (size_t e = 0; e < got.size(); ++e) {
      amax = std::max(amax, std::fabs(want[t][e]));
      // As stored: rounded to e4m3 (either neighbour of a value within 1e-12 of a rounding boundary).
      const double stored = want[t][e] * sv[8 + t];
      EXPECT_TRUE(got[e] == round_to_dtype(stored * (1 + 1e-12), DataType::kFp8E4M3) ||
                  got[e] == round_to_dtype(stored * (1 - 1e-12), DataType::kFp8E4M3))
          << "output " << t << " element " << e << ": " << got[e] << " for " << stored;
    }
    EXPECT_NEAR((*r)[3 + static_cast<size_t>(t)].values()[0], amax, 1e-6 * amax) << "amax of output " << t;
    EXPECT_GT(amax, 0.05) << "output " << t << " too small to tell a wrong scale from a right one";
  }
  EXPECT_NEAR((*r)[6].values()[0], want_dp, 1e-6 * want_dp);  // amax_dp, stored as fp32
  EXPECT_GT(want_dp, 0.005);
  // The magnitudes bound every value, the amax included.
  auto m = run_host_reference_with_magnitudes(g, inputs);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  for (size_t w = 0; w < 7; ++w) {
    const std::vector<double> val = m->values[w].values(), mag = m->magnitudes[w].values();
    for (size_t e = 0; e < val.size(); ++e) ASSERT_GE(mag[e], std::fabs(val[e])) << "output " << w;
  }
}

// One tensor in several sdpa_fp8 scale roles draws what every role allows; roles that draw apart (scale_s and a
// descale) are refused naming the tensor.
TEST(InputDraws, SharedFp8ScalesDrawTheirCommonRangeOrAreRefused) {
  const auto graph = [](const std::vector<int>& role_tensor) {
    Graph g = make_graph("fp8", DataType::kFp8E4M3);
    std::vector<int> in = {add_tensor(g, "q", {1, 2, 4, 16}), add_tensor(g, "k", {1, 2, 4, 16}),
                           add_tensor(g, "v", {1, 2, 4, 16})};
    std::vector<int> scales;
    for (int i = 0; i < 6; ++i) {
      scales.push_back(add_tensor(g, "s" + std::to_string(i), {1, 1, 1, 1}));
      g.tensors.back().dtype = DataType::kFloat32;
    }
    for (int r : role_tensor) in.push_back(scales[static_cast<size_t>(r)]);
    const int o = add_tensor(g, "o", {1, 2, 4, 16}), amax = add_tensor(g, "amax_o", {1, 1, 1, 1});
    g.tensors[static_cast<size_t>(amax)].dtype = DataType::kFloat32;
    add_node(g, "attn", OpKind::kSdpaFp8, in, o).outputs = {o, amax};
    g.outputs = {o, amax};
    return g;
  };
  // descale_q, descale_k and descale_v one tensor: [0.5, 1) for all three.
  auto shared = make_random_inputs(graph({0, 0, 0, 3, 4, 5}), 1);
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  // scale_s and descale_s one tensor: no value both allow.
  const Status apart = make_random_inputs(graph({0, 1, 2, 3, 3, 5}), 1).status();
  EXPECT_EQ(apart.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(apart.message().find("input 's3': it serves FP8 attention scale roles whose checks draw apart (node "
                                 "'attn' (sdpa_fp8) descale_s in [2^-8, 2^-7); node 'attn' (sdpa_fp8) scale_s in "
                                 "[128, 256)): give each such role its own tensor"),
            std::string::npos)
      << apart.message();
}

// One training step's FP8 forward and backward may share scale_s and descale_s: both draw them alike.
TEST(InputDraws, AnFp8ForwardAndItsBackwardShareTheSoftmaxScales) {
  Graph g = make_graph("fp8_step", DataType::kFp8E4M3);
  const int q = add_tensor(g, "q", {1, 2, 64, 128}), k = add_tensor(g, "k", {1, 2, 64, 128}),
            v = add_tensor(g, "v", {1, 2, 64, 128});
  const auto scale = [&](const std::string& name) {
    const int t = add_tensor(g, name, {1, 1, 1, 1});
    g.tensors[static_cast<size_t>(t)].dtype = DataType::kFloat32;
    return t;
  };
  const int descale_s = scale("descale_s"), scale_s = scale("scale_s");
  std::vector<int> fwd_in = {q, k, v, scale("dq"), scale("dk"), scale("dv"), descale_s, scale_s, scale("so")};
  const int o = add_tensor(g, "o", {1, 2, 64, 128}), amax = scale("amax_o");
  add_node(g, "attn", OpKind::kSdpaFp8, fwd_in, o).outputs = {o, amax};
  const int stats = add_tensor(g, "stats", {1, 2, 64, 1});
  g.tensors[static_cast<size_t>(stats)].dtype = DataType::kFloat32;
  std::vector<int> bwd_in = {q,    k, v, add_tensor(g, "o_in", {1, 2, 64, 128}), add_tensor(g, "do", {1, 2, 64, 128}),
                             stats};
  for (const char* n : {"bq", "bk", "bv", "bo", "bdo"}) bwd_in.push_back(scale(n));
  bwd_in.insert(bwd_in.end(), {descale_s, scale("descale_dp"), scale_s});
  for (const char* n : {"sdq", "sdk", "sdv", "sdp"}) bwd_in.push_back(scale(n));
  std::vector<int> grads = {add_tensor(g, "gq", {1, 2, 64, 128}), add_tensor(g, "gk", {1, 2, 64, 128}),
                            add_tensor(g, "gv", {1, 2, 64, 128})};
  for (const char* n : {"a1", "a2", "a3", "a4"}) grads.push_back(scale(n));
  add_node(g, "grad", OpKind::kSdpaFp8Backward, bwd_in, grads[0]).outputs = grads;
  g.outputs = {o, amax};
  g.outputs.insert(g.outputs.end(), grads.begin(), grads.end());
  auto draws = validate_internal::input_draws(g);
  ASSERT_TRUE(draws.is_ok()) << draws.status().to_string();
  for (const validate_internal::InputDraw& d : *draws) {
    const std::pair<double, double> r{d.lo, d.hi};
    if (d.tensor == scale_s) {
      EXPECT_EQ(r, std::make_pair(128.0, 256.0));
    } else if (d.tensor == descale_s) {
      EXPECT_EQ(r, std::make_pair(0x1p-8, 0x1p-7));
    } else if (d.tensor == stats) {
      EXPECT_EQ(r, std::make_pair(1.0, 2.0));
    }
  }
}

// The band against an explicit mask written here from its definition (key j seen by query i when
// diag - left < j <= diag + right, diag = i, or i + Skv - Sq bottom-right), on random values: windows, right
// bounds, both alignments, grouped heads.
TEST(HostReference, SdpaBandMatchesAnExplicitMask) {
  struct Case {
    int64_t sq, skv, h, hk;
    SdpaAttrs a;
  };
  auto attrs = [](bool causal, std::optional<int64_t> left, std::optional<int64_t> right, bool br) {
    SdpaAttrs a;
    a.causal = causal;
    a.left_bound = left;
    a.right_bound = right;
    a.alignment = br ? DiagonalAlignment::kBottomRight : DiagonalAlignment::kTopLeft;
    return a;
  };
  const Case cases[] = {{9, 9, 2, 2, attrs(true, 3, std::nullopt, false)},
                        {9, 9, 2, 1, attrs(false, 2, 1, false)},
                        {4, 11, 2, 2, attrs(true, std::nullopt, std::nullopt, true)},
                        {1, 13, 4, 2, attrs(true, std::nullopt, std::nullopt, true)},
                        {5, 12, 2, 2, attrs(true, 4, std::nullopt, true)},
                        {6, 10, 2, 2, attrs(false, std::nullopt, 2, true)},
                        {12, 5, 2, 2, attrs(true, std::nullopt, std::nullopt, false)}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (const Case& c : cases) {
    const int64_t d = 4;
    Graph g = make_graph("band", DataType::kFloat32);
    int q = add_tensor(g, "q", {1, c.h, c.sq, d}), k = add_tensor(g, "k", {1, c.hk, c.skv, d}),
        v = add_tensor(g, "v", {1, c.hk, c.skv, d}), o = add_tensor(g, "o", {1, c.h, c.sq, d});
    add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa = c.a;
    g.outputs = {o};
    std::vector<double> qv(static_cast<size_t>(c.h * c.sq * d)), kv(static_cast<size_t>(c.hk * c.skv * d)),
        vv(kv.size());
    for (auto* vec : {&qv, &kv, &vv})
      for (double& x : *vec) x = static_cast<float>(u(rng));  // fp32 inputs: exact
    auto out = run1(g, {{q, vals(g, q, qv)}, {k, vals(g, k, kv)}, {v, vals(g, v, vv)}});
    const int64_t shift = c.a.alignment == DiagonalAlignment::kBottomRight ? c.skv - c.sq : 0;
    const std::optional<int64_t> right = c.a.causal ? std::optional<int64_t>(0) : c.a.right_bound;
    std::vector<double> want(out.size(), 0.0);
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        const int64_t kh = h / (c.h / c.hk), diag = i + shift;
        std::vector<double> w(static_cast<size_t>(c.skv), 0.0);
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j < c.skv; ++j) {
          const bool seen = (!right || j <= diag + *right) && (!c.a.left_bound || j > diag - *c.a.left_bound);
          if (!seen) continue;
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qv[(h * c.sq + i) * d + e] * kv[(kh * c.skv + j) * d + e];
          w[j] = dot / 2.0;  // 1/sqrt(4)
          mx = std::max(mx, w[j]);
        }
        for (int64_t j = 0; j < c.skv; ++j) {
          const bool seen = (!right || j <= diag + *right) && (!c.a.left_bound || j > diag - *c.a.left_bound);
          w[j] = seen ? std::exp(w[j] - mx) : 0.0;
          sum += w[j];
        }
        for (int64_t j = 0; j < c.skv; ++j)
          for (int64_t e = 0; e < d; ++e) want[(h * c.sq + i) * d + e] += w[j] / sum * vv[(kh * c.skv + j) * d + e];
      }
    SCOPED_TRACE("sq " + std::to_string(c.sq) + " skv " + std::to_string(c.skv));
    expect_near(out, want, 2e-6);  // the output rounds to fp32; a wrong mask is off by ~0.1
  }
}

// An additive bias against scores written out here: softmax(scale q.k + bias) v, the bias broadcast over the
// batch, over the heads, or neither, with and without a causal band.
TEST(HostReference, SdpaBiasMatchesExplicitScores) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  const int64_t b = 2, h = 2, sq = 5, skv = 7, d = 4;
  for (const std::vector<int64_t>& bd : {std::vector<int64_t>{1, 2, sq, skv}, {2, 1, sq, skv}, {2, 2, sq, skv}})
    for (bool causal : {false, true}) {
      Graph g = make_graph("biased", DataType::kFloat32);
      int q = add_tensor(g, "q", {b, h, sq, d}), k = add_tensor(g, "k", {b, h, skv, d}),
          v = add_tensor(g, "v", {b, h, skv, d}), bias = add_tensor(g, "bias", bd),
          o = add_tensor(g, "o", {b, h, sq, d});
      add_node(g, "sdpa", OpKind::kSdpa, {q, k, v, bias}, o).sdpa.causal = causal;
      g.outputs = {o};
      auto fill = [&](size_t n) {
        std::vector<double> x(n);
        for (double& e : x) e = static_cast<float>(u(rng));
        return x;
      };
      const auto qv = fill(b * h * sq * d), kv = fill(b * h * skv * d), vv = fill(b * h * skv * d),
                 bv = fill(static_cast<size_t>(bd[0] * bd[1] * sq * skv));
      auto out = run1(g, {{q, vals(g, q, qv)}, {k, vals(g, k, kv)}, {v, vals(g, v, vv)}, {bias, vals(g, bias, bv)}});
      std::vector<double> want(out.size(), 0.0);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t hi = 0; hi < h; ++hi)
          for (int64_t i = 0; i < sq; ++i) {
            std::vector<double> w(skv, 0.0);
            double mx = -1e300, sum = 0.0;
            const int64_t last = causal ? std::min(i + 1, skv) : skv;
            for (int64_t j = 0; j < last; ++j) {
              double dot = 0.0;
              for (int64_t e = 0; e < d; ++e)
                dot += qv[((bi * h + hi) * sq + i) * d + e] * kv[((bi * h + hi) * skv + j) * d + e];
              const int64_t bb = bd[0] == 1 ? 0 : bi, bh = bd[1] == 1 ? 0 : hi;
              w[j] = dot / 2.0 + bv[((bb * bd[1] + bh) * sq + i) * skv + j];
              mx = std::max(mx, w[j]);
            }
            for (int64_t j = 0; j < last; ++j) sum += (w[j] = std::exp(w[j] - mx));
            for (int64_t j = 0; j < last; ++j)
              for (int64_t e = 0; e < d; ++e)
                want[((bi * h + hi) * sq + i) * d + e] += w[j] / sum * vv[((bi * h + hi) * skv + j) * d + e];
          }
      SCOPED_TRACE("bias batch " + std::to_string(bd[0]) + " heads " + std::to_string(bd[1]) +
                   (causal ? " causal" : ""));
      expect_near(out, want, 2e-6);
    }
}

// A padding mask against scores written out here: per batch entry, keys past seq_len_kv masked, query rows past
// seq_len_q zeros, a bottom-right diagonal at i + seq_len_kv - seq_len_q; with and without a causal band.
TEST(HostReference, SdpaPaddingMaskMatchesExplicitRows) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  const int64_t b = 3, h = 2, sq = 6, skv = 9, d = 4;
  const std::vector<double> lens_q = {6, 2, 4}, lens_kv = {9, 7, 4};
  for (int mode = 0; mode < 3; ++mode) {  // no band, causal top-left, causal bottom-right
    Graph g = make_graph("padded", DataType::kFloat32);
    int q = add_tensor(g, "q", {b, h, sq, d}), k = add_tensor(g, "k", {b, h, skv, d}),
        v = add_tensor(g, "v", {b, h, skv, d}), lq = add_tensor(g, "lq", {b, 1, 1, 1}),
        lkv = add_tensor(g, "lkv", {b, 1, 1, 1}), o = add_tensor(g, "o", {b, h, sq, d});
    g.tensors[static_cast<size_t>(lq)].dtype = DataType::kInt32;
    g.tensors[static_cast<size_t>(lkv)].dtype = DataType::kInt32;
    SdpaAttrs& a = add_node(g, "sdpa", OpKind::kSdpa, {q, k, v, lq, lkv}, o).sdpa;
    a.padding = true;
    a.causal = mode > 0;
    if (mode == 2) a.alignment = DiagonalAlignment::kBottomRight;
    g.outputs = {o};
    auto fill = [&](size_t n) {
      std::vector<double> x(n);
      for (double& e : x) e = static_cast<float>(u(rng));
      return x;
    };
    const auto qv = fill(b * h * sq * d), kv = fill(b * h * skv * d), vv = fill(b * h * skv * d);
    auto out = run1(g, {{q, vals(g, q, qv)},
                        {k, vals(g, k, kv)},
                        {v, vals(g, v, vv)},
                        {lq, vals(g, lq, lens_q)},
                        {lkv, vals(g, lkv, lens_kv)}});
    std::vector<double> want(out.size(), 0.0);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t i = 0; i < static_cast<int64_t>(lens_q[bi]); ++i) {
          const int64_t nkv = static_cast<int64_t>(lens_kv[bi]);
          const int64_t diag = i + (mode == 2 ? nkv - static_cast<int64_t>(lens_q[bi]) : 0);
          std::vector<double> w(skv, 0.0);
          double mx = -1e300, sum = 0.0;
          std::vector<int64_t> seen;
          for (int64_t j = 0; j < nkv; ++j)
            if (mode == 0 || j <= diag) seen.push_back(j);
          for (int64_t j : seen) {
            double dot = 0.0;
            for (int64_t e = 0; e < d; ++e)
              dot += qv[((bi * h + hi) * sq + i) * d + e] * kv[((bi * h + hi) * skv + j) * d + e];
            w[j] = dot / 2.0;
            mx = std::max(mx, w[j]);
          }
          for (int64_t j : seen) sum += (w[j] = std::exp(w[j] - mx));
          for (int64_t j : seen)
            for (int64_t e = 0; e < d; ++e)
              want[((bi * h + hi) * sq + i) * d + e] += w[j] / sum * vv[((bi * h + hi) * skv + j) * d + e];
        }
    SCOPED_TRACE("mode " + std::to_string(mode));
    expect_near(out, want, 2e-6);
  }
}

// One paged-cache attention's shape: B entries of Sq queries (H heads) over pages of block_size keys (Hk heads).
struct PagedCase {
  int64_t b, h, hk, sq, d, blocks, bs, pages;
  SdpaAttrs attrs;  // padding on; paged set for the paged graph
  std::vector<double> lens_q, lens_kv, table_k, table_v;
};

// The paged graph's o, and the dense graph's over K/V gathered here from the caches through the tables (key j of
// entry e, head g is row j % block_size of block table[e][j / block_size]).
std::pair<std::vector<double>, std::vector<double>> paged_and_dense(const PagedCase& c, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  const int64_t skv = c.pages * c.bs;
  auto fill = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = static_cast<float>(u(rng));
    return x;
  };
  const auto qv = fill(c.b * c.h * c.sq * c.d), kc = fill(c.blocks * c.hk * c.bs * c.d),
             vc = fill(c.blocks * c.hk * c.bs * c.d);
  auto add_int32 = [&](Graph& g, const char* n, std::vector<int64_t> dims, std::vector<int>* ins) {
    ins->push_back(add_tensor(g, n, std::move(dims)));
    g.tensors[static_cast<size_t>(ins->back())].dtype = DataType::kInt32;
  };
  Graph pg = make_graph("paged", DataType::kFloat32);
  std::vector<int> pin = {add_tensor(pg, "q", {c.b, c.h, c.sq, c.d}), add_tensor(pg, "k", {c.blocks, c.hk, c.bs, c.d}),
                          add_tensor(pg, "v", {c.blocks, c.hk, c.bs, c.d})};
  add_int32(pg, "lq", {c.b, 1, 1, 1}, &pin);
  add_int32(pg, "lkv", {c.b, 1, 1, 1}, &pin);
  add_int32(pg, "tk", {c.b, 1, c.pages, 1}, &pin);
  add_int32(pg, "tv", {c.b, 1, c.pages, 1}, &pin);
  const int po = add_tensor(pg, "o", {c.b, c.h, c.sq, c.d});
  SdpaAttrs pa = c.attrs;
  pa.paged = true;
  add_node(pg, "sdpa", OpKind::kSdpa, pin, po).sdpa = pa;
  pg.outputs = {po};
  const std::vector<std::vector<double>> pv = {qv, kc, vc, c.lens_q, c.lens_kv, c.table_k, c.table_v};
  std::map<int, HostTensor> pins;
  for (size_t i = 0; i < pin.size(); ++i) pins.emplace(pin[i], vals(pg, pin[i], pv[i]));
  auto gather = [&](const std::vector<double>& cache, const std::vector<double>& table) {
    std::vector<double> dense(static_cast<size_t>(c.b * c.hk * skv * c.d));
    for (int64_t e = 0; e < c.b; ++e)
      for (int64_t g = 0; g < c.hk; ++g)
        for (int64_t j = 0; j < skv; ++j)
          for (int64_t x = 0; x < c.d; ++x) {
            const auto block = static_cast<int64_t>(table[static_cast<size_t>(e * c.pages + j / c.bs)]);
            dense[static_cast<size_t>(((e * c.hk + g) * skv + j) * c.d + x)] =
                cache[static_cast<size_t>(((block * c.hk + g) * c.bs + j % c.bs) * c.d + x)];
          }
    return dense;
  };
  Graph dg = make_graph("dense", DataType::kFloat32);
  std::vector<int> din = {add_tensor(dg, "q", {c.b, c.h, c.sq, c.d}), add_tensor(dg, "k", {c.b, c.hk, skv, c.d}),
                          add_tensor(dg, "v", {c.b, c.hk, skv, c.d})};
  add_int32(dg, "lq", {c.b, 1, 1, 1}, &din);
  add_int32(dg, "lkv", {c.b, 1, 1, 1}, &din);
  const int dout = add_tensor(dg, "o", {c.b, c.h, c.sq, c.d});
  add_node(dg, "sdpa", OpKind::kSdpa, din, dout).sdpa = c.attrs;
  dg.outputs = {dout};
  const std::vector<std::vector<double>> dv = {qv, gather(kc, c.table_k), gather(vc, c.table_v), c.lens_q, c.lens_kv};
  std::map<int, HostTensor> dins;
  for (size_t i = 0; i < din.size(); ++i) dins.emplace(din[i], vals(dg, din[i], dv[i]));
  return {run1(pg, pins), run1(dg, dins)};
}

// Paged K/V caches: the same attention as over dense K/V gathered from the caches through the page tables. First
// a hand-made case (a table with repeats, unused blocks, a different table for V; a padding mask and a
// bottom-right causal band), then 40 drawn ones: entries, grouped heads, queries (decode's one too), block sizes
// and pages, tables over every block (repeats, unused blocks, V's own or K's), lengths, and the mask (none,
// causal top-left or bottom-right, a sliding window where the keys cover the queries).
TEST(HostReference, SdpaPagedCachesMatchTheDenseGather) {
  std::mt19937 rng(13);
  PagedCase fixed{2, 4, 2, 3, 4, 7, 4, 3, {}, {3, 2}, {12, 7}, {6, 0, 3, 3, 5, 1}, {2, 4, 3, 0, 0, 6}};
  fixed.attrs.causal = true;
  fixed.attrs.alignment = DiagonalAlignment::kBottomRight;
  fixed.attrs.padding = true;
  std::vector<PagedCase> cases = {fixed};
  auto pick = [&](std::vector<int64_t> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  auto below = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };
  for (int i = 0; i < 40; ++i) {
    PagedCase c{};
    c.b = pick({1, 2, 3});
    c.hk = pick({1, 2});
    c.h = c.hk * pick({1, 2, 3});
    c.sq = pick({1, 1, 2, 5});
    c.d = pick({4, 8});
    c.bs = pick({1, 2, 4});
    c.pages = 1 + below(4);
    c.blocks = 1 + below(c.b * c.pages + 2);
    const int64_t skv = c.pages * c.bs;
    for (int64_t e = 0; e < c.b; ++e) {
      const int64_t lkv = 1 + below(skv);
      c.lens_kv.push_back(static_cast<double>(lkv));
      c.lens_q.push_back(static_cast<double>(1 + below(std::min(c.sq, lkv))));  // every valid query has a key
    }
    const bool shared = below(3) == 0;
    for (int64_t j = 0; j < c.b * c.pages; ++j) {
      c.table_k.push_back(static_cast<double>(below(c.blocks)));
      c.table_v.push_back(shared ? c.table_k.back() : static_cast<double>(below(c.blocks)));
    }
    c.attrs.padding = true;
    const int64_t mask = below(4);
    c.attrs.causal = mask >= 1;
    if (mask >= 2 && c.sq <= skv) c.attrs.alignment = DiagonalAlignment::kBottomRight;
    if (mask == 3 && c.sq <= skv) c.attrs.left_bound = 1 + below(skv);
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const auto [paged, dense] = paged_and_dense(cases[i], rng);
    expect_near(paged, dense, 0);
    bool nonzero = false;
    for (double x : paged) nonzero = nonzero || x != 0.0;
    EXPECT_TRUE(nonzero);
  }
}

TEST(HostReference, IntermediatesRoundToTheIntermediateDtype) {
  Graph g = make_graph("chain", DataType::kFloat32, DataType::kFloat16);
  int x = add_tensor(g, "x", {1}), t = add_tensor(g, "t", {1}), y = add_tensor(g, "y", {1});
  add_node(g, "id0", OpKind::kPointwise, {x}, t).pointwise.mode = PointwiseMode::kIdentity;
  add_node(g, "id1", OpKind::kPointwise, {t}, y).pointwise.mode = PointwiseMode::kIdentity;
  g.outputs = {y};
  // 1 + 2^-12 is exact in fp32 (io) but rounds to 1 in fp16 (the virtual tensor t).
  expect_near(run1(g, {{x, vals(g, x, {1.0 + std::ldexp(1.0, -12)})}}), {1.0}, 0);
  g.intermediate_dtype = DataType::kFloat32;
  expect_near(run1(g, {{x, vals(g, x, {1.0 + std::ldexp(1.0, -12)})}}), {1.0 + std::ldexp(1.0, -12)}, 0);
}

TEST(HostReference, OutputsRoundToTheirDtype) {
  Graph g = make_graph("mm", DataType::kFloat16);
  int a = add_tensor(g, "a", {1, 1}), b = add_tensor(g, "b", {1, 1}), c = add_tensor(g, "c", {1, 1});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  auto r = run_host_reference(g, {{a, vals(g, a, {1.0 / 3})}, {b, vals(g, b, {3.0})}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ((*r)[0].dtype, DataType::kFloat16);
  EXPECT_EQ((*r)[0].values()[0], fp16_to_double(fp16_from_double(fp16_to_double(0x3555) * 3.0)));
}

TEST(HostReference, RefusesGraphsOverTheMacCap) {
  Graph g = make_graph("big");
  int a = add_tensor(g, "a", {2048, 2048}), b = add_tensor(g, "b", {2048, 2048}), c = add_tensor(g, "c", {2048, 2048});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  auto macs = estimate_macs(g);
  ASSERT_TRUE(macs.is_ok());
  EXPECT_DOUBLE_EQ(*macs, 2048.0 * 2048 * 2048);
  auto r = run_host_reference(g, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("device reference"), std::string::npos) << r.status().message();
}

TEST(HostReference, MissingInputAndBadShapesAreNamed) {
  Graph g = make_graph("mm");
  int a = add_tensor(g, "lhs", {2, 3}), b = add_tensor(g, "rhs", {3, 2}), c = add_tensor(g, "c", {2, 2});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  auto r = run_host_reference(g, {{a, HostTensor::zeros(DataType::kFloat32, {2, 3})}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'rhs'"), std::string::npos) << r.status().message();
  r = run_host_reference(
      g, {{a, HostTensor::zeros(DataType::kFloat32, {3, 2})}, {b, HostTensor::zeros(DataType::kFloat32, {3, 2})}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'lhs'"), std::string::npos) << r.status().message();
  g.tensors[static_cast<size_t>(b)].dims[0].value = 4;
  g.tensors[static_cast<size_t>(b)].strides = {2, 1};
  r = run_host_reference(g, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("node 'mm'"), std::string::npos) << r.status().message();
}

TEST(HostReference, CycleIsRejected) {
  Graph g = make_graph("cycle");
  int a = add_tensor(g, "a", {2}), b = add_tensor(g, "b", {2});
  add_node(g, "n0", OpKind::kPointwise, {b}, a);
  add_node(g, "n1", OpKind::kPointwise, {a}, b);
  g.outputs = {b};
  auto r = run_host_reference(g, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos) << r.status().message();
}

TEST(RandomInputs, DeterministicWithRangesPerConsumer) {
  Graph g = make_graph("ln", DataType::kFloat16);
  int x = add_tensor(g, "x", {4, 16}), s = add_tensor(g, "scale", {1, 16}), b = add_tensor(g, "bias", {1, 16}),
      y = add_tensor(g, "y", {4, 16});
  add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y);
  g.outputs = {y};
  auto r1 = make_random_inputs(g, 11), r2 = make_random_inputs(g, 11), r3 = make_random_inputs(g, 12);
  ASSERT_TRUE(r1.is_ok() && r2.is_ok() && r3.is_ok());
  ASSERT_EQ(r1->size(), 3u);
  EXPECT_EQ(r1->at(x).values(), r2->at(x).values());
  EXPECT_NE(r1->at(x).values(), r3->at(x).values());
  EXPECT_NE(r1->at(x).values(), r1->at(b).values());
  EXPECT_EQ(r1->at(x).dtype, DataType::kFloat16);
  for (double v : r1->at(s).values()) {
    EXPECT_GE(v, 0.5);
    EXPECT_LE(v, 1.5);
  }
  for (double v : r1->at(b).values()) EXPECT_LE(std::fabs(v), 0.5);
}

}  // namespace
}  // namespace kiln
