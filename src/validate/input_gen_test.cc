// Kiln's random inputs (docs/numerics.md "Random inputs"): the host generator against its definition —
// Philox4x32-10 by Random123's known answers, the counter layout, the value mapping and the rounding —
// so that the device generator (device_check.cu, checked against this one by the GPU tier) can be
// compared with a definition, not with itself.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kiln/validate/reference.h"
#include "validate/input_gen.h"
#include "validate/reference_common.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace validate_internal;
using namespace testing_graphs;

TEST(InputGen, PhiloxMatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]) << i;
  }
}

TEST(InputGen, BitsFollowTheCounterLayout) {
  // Element e of tensor t: counter (e/4 low, e/4 high, t, "KILN"), key (seed low, seed high), word e%4.
  const uint64_t seed = 0x0123456789ABCDEFull;
  for (uint64_t e : {0ull, 1ull, 2ull, 3ull, 4ull, 1000003ull, (1ull << 34) + 6}) {
    const uint32_t ctr[4] = {static_cast<uint32_t>(e / 4), static_cast<uint32_t>((e / 4) >> 32), 7u, 0x4B494C4Eu};
    const uint32_t key[2] = {0x89ABCDEFu, 0x01234567u};
    uint32_t out[4];
    philox4x32_10(ctr, key, out);
    EXPECT_EQ(input_bits(seed, 7, e), out[e % 4]) << e;
  }
  EXPECT_NE(input_bits(seed, 7, 5), input_bits(seed, 8, 5));      // tensors have their own streams
  EXPECT_NE(input_bits(seed, 7, 5), input_bits(seed + 1, 7, 5));  // and so do seeds
}

TEST(InputGen, ValuesAreExactAndInRange) {
  // lo + width * k * 2^-23 for the top 23 bits k.
  EXPECT_EQ(input_value(0u, -1.f, 2.f, false, 0, 0), -1.0);
  EXPECT_EQ(input_value(0xFFFFFFFFu, -1.f, 2.f, false, 0, 0), 1.0 - 0x1p-22);
  EXPECT_EQ(input_value(0x80000000u, 0.5f, 1.f, false, 0, 0), 1.0);
  EXPECT_EQ(input_value(0x00000200u, 0.5f, 1.f, false, 0, 0), 0.5 + 0x1p-23);  // k = 1
  // Integers: ceil(lo) + floor(bits * n / 2^32).
  EXPECT_EQ(input_value(0u, 0, 0, true, -3, 7), -3.0);
  EXPECT_EQ(input_value(0xFFFFFFFFu, 0, 0, true, -3, 7), 3.0);
  EXPECT_TRUE(input_range_is_exact(-1, 1));
  EXPECT_TRUE(input_range_is_exact(0.5, 1.5));
  EXPECT_TRUE(input_range_is_exact(-0.5, 0.5));
  EXPECT_FALSE(input_range_is_exact(0, 3));      // width not a power of two
  EXPECT_FALSE(input_range_is_exact(0.1, 1.1));  // lo off the grid
  EXPECT_FALSE(input_range_is_exact(4, 5));      // |lo| > width: the sum would need more than 24 bits
  EXPECT_EQ(input_nonzero_fallback(-1, 1), 1.0);
  EXPECT_EQ(input_nonzero_fallback(-0.5, 0.5), 0.5);
}

// make_random_inputs puts exactly the definition's values, rounded once to the dtype, at each logical
// element (through the tensor's strides), with each consumer's range.
TEST(InputGen, MakeRandomInputsFollowsTheDefinition) {
  Graph g = make_graph("mix", DataType::kBFloat16);
  const std::vector<int64_t> xd = {2, 3, 4, 5};
  const int x = add_tensor(g, "x", xd, DataType::kFloat16, nhwc_strides(xd));
  const int s = add_tensor(g, "scale", {1, 3, 4, 5}, DataType::kFloat32);
  const int b = add_tensor(g, "bias", {1, 3, 4, 5});
  const int y = add_tensor(g, "y", xd);
  add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y);
  const int q = add_tensor(g, "q", {3, 7}, DataType::kInt8), r = add_tensor(g, "r", {3, 7}, DataType::kInt8);
  add_node(g, "id", OpKind::kPointwise, {q}, r).pointwise.mode = PointwiseMode::kIdentity;
  g.outputs = {y, r};
  const uint64_t seed = 42;
  auto in = make_random_inputs(g, seed);
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  ASSERT_EQ(in->size(), 4u);
  struct Want {
    int t;
    double lo, hi;
  };
  for (const Want& w : {Want{x, -1, 1}, Want{s, 0.5, 1.5}, Want{b, -0.5, 0.5}, Want{q, -1, 1}}) {
    const HostTensor& h = in->at(w.t);
    EXPECT_EQ(h.strides, g.tensors[static_cast<size_t>(w.t)].strides);
    const bool integer = h.dtype == DataType::kInt8;
    const auto v = h.values();
    std::set<double> distinct;
    for (size_t e = 0; e < v.size(); ++e) {
      const double want =
          round_to_dtype(input_value(input_bits(seed, static_cast<uint32_t>(w.t), e), static_cast<float>(w.lo),
                                     static_cast<float>(w.hi - w.lo), integer, static_cast<int64_t>(std::ceil(w.lo)),
                                     static_cast<uint32_t>(std::floor(w.hi) - std::ceil(w.lo) + 1)),
                         h.dtype);
      EXPECT_EQ(v[e], want) << g.tensors[static_cast<size_t>(w.t)].name << " element " << e;
      EXPECT_GE(v[e], w.lo);
      EXPECT_LE(v[e], w.hi);
      distinct.insert(v[e]);
    }
    EXPECT_GT(distinct.size(), integer ? 2u : v.size() / 2);
  }
}

TEST(InputGen, LargeTensorsAreTheSameWhateverTheChunking) {
  // 2^20 + 3 elements: two chunks on the worker threads; element by element equal to the definition.
  Graph g = make_graph("big", DataType::kFloat32);
  const int x = add_tensor(g, "x", {(1 << 20) + 3}), y = add_tensor(g, "y", {(1 << 20) + 3});
  add_node(g, "id", OpKind::kPointwise, {x}, y).pointwise.mode = PointwiseMode::kIdentity;
  g.outputs = {y};
  auto in = make_random_inputs(g, 9);
  ASSERT_TRUE(in.is_ok());
  const auto& st = in->at(x).storage;
  double sum = 0;
  for (size_t e = 0; e < st.size(); ++e) {
    ASSERT_EQ(st[e], input_value(input_bits(9, static_cast<uint32_t>(x), e), -1.f, 2.f, false, 0, 0)) << e;
    sum += st[e];
  }
  EXPECT_LT(std::fabs(sum / static_cast<double>(st.size())), 3e-3);  // mean 0, sd 0.58/sqrt(n) = 6e-4
}

TEST(InputGen, ElementZeroNeverLeavesATensorAllZero) {
  // An fp8 scalar: find a seed whose draw rounds to 0 in e4m3 (|v| < 2^-10, about one seed in 500).
  Graph g = make_graph("fp8", DataType::kFp8E4M3);
  const int x = add_tensor(g, "x", {1}), y = add_tensor(g, "y", {1});
  add_node(g, "id", OpKind::kPointwise, {x}, y).pointwise.mode = PointwiseMode::kIdentity;
  g.outputs = {y};
  uint64_t seed = 0;
  while (round_to_dtype(input_value(input_bits(seed, static_cast<uint32_t>(x), 0), -1.f, 2.f, false, 0, 0),
                        DataType::kFp8E4M3) != 0.0)
    ASSERT_LT(++seed, 100000u);
  auto in = make_random_inputs(g, seed);
  ASSERT_TRUE(in.is_ok());
  EXPECT_EQ(in->at(x).storage[0], 1.0);
}

TEST(InputGen, ByValueTensorsTakeTheirValue) {
  Graph g = make_graph("scale", DataType::kFloat32);
  const int x = add_tensor(g, "x", {4}), c = add_tensor(g, "c", {1}), y = add_tensor(g, "y", {4});
  g.tensors[static_cast<size_t>(c)].by_value = true;
  g.tensors[static_cast<size_t>(c)].value = 0.25;
  add_node(g, "mul", OpKind::kPointwise, {x, c}, y).pointwise.mode = PointwiseMode::kScale;
  g.outputs = {y};
  auto in = make_random_inputs(g, 1);
  ASSERT_TRUE(in.is_ok());
  EXPECT_EQ(in->at(c).storage, std::vector<double>{0.25});
}

}  // namespace
}  // namespace kiln
