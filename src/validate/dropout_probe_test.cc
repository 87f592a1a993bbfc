// The host side of the dropout probe (kiln/validate/dropout_probe.h): the references' form of a dropout graph, the
// host reference with a mask, and the probe's check of the share dropped. The probe itself needs a GPU
// (src/runtime/ops_gpu_test.cc runs it through the tuner on cuDNN's plans).
#include "kiln/validate/dropout_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

constexpr int64_t kB = 2, kH = 2, kHk = 1, kSq = 5, kSkv = 7, kD = 8, kDv = 4;
constexpr double kDropout = 0.25;

// sdpa over q [2, 2, 5, 8], k [2, 1, 7, 8], v [2, 1, 7, 4] (grouped heads), causal, with dropout's seed and offset;
// `dropout` 0 leaves them out.
Graph dropout_graph(double dropout) {
  Graph g = make_graph("drop");
  const int q = add_tensor(g, "q", {kB, kH, kSq, kD}), k = add_tensor(g, "k", {kB, kHk, kSkv, kD}),
            v = add_tensor(g, "v", {kB, kHk, kSkv, kDv}), o = add_tensor(g, "o", {kB, kH, kSq, kDv});
  std::vector<int> in = {q, k, v};
  if (dropout > 0) {
    in.push_back(add_tensor(g, "seed", {1, 1, 1, 1}, DataType::kInt64));
    in.push_back(add_tensor(g, "offset", {1, 1, 1, 1}, DataType::kInt64));
  }
  Node& n = add_node(g, "attn", OpKind::kSdpa, in, o);
  n.sdpa.causal = true;
  n.sdpa.dropout = dropout;
  const int stats = add_tensor(g, "lse", {kB, kH, kSq, 1}, DataType::kFloat32);
  n.outputs.push_back(stats);
  g.outputs = {o, stats};
  return g;
}

HostTensor tensor(const Graph& g, int t, const std::vector<double>& v) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  return HostTensor::from_values(d.dtype.value_or(g.io_dtype), d.shape(), v, d.strides);
}

std::vector<double> draw(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

// The references' outputs (o, then the statistics) of `g` on `in`.
std::vector<std::vector<double>> run(const Graph& g, const std::map<int, HostTensor>& in) {
  StatusOr<std::vector<HostTensor>> r = run_host_reference(g, in);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  std::vector<std::vector<double>> out;
  if (r.is_ok())
    for (const HostTensor& t : *r) out.push_back(t.values());
  return out;
}

TEST(DropoutProbe, TheReferenceFormAddsTheMaskAsALastInputAndKeepsEveryOtherTensor) {
  const Graph g = dropout_graph(kDropout);
  std::map<int, int> masks;
  const Graph r = dropout_reference_graph(g, &masks);
  ASSERT_EQ(masks.size(), 1u);
  const int m = masks.at(0);
  EXPECT_EQ(m, static_cast<int>(g.tensors.size()));  // appended: every other tensor keeps its index
  ASSERT_EQ(r.tensors.size(), g.tensors.size() + 1);
  for (size_t i = 0; i < g.tensors.size(); ++i) EXPECT_EQ(r.tensors[i].name, g.tensors[i].name);
  EXPECT_EQ(r.tensors[static_cast<size_t>(m)].name, "attn.dropout_keep");
  EXPECT_EQ(r.tensors[static_cast<size_t>(m)].shape(), (std::vector<int64_t>{kB, kH, kSq, kSkv}));
  EXPECT_EQ(r.tensors[static_cast<size_t>(m)].dtype, DataType::kInt8);
  const SdpaInputs roles = sdpa_inputs(r.nodes[0]);
  EXPECT_EQ(roles.seed, 3);
  EXPECT_EQ(roles.offset, 4);
  EXPECT_EQ(roles.dropout_keep, 5);
  EXPECT_EQ(r.nodes[0].inputs[5], m);
  EXPECT_TRUE(has_dropout(g));
  EXPECT_FALSE(has_dropout(dropout_graph(0)));
  // A graph without dropout is its own reference form.
  std::map<int, int> none;
  EXPECT_EQ(dropout_reference_graph(dropout_graph(0), &none).tensors.size(), dropout_graph(0).tensors.size());
  EXPECT_TRUE(none.empty());
}

// Without the mask there is nothing to check a dropout plan against: the reference says so, naming the node.
TEST(DropoutProbe, TheReferenceRefusesADropoutNodeWithoutItsMask) {
  const Graph g = dropout_graph(kDropout);
  std::mt19937 rng(3);
  std::map<int, HostTensor> in{{0, tensor(g, 0, draw(rng, kB * kH * kSq * kD))},
                               {1, tensor(g, 1, draw(rng, kB * kHk * kSkv * kD))},
                               {2, tensor(g, 2, draw(rng, kB * kHk * kSkv * kDv))},
                               {4, tensor(g, 4, {11})},
                               {5, tensor(g, 5, {0})}};
  StatusOr<std::vector<HostTensor>> r = run_host_reference(g, in);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported) << r.status().to_string();
  EXPECT_NE(r.status().message().find("node 'attn'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("needs the mask the plan drew"), std::string::npos) << r.status().message();
}

// What the probe reads is what the reference computes: with v one-hot over a block of keys, o of the reference with
// a mask is each attended probability times keep / (1 - dropout), the probability itself being o of the same graph
// without dropout. With v drawn, o(mask) + o(complement) = o(no dropout) / (1 - dropout), and the statistics are
// the scores' own whatever the mask.
TEST(DropoutProbe, TheReferenceWeighsEachProbabilityByItsKeepBit) {
  const Graph g = dropout_graph(kDropout), plain = dropout_graph(0);
  std::map<int, int> masks;
  const Graph r = dropout_reference_graph(g, &masks);
  const int m = masks.at(0);
  std::mt19937 rng(7);
  const std::vector<double> q = draw(rng, kB * kH * kSq * kD), k = draw(rng, kB * kHk * kSkv * kD);
  std::vector<double> keep(static_cast<size_t>(kB * kH * kSq * kSkv)), flipped(keep.size());
  std::bernoulli_distribution kept(1.0 - kDropout);
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = kept(rng) ? 1 : 0;
    flipped[i] = 1 - keep[i];
  }
  auto inputs = [&](const Graph& graph, const std::vector<double>& v, const std::vector<double>* mask) {
    std::map<int, HostTensor> in{{0, tensor(graph, 0, q)}, {1, tensor(graph, 1, k)}, {2, tensor(graph, 2, v)}};
    if (graph.nodes[0].sdpa.dropout > 0) {
      in.emplace(graph.find_tensor("seed"), tensor(graph, graph.find_tensor("seed"), {11}));
      in.emplace(graph.find_tensor("offset"), tensor(graph, graph.find_tensor("offset"), {0}));
    }
    if (mask) in.emplace(m, tensor(graph, m, *mask));
    return in;
  };
  for (int64_t block = 0; block * kDv < kSkv; ++block) {
    std::vector<double> one_hot(static_cast<size_t>(kB * kHk * kSkv * kDv), 0.0);
    for (int64_t e = 0; e < kB * kHk; ++e)
      for (int64_t j = block * kDv; j < std::min((block + 1) * kDv, kSkv); ++j)
        one_hot[static_cast<size_t>((e * kSkv + j) * kDv + j - block * kDv)] = 1.0;
    const auto probs = run(plain, inputs(plain, one_hot, nullptr));
    const auto dropped = run(r, inputs(r, one_hot, &keep));
    ASSERT_EQ(probs.size(), 2u);
    ASSERT_EQ(dropped.size(), 2u);
    int64_t checked = 0;
    for (int64_t row = 0; row < kB * kH * kSq; ++row)
      for (int64_t c = 0; c < kDv && block * kDv + c < kSkv; ++c) {
        const size_t at = static_cast<size_t>(row * kDv + c);
        const double want = probs[0][at] * keep[static_cast<size_t>(row * kSkv + block * kDv + c)] / (1 - kDropout);
        EXPECT_NEAR(dropped[0][at], want, 1e-6) << "row " << row << " key " << block * kDv + c;  // o is fp32
        checked += probs[0][at] > 0 ? 1 : 0;
      }
    EXPECT_GT(checked, 0);
  }
  const std::vector<double> v = draw(rng, kB * kHk * kSkv * kDv);
  const auto whole = run(plain, inputs(plain, v, nullptr));
  const auto a = run(r, inputs(r, v, &keep)), b = run(r, inputs(r, v, &flipped));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < whole[0].size(); ++i) EXPECT_NEAR(a[0][i] + b[0][i], whole[0][i] / (1 - kDropout), 1e-6) << i;
  for (size_t i = 0; i < whole[1].size(); ++i) EXPECT_EQ(a[1][i], whole[1][i]) << "statistics row " << i;
  // The magnitudes bound the values with the mask too.
  std::map<int, HostTensor> in = inputs(r, v, &keep);
  StatusOr<ReferenceOutputs> mag = run_host_reference_with_magnitudes(r, in);
  ASSERT_TRUE(mag.is_ok()) << mag.status().to_string();
  const std::vector<double> bound = mag->magnitudes[0].values();
  for (size_t i = 0; i < a[0].size(); ++i) EXPECT_GE(bound[i], std::fabs(a[0][i])) << i;
}

// The backward pass with dropout, against central differences of the forward with the same mask: dq, dk, dv are
// the gradients of sum(do * o(mask)), o and the statistics from that forward (the statistics are the scores' own).
// Grouped heads, causal; a padding mask too. Nothing here restates the backward's formulas.
TEST(DropoutProbe, TheBackwardWithAMaskIsTheGradientOfTheForwardWithIt) {
  for (bool padding : {false, true}) {
    Graph fwd = make_graph("fwd");
    const int q = add_tensor(fwd, "q", {kB, kH, kSq, kD}), k = add_tensor(fwd, "k", {kB, kHk, kSkv, kD}),
              v = add_tensor(fwd, "v", {kB, kHk, kSkv, kDv});
    std::vector<int> fin = {q, k, v}, lengths;
    if (padding)
      for (const char* n : {"seq_len_q", "seq_len_kv"})
        lengths.push_back(add_tensor(fwd, n, {kB, 1, 1, 1}, DataType::kInt32));
    fin.insert(fin.end(), lengths.begin(), lengths.end());
    const int seed = add_tensor(fwd, "seed", {1, 1, 1, 1}, DataType::kInt64),
              offset = add_tensor(fwd, "offset", {1, 1, 1, 1}, DataType::kInt64);
    fin.insert(fin.end(), {seed, offset});
    const int o = add_tensor(fwd, "o", {kB, kH, kSq, kDv}), lse = add_tensor(fwd, "lse", {kB, kH, kSq, 1});
    Node& fn = add_node(fwd, "attn", OpKind::kSdpa, fin, o);
    fn.sdpa.causal = true;
    fn.sdpa.padding = padding;
    fn.sdpa.dropout = kDropout;
    fn.outputs.push_back(lse);
    fwd.outputs = {o, lse};
    std::map<int, int> fmask;
    const Graph rf = dropout_reference_graph(fwd, &fmask);

    std::mt19937 rng(padding ? 17 : 13);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto grid = [&](int64_t n) {  // values on a grid of 2^-10: x +- 2^-6 is exact in fp32
      std::vector<double> x(static_cast<size_t>(n));
      for (double& e : x) e = std::round(u(rng) * 1024.0) / 1024.0;
      return x;
    };
    std::map<int, std::vector<double>> xs{
        {q, grid(kB * kH * kSq * kD)}, {k, grid(kB * kHk * kSkv * kD)}, {v, grid(kB * kHk * kSkv * kDv)}};
    const std::vector<double> lq = {3, 5}, lkv = {6, 7};
    std::vector<double> keep(static_cast<size_t>(kB * kH * kSq * kSkv));
    std::bernoulli_distribution kept(1.0 - kDropout);
    for (double& e : keep) e = kept(rng) ? 1 : 0;
    const std::vector<double> dout = grid(kB * kH * kSq * kDv);
    auto fixed = [&](const Graph& g, std::map<int, HostTensor>& in, int mask) {
      if (padding) {
        in.emplace(g.find_tensor("seq_len_q"), tensor(g, g.find_tensor("seq_len_q"), lq));
        in.emplace(g.find_tensor("seq_len_kv"), tensor(g, g.find_tensor("seq_len_kv"), lkv));
      }
      in.emplace(g.find_tensor("seed"), tensor(g, g.find_tensor("seed"), {5}));
      in.emplace(g.find_tensor("offset"), tensor(g, g.find_tensor("offset"), {0}));
      in.emplace(mask, tensor(g, mask, keep));
    };
    auto forward = [&](const std::map<int, std::vector<double>>& at) {
      std::map<int, HostTensor> in;
      for (const auto& [t, x] : at) in.emplace(t, tensor(rf, t, x));
      fixed(rf, in, fmask.at(0));
      return run(rf, in);
    };
    const auto ref = forward(xs);
    ASSERT_EQ(ref.size(), 2u);

    Graph bwd = make_graph("bwd");
    const int bq = add_tensor(bwd, "q", {kB, kH, kSq, kD}), bk = add_tensor(bwd, "k", {kB, kHk, kSkv, kD}),
              bv = add_tensor(bwd, "v", {kB, kHk, kSkv, kDv}), bo = add_tensor(bwd, "o", {kB, kH, kSq, kDv}),
              bg = add_tensor(bwd, "do", {kB, kH, kSq, kDv}),
              bl = add_tensor(bwd, "stats", {kB, kH, kSq, 1}, DataType::kFloat32);
    std::vector<int> bin = {bq, bk, bv, bo, bg, bl};
    if (padding)
      for (const char* n : {"seq_len_q", "seq_len_kv"})
        bin.push_back(add_tensor(bwd, n, {kB, 1, 1, 1}, DataType::kInt32));
    bin.push_back(add_tensor(bwd, "seed", {1, 1, 1, 1}, DataType::kInt64));
    bin.push_back(add_tensor(bwd, "offset", {1, 1, 1, 1}, DataType::kInt64));
    const int dq = add_tensor(bwd, "dq", {kB, kH, kSq, kD}), dk = add_tensor(bwd, "dk", {kB, kHk, kSkv, kD}),
              dv = add_tensor(bwd, "dv", {kB, kHk, kSkv, kDv});
    Node& bn = add_node(bwd, "grad", OpKind::kSdpaBackward, bin, dq);
    bn.sdpa = fwd.nodes[0].sdpa;
    bn.outputs = {dq, dk, dv};
    bwd.outputs = {dq, dk, dv};
    std::map<int, int> bmask;
    const Graph rb = dropout_reference_graph(bwd, &bmask);
    ASSERT_EQ(bmask.size(), 1u);
    std::map<int, HostTensor> in{{bq, tensor(rb, bq, xs[q])}, {bk, tensor(rb, bk, xs[k])},
                                 {bv, tensor(rb, bv, xs[v])}, {bo, tensor(rb, bo, ref[0])},
                                 {bg, tensor(rb, bg, dout)},  {bl, tensor(rb, bl, ref[1])}};
    fixed(rb, in, bmask.at(0));
    const auto grads = run(rb, in);
    ASSERT_EQ(grads.size(), 3u);
    // Without the mask the backward reference refuses, as the forward's does.
    EXPECT_EQ(run_host_reference(bwd, in).status().code(), StatusCode::kNotSupported);
    const int wrt[3] = {q, k, v};
    double largest = 0.0;
    for (int w = 0; w < 3; ++w)
      for (size_t e = 0; e < grads[static_cast<size_t>(w)].size(); ++e) {
        auto diff = [&](double step) {  // central differences, extrapolated (Richardson)
          auto plus = xs, minus = xs;
          plus[wrt[w]][e] += step;
          minus[wrt[w]][e] -= step;
          const std::vector<double> op = forward(plus)[0], om = forward(minus)[0];
          double fd = 0.0;
          for (size_t i = 0; i < dout.size(); ++i) fd += dout[i] * (op[i] - om[i]) / (2 * step);
          return fd;
        };
        const double h1 = 0x1p-6, fd = (4.0 * diff(h1 / 2) - diff(h1)) / 3.0;
        EXPECT_NEAR(grads[static_cast<size_t>(w)][e], fd, 2e-4)
            << "d"
            << "qkv"[w] << "[" << e << "]" << (padding ? " padded" : "");
        largest = std::max(largest, std::fabs(fd));
      }
    EXPECT_GT(largest, 0.05);  // the gradients are not all ~0
  }
}

// The probe's own check: the share dropped among attended probabilities within 6 binomial standard deviations (and
// 0.001) of dropout; a plan that keeps everything (it ignores dropout) or drops too many is Incorrect, and the
// report it joins takes the worse verdict.
TEST(DropoutProbe, TheShareDroppedMustBeDropoutsWithinTheBinomialBand) {
  DropoutNodeProbe p;
  p.node = 0;
  p.dropout = 0.1;
  p.runs = 3;
  p.attended = 1000000;
  const double band = p.allowed_deviation();
  EXPECT_NEAR(band, 6.0 * std::sqrt(0.1 * 0.9 / 1e6) + 0.001, 1e-15);
  p.dropped = 100000;
  EXPECT_EQ(p.verdict(), Disposition::kPassed);
  p.dropped = static_cast<int64_t>((0.1 + band * 0.99) * 1e6);
  EXPECT_EQ(p.verdict(), Disposition::kPassed);
  p.dropped = static_cast<int64_t>((0.1 + band * 1.01) * 1e6) + 1;
  EXPECT_EQ(p.verdict(), Disposition::kIncorrect);
  p.dropped = 0;  // dropout ignored
  EXPECT_EQ(p.verdict(), Disposition::kIncorrect);
  EXPECT_NE(p.summary("node 'attn'").find("does not drop with probability 0.1"), std::string::npos)
      << p.summary("node 'attn'");
  p.attended = 0;
  p.dropped = 0;
  EXPECT_EQ(p.verdict(), Disposition::kNotVerified);

  const Graph g = dropout_graph(kDropout);
  DropoutProbe probe;
  DropoutNodeProbe ignored;
  ignored.node = 0;
  ignored.dropout = kDropout;
  ignored.attended = 20000;
  probe.nodes.push_back(ignored);
  CheckReport report;
  report.verdict = Disposition::kPassed;
  probe.add_to(g, report);
  EXPECT_EQ(report.verdict, Disposition::kIncorrect);
  ASSERT_EQ(report.outputs.size(), 1u);
  EXPECT_EQ(report.outputs[0].name, "o dropout mask");
  EXPECT_NE(report.summary().find("node 'attn' dropout mask: Incorrect dropped 0 of 20000"), std::string::npos)
      << report.summary();
  probe.nodes[0].dropped = 5000;
  CheckReport good;
  good.verdict = Disposition::kPassed;
  probe.add_to(g, good);
  EXPECT_EQ(good.verdict, Disposition::kPassed) << good.summary();
}

}  // namespace
}  // namespace kiln
