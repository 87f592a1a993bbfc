// The gate's false-alarm rate on simulated correct kernels (issue 31, item 5; docs/numerics.md "The gate"):
// every op family computed on the host the way a GPU kernel computes it — fp32 arithmetic, accumulation in
// several orders (sequential, reversed, pairwise, split-K), tensor-core-like truncated blocks, fast
// function approximations, probabilities rounded to the value dtype in SDPA — then rounded once to the
// output dtype, on many seeds and every floating output dtype, and checked against the host reference.
// Each family prints one line
//   GATE-FALSE-ALARMS family=matmul checks=… alarms=… elements=… worst: elem=… size=… bias=…
// (the worst statistic of each test as a fraction of its limit over all its checks) and must raise none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"
#include "validate/simulated_sums.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

// ---- Accumulation orders: a kernel's fp32 result from an element's terms (products), in order ----------

float sum_reversed(const std::vector<float>& p) {
  float acc = 0.f;
  for (size_t i = p.size(); i-- > 0;) acc += p[i];
  return acc;
}

// Split-K: four contiguous slices summed on their own, then the partial sums in order.
float sum_split4(const std::vector<float>& p) {
  float total = 0.f;
  const size_t n = p.size(), step = (n + 3) / 4;
  for (size_t s = 0; s < n; s += step) {
    float part = 0.f;
    for (size_t i = s; i < std::min(n, s + step); ++i) part += p[i];
    total += part;
  }
  return total;
}

using Order = std::function<float(const std::vector<float>&)>;
const std::vector<std::pair<std::string, Order>>& gemm_orders() {
  static const std::vector<std::pair<std::string, Order>> o = {
      {"sequential", simulated_sums::sequential<float>},
      {"reversed", sum_reversed},
      {"pairwise", simulated_sums::pairwise<float>},
      {"split4", sum_split4},
      {"truncated16", [](const std::vector<float>& p) { return simulated_sums::truncated(p, 16); }},
      {"truncated8", [](const std::vector<float>& p) { return simulated_sums::truncated(p, 8); }}};
  return o;
}
const std::vector<std::pair<std::string, Order>>& sum_orders() {  // CUDA-core reductions: round to nearest
  static const std::vector<std::pair<std::string, Order>> o = {{"sequential", simulated_sums::sequential<float>},
                                                               {"reversed", sum_reversed},
                                                               {"pairwise", simulated_sums::pairwise<float>},
                                                               {"split4", sum_split4}};
  return o;
}

// ---- The tally -----------------------------------------------------------------------------------------

struct Tally {
  int64_t checks = 0, alarms = 0, elements = 0;
  double elem = 0, size = 0, bias = 0;  // the worst fraction of each limit
  void add(const OutputCheck& c, const std::string& what) {
    ++checks;
    elements += c.error.count;
    if (c.verdict != Disposition::kPassed) {
      ++alarms;
      ADD_FAILURE() << "false alarm: " << what << ": " << c.summary;
    }
    const ErrorMeasures& e = c.error;
    ASSERT_TRUE(e.statistical) << what;
    elem = std::max(elem, e.element_ratio);
    size = std::max(size, e.size_limit > 0 ? e.sum_sq_err / e.size_limit : 0.0);
    const double b = e.mean_signed_rel < 0 ? -e.mean_signed_rel / e.bias_limit : e.mean_signed_rel / e.bias_limit_away;
    bias = std::max(bias, b);
  }
  void print(const char* family) const {
    std::printf(
        "GATE-FALSE-ALARMS family=%s checks=%lld alarms=%lld elements=%lld worst: elem=%.3f size=%.3f bias=%.3f\n",
        family, static_cast<long long>(checks), static_cast<long long>(alarms), static_cast<long long>(elements), elem,
        size, bias);
  }
};

// Checks `values` (the kernel's fp32 results, row-major) rounded to the output's dtype.
void check_kernel(const Graph& g, const ReferenceOutputs& ref, const std::vector<double>& values, Tally& t,
                  const std::string& what) {
  const int y = g.outputs[0];
  const HostTensor out = HostTensor::from_values(g.dtype_of(y), g.tensors[static_cast<size_t>(y)].shape(), values);
  auto rep = check_outputs(g, {out}, ref);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  t.add(rep->outputs[0], what);
}

struct Prepared {
  Graph g;
  std::map<int, HostTensor> in;
  ReferenceOutputs ref;
};

Prepared prepare(Graph g, uint64_t seed) {
  Prepared r;
  r.g = std::move(g);
  auto in = make_random_inputs(r.g, seed);
  EXPECT_TRUE(in.is_ok()) << in.status().to_string();
  r.in = std::move(*in);
  auto ref = run_host_reference_with_magnitudes(r.g, r.in);
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  r.ref = std::move(*ref);
  return r;
}

std::vector<float> as_float(const HostTensor& t) {
  const auto v = t.values();
  return std::vector<float>(v.begin(), v.end());
}

const DataType kOutDtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
constexpr uint64_t kSeeds = 24;

// io dtype for the inputs: fp16 in front of fp32 and fp16 outputs, bf16 in front of bf16 ones (products of
// either are exact in fp32).
DataType inputs_for(DataType out) { return out == DataType::kBFloat16 ? DataType::kBFloat16 : DataType::kFloat16; }

TEST(GateFalseAlarms, Matmul) {
  Tally t;
  for (const auto& [m, k, n, seeds] : std::vector<std::tuple<int64_t, int64_t, int64_t, uint64_t>>{
           {24, 64, 24, kSeeds}, {16, 1024, 16, kSeeds}, {8, 16384, 8, 8}})
    for (DataType dt : kOutDtypes)
      for (uint64_t seed = 1; seed <= seeds; ++seed) {
        Graph g = make_graph("mm", inputs_for(dt));
        const int a = add_tensor(g, "a", {m, k}), b = add_tensor(g, "b", {k, n}), y = add_tensor(g, "c", {m, n}, dt);
        add_node(g, "mm", OpKind::kMatmul, {a, b}, y);
        g.outputs = {y};
        const Prepared r = prepare(std::move(g), seed);
        const auto av = as_float(r.in.at(a)), bv = as_float(r.in.at(b));
        std::vector<std::vector<double>> outs(gemm_orders().size(), std::vector<double>(static_cast<size_t>(m * n)));
        std::vector<float> p(static_cast<size_t>(k));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t q = 0; q < k; ++q)
              p[static_cast<size_t>(q)] = av[static_cast<size_t>(i * k + q)] * bv[static_cast<size_t>(q * n + j)];
            for (size_t o = 0; o < outs.size(); ++o)
              outs[o][static_cast<size_t>(i * n + j)] = gemm_orders()[o].second(p);
          }
        for (size_t o = 0; o < outs.size(); ++o)
          check_kernel(r.g, r.ref, outs[o], t,
                       "K=" + std::to_string(k) + " " + dtype_name(dt) + " " + gemm_orders()[o].first + " seed " +
                           std::to_string(seed));
      }
  t.print("matmul");
  EXPECT_EQ(t.alarms, 0);
}

TEST(GateFalseAlarms, ConvFprop) {
  Tally t;
  const int64_t nb = 2, c = 16, h = 8, w = 8, kk = 16, f = 3;  // padding 1: K = 144, fewer at the border
  for (DataType dt : kOutDtypes)
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      Graph g = make_graph("conv", inputs_for(dt));
      const int x = add_tensor(g, "x", {nb, c, h, w}), wt = add_tensor(g, "w", {kk, c, f, f});
      const int y = add_tensor(g, "y", {nb, kk, h, w}, dt);
      Node& node = add_node(g, "conv", OpKind::kConvFprop, {x, wt}, y);
      node.conv.pre_padding = node.conv.post_padding = {1, 1};
      node.conv.stride = node.conv.dilation = {1, 1};
      g.outputs = {y};
      const Prepared r = prepare(std::move(g), seed);
      const auto xv = as_float(r.in.at(x)), wv = as_float(r.in.at(wt));
      std::vector<std::vector<double>> outs(gemm_orders().size(),
                                            std::vector<double>(static_cast<size_t>(nb * kk * h * w)));
      std::vector<float> p;
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t o = 0; o < kk; ++o)
          for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < w; ++j) {
              p.clear();  // the terms in (r, s, c) order, as an implicit-GEMM kernel over NHWC reads them
              for (int64_t fr = 0; fr < f; ++fr)
                for (int64_t fs = 0; fs < f; ++fs)
                  for (int64_t ci = 0; ci < c; ++ci) {
                    const int64_t ii = i + fr - 1, jj = j + fs - 1;
                    if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
                    p.push_back(xv[static_cast<size_t>(((b * c + ci) * h + ii) * w + jj)] *
                                wv[static_cast<size_t>(((o * c + ci) * f + fr) * f + fs)]);
                  }
              for (size_t q = 0; q < outs.size(); ++q)
                outs[q][static_cast<size_t>(((b * kk + o) * h + i) * w + j)] = gemm_orders()[q].second(p);
            }
      for (size_t q = 0; q < outs.size(); ++q)
        check_kernel(r.g, r.ref, outs[q], t,
                     std::string(dtype_name(dt)) + " " + gemm_orders()[q].first + " seed " + std::to_string(seed));
    }
  t.print("conv_fprop");
  EXPECT_EQ(t.alarms, 0);
}

TEST(GateFalseAlarms, ReductionSum) {
  Tally t;
  for (int64_t len : {64, 4096})
    for (DataType dt : kOutDtypes)
      for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
        const int64_t rows = 64;
        Graph g = make_graph("sum", dt);
        const int x = add_tensor(g, "x", {rows, len}), y = add_tensor(g, "y", {rows, 1});
        Node& node = add_node(g, "sum", OpKind::kReduction, {x}, y);
        node.reduction.mode = ReductionMode::kSum;
        node.reduction.axes = {1};
        g.outputs = {y};
        const Prepared r = prepare(std::move(g), seed);
        const auto xv = as_float(r.in.at(x));
        for (const auto& [name, order] : sum_orders()) {
          std::vector<double> out(static_cast<size_t>(rows));
          for (int64_t i = 0; i < rows; ++i)
            out[static_cast<size_t>(i)] = order(std::vector<float>(xv.begin() + i * len, xv.begin() + (i + 1) * len));
          check_kernel(r.g, r.ref, out, t, std::to_string(len) + " " + dtype_name(dt) + " " + name);
        }
      }
  t.print("reduction");
  EXPECT_EQ(t.alarms, 0);
}

// Pointwise functions in fp32 (the C library's float functions), and the fast approximations cuDNN uses,
// simulated as a relative error of 1.2e-5 (the H200's measured worst, tanh and gelu_tanh) of either sign.
float pointwise_f(PointwiseMode mode, float x, float b) {
  switch (mode) {
    case PointwiseMode::kTanh: return std::tanh(x);
    case PointwiseMode::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case PointwiseMode::kSilu: return x / (1.f + std::exp(-x));
    case PointwiseMode::kExp: return std::exp(x);
    case PointwiseMode::kGeluTanh: return 0.5f * x * (1.f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case PointwiseMode::kGeluErf: return 0.5f * x * (1.f + std::erf(x * 0.70710678f));
    case PointwiseMode::kRelu: return std::max(x, 0.f);
    case PointwiseMode::kAdd: return x + b;
    case PointwiseMode::kMul: return x * b;
    default: return x;
  }
}

TEST(GateFalseAlarms, Pointwise) {
  Tally t;
  const PointwiseMode modes[] = {PointwiseMode::kTanh, PointwiseMode::kSigmoid,  PointwiseMode::kSilu,
                                 PointwiseMode::kExp,  PointwiseMode::kGeluTanh, PointwiseMode::kGeluErf,
                                 PointwiseMode::kRelu, PointwiseMode::kAdd,      PointwiseMode::kMul};
  for (PointwiseMode mode : modes)
    for (DataType dt : kOutDtypes)
      for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
        const bool binary = mode == PointwiseMode::kAdd || mode == PointwiseMode::kMul;
        Graph g = make_graph("pw", dt);
        const int x = add_tensor(g, "x", {32, 64});
        const int b = binary ? add_tensor(g, "b", {32, 64}) : -1;
        const int y = add_tensor(g, "y", {32, 64});
        add_node(g, "f", OpKind::kPointwise, binary ? std::vector<int>{x, b} : std::vector<int>{x}, y).pointwise.mode =
            mode;
        g.outputs = {y};
        const Prepared r = prepare(std::move(g), seed);
        const auto xv = as_float(r.in.at(x));
        const auto bv = binary ? as_float(r.in.at(b)) : std::vector<float>(xv.size(), 0.f);
        const double a = function_approximation(mode) > 0 ? 1.2e-5 : 0.0;
        for (int variant = 0; variant < 3; ++variant) {  // exact fp32; approximation +a; oscillating +-a
          std::vector<double> out(xv.size());
          for (size_t i = 0; i < xv.size(); ++i) {
            const double e = variant == 0 ? 0.0 : variant == 1 ? a : a * std::sin(37.0 * static_cast<double>(i));
            out[i] = static_cast<double>(pointwise_f(mode, xv[i], bv[i])) * (1.0 + e);
          }
          check_kernel(r.g, r.ref, out, t,
                       std::string(pointwise_mode_name(mode)) + " " + dtype_name(dt) + " variant " +
                           std::to_string(variant) + " seed " + std::to_string(seed));
        }
      }
  t.print("pointwise");
  EXPECT_EQ(t.alarms, 0);
}

TEST(GateFalseAlarms, LayerNorm) {
  Tally t;
  const int64_t rows = 16, len = 512;
  for (DataType dt : kOutDtypes)
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      Graph g = make_graph("ln", dt);
      const int x = add_tensor(g, "x", {rows, len}), s = add_tensor(g, "scale", {1, len}),
                b = add_tensor(g, "bias", {1, len}), y = add_tensor(g, "y", {rows, len});
      add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y);
      g.outputs = {y};
      const Prepared r = prepare(std::move(g), seed);
      const auto xv = as_float(r.in.at(x)), sv = as_float(r.in.at(s)), bv = as_float(r.in.at(b));
      for (const auto& [name, order] : sum_orders()) {
        std::vector<double> out(xv.size());
        for (int64_t i = 0; i < rows; ++i) {
          std::vector<float> row(xv.begin() + i * len, xv.begin() + (i + 1) * len);
          const float mean = order(row) / static_cast<float>(len);
          std::vector<float> sq(row.size());
          for (size_t j = 0; j < row.size(); ++j) sq[j] = (row[j] - mean) * (row[j] - mean);
          const float inv = 1.f / std::sqrt(order(sq) / static_cast<float>(len) + 1e-5f);
          for (int64_t j = 0; j < len; ++j)
            out[static_cast<size_t>(i * len + j)] =
                (row[static_cast<size_t>(j)] - mean) * inv * sv[static_cast<size_t>(j)] + bv[static_cast<size_t>(j)];
        }
        check_kernel(r.g, r.ref, out, t, std::string(dtype_name(dt)) + " " + name + " seed " + std::to_string(seed));
      }
    }
  t.print("layer_norm");
  EXPECT_EQ(t.alarms, 0);
}

// Flash-attention-like: scores in fp32, softmax with the row maximum, probabilities rounded to the value
// dtype before the second product, normalized at the end.
TEST(GateFalseAlarms, Sdpa) {
  Tally t;
  const int64_t heads = 2, sq = 32, skv = 64, d = 64;
  for (DataType dt : kOutDtypes)
    for (bool causal : {false, true})
      for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
        Graph g = make_graph("sdpa", dt);
        const int q = add_tensor(g, "q", {1, heads, sq, d}), k = add_tensor(g, "k", {1, heads, skv, d}),
                  v = add_tensor(g, "v", {1, heads, skv, d}), o = add_tensor(g, "o", {1, heads, sq, d});
        add_node(g, "sdpa", OpKind::kSdpa, {q, k, v}, o).sdpa.causal = causal;
        g.outputs = {o};
        const Prepared r = prepare(std::move(g), seed);
        const auto qv = as_float(r.in.at(q)), kv = as_float(r.in.at(k)), vv = as_float(r.in.at(v));
        const float scale = 1.f / std::sqrt(static_cast<float>(d));
        for (const auto& [name, order] : sum_orders()) {
          std::vector<double> out(static_cast<size_t>(heads * sq * d));
          for (int64_t hh = 0; hh < heads; ++hh)
            for (int64_t i = 0; i < sq; ++i) {
              const int64_t keys = causal ? std::min(skv, i + 1) : skv;
              std::vector<float> s(static_cast<size_t>(keys)), prod(static_cast<size_t>(d));
              float mx = -INFINITY;
              for (int64_t j = 0; j < keys; ++j) {
                for (int64_t c = 0; c < d; ++c)
                  prod[static_cast<size_t>(c)] =
                      qv[static_cast<size_t>((hh * sq + i) * d + c)] * kv[static_cast<size_t>((hh * skv + j) * d + c)];
                s[static_cast<size_t>(j)] = order(prod) * scale;
                mx = std::max(mx, s[static_cast<size_t>(j)]);
              }
              std::vector<float> p(static_cast<size_t>(keys));
              for (int64_t j = 0; j < keys; ++j) p[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
              const float denom = order(p);
              for (float& e : p) e = static_cast<float>(round_to_dtype(e, dt));
              std::vector<float> terms(static_cast<size_t>(keys));
              for (int64_t c = 0; c < d; ++c) {
                for (int64_t j = 0; j < keys; ++j)
                  terms[static_cast<size_t>(j)] =
                      p[static_cast<size_t>(j)] * vv[static_cast<size_t>((hh * skv + j) * d + c)];
                out[static_cast<size_t>((hh * sq + i) * d + c)] = order(terms) / denom;
              }
            }
          check_kernel(
              r.g, r.ref, out, t,
              std::string(dtype_name(dt)) + (causal ? " causal " : " ") + name + " seed " + std::to_string(seed));
        }
      }
  t.print("sdpa");
  EXPECT_EQ(t.alarms, 0);
}

}  // namespace
}  // namespace kiln
