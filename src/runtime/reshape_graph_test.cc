// reshape_graph (kiln/runtime/planner.h): a graph at another shape, its extents derived again.
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kiln/graph/graph.h"
#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

TEST(Planner, ReshapeRederivesExtentsAndKeepsTheStructure) {
  Graph g = token_graph(64);
  ASSERT_TRUE(validate_graph(g).is_ok());
  auto s64 = compute_signature(g);
  auto r = reshape_graph(g, {{"tokens", 1000}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const int y = r->find_tensor("y");
  ASSERT_GE(y, 0);
  EXPECT_EQ(r->tensors[static_cast<size_t>(y)].shape(), (std::vector<int64_t>{1, 1000, 256}));
  EXPECT_EQ(r->tensors[static_cast<size_t>(y)].strides, (std::vector<int64_t>{256000, 256, 1}));
  auto s1000 = compute_signature(*r);
  ASSERT_TRUE(s64.is_ok() && s1000.is_ok());
  EXPECT_EQ(s1000->structure, s64->structure);
  EXPECT_EQ(s1000->shape_key, "tokens=1000");
  auto bad = reshape_graph(g, {});
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no value for dynamic dim 'tokens'"), std::string::npos);
}

// A channels-last convolution with a dynamic batch: strides follow the layout at the new batch, and the
// structure is the same (the batch stays symbolic through the convolution).
TEST(Planner, ReshapeAChannelsLastConvolution) {
  auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto s0 = compute_signature(*g);
  auto r = reshape_graph(*g, {{"batch", 5}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s1 = compute_signature(*r);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_EQ(s1->structure, s0->structure);
  EXPECT_EQ(s1->shape_key, "batch=5");
  const TensorDesc& x = r->tensors[static_cast<size_t>(r->find_tensor("x"))];
  ASSERT_EQ(x.dims.size(), 4u);
  EXPECT_EQ(x.dims[0].value, 5);
  // NHWC strides of [N, C, H, W]: C is the innermost.
  EXPECT_EQ(x.strides[1], 1);
  EXPECT_EQ(x.strides[0], x.dims[1].value * x.dims[2].value * x.dims[3].value);
  for (int t : r->outputs) EXPECT_EQ(r->tensors[static_cast<size_t>(t)].dims[0].value, 5);
}

// A conv whose image height and width are dynamic: reshaped to another size, its derived extents follow, and
// it keeps its structure (they are symbolic in the signature), so one structure serves every image size.
TEST(Planner, ReshapeAConvOverImageSizesKeepsItsStructure) {
  auto g = parse_spec_string(R"({"name": "img", "io_dtype": "fp16", "dynamic": {"h": 32, "w": 48},
    "tensors": {"x": {"dims": [4, 16, "h", "w"], "layout": "NHWC"}, "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"},
                "b": {"dims": [1, 32, 1, 1], "layout": "NHWC"}},
    "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"], "padding": [1, 1],
               "stride": [2, 2]},
              {"name": "bias", "op": "bias_add", "inputs": ["c", "b"], "outputs": ["cb"]},
              {"name": "act", "op": "relu", "inputs": ["cb"], "outputs": ["y"]}],
    "outputs": ["y"]})",
                             "img.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto s0 = compute_signature(*g);
  auto r = reshape_graph(*g, {{"h", 57}, {"w", 20}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s1 = compute_signature(*r);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_EQ(s1->structure, s0->structure) << s0->canonical << "\n" << s1->canonical;
  EXPECT_EQ(s1->shape_key, "h=57,w=20");
  const TensorDesc& y = r->tensors[static_cast<size_t>(r->find_tensor("y"))];
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{4, 32, 29, 10}));  // (57 + 2 - 3) / 2 + 1, (20 + 2 - 3) / 2 + 1
  EXPECT_EQ(y.strides[1], 1);
}

// reshaped_signature (the obtain path's signature of a new shape) equals a full compute_signature for every
// example with dynamic dims at several values, and for graphs whose text reads a dynamic value: an SDPA whose
// default scale follows a dynamic head dim, where the structure changes with the shape.
TEST(Planner, ReshapedSignatureEqualsAFullSignature) {
  auto same = [](const GraphSignature& a, const GraphSignature& b) {
    return a.structure == b.structure && a.shape_key == b.shape_key && a.canonical == b.canonical &&
           a.tensor_ids == b.tensor_ids;
  };
  int checked = 0;
  for (const char* name : {"conv_bias_relu", "conv_dgrad", "conv_wgrad", "layer_norm", "rms_norm", "sdpa_fwd",
                           "small/conv_bias_relu", "small/matmul_bias_gelu", "small/sdpa_fwd"}) {
    auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".json");
    ASSERT_TRUE(g.is_ok()) << name << ": " << g.status().to_string();
    auto base = compute_signature(*g);
    ASSERT_TRUE(base.is_ok()) << name;
    for (int64_t v : {1, 3, 7, 64}) {
      std::map<std::string, int64_t> shape = g->dynamic_dims;
      for (auto& [sym, value] : shape) value = v;
      auto r = reshape_graph(*g, shape);
      if (!r.is_ok()) continue;  // e.g. a dx whose declared extents do not fit every batch
      auto fast = reshaped_signature(*g, *base, *r);
      auto full = compute_signature(*r);
      ASSERT_TRUE(fast.is_ok() && full.is_ok()) << name;
      EXPECT_TRUE(same(*fast, *full)) << name << " at " << v << ": " << fast->shape_key << " vs " << full->shape_key;
      EXPECT_EQ(fast->structure, base->structure) << name << ": one structure for every value";
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
  // Two symbols: the key keeps the canonical order (first appearance), not the map's.
  auto two = parse_spec_string(R"({"name": "img", "io_dtype": "fp16", "dynamic": {"h": 32, "a_w": 48},
    "tensors": {"x": {"dims": [4, 16, "h", "a_w"], "layout": "NHWC"}, "w": {"dims": [32, 16, 3, 3], "layout": "NHWC"}},
    "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"], "padding": [1, 1]}],
    "outputs": ["y"]})",
                               "img.json");
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  auto tb = compute_signature(*two);
  auto tr = reshape_graph(*two, {{"h", 9}, {"a_w", 11}});
  ASSERT_TRUE(tb.is_ok() && tr.is_ok());
  auto tf = reshaped_signature(*two, *tb, *tr);
  auto tfull = compute_signature(*tr);
  ASSERT_TRUE(tf.is_ok() && tfull.is_ok());
  EXPECT_TRUE(same(*tf, *tfull)) << tf->shape_key << " vs " << tfull->shape_key;
  // A dynamic head dim: the default scale 1/sqrt(d) is in the text, so each d is its own structure.
  auto sd = parse_spec_string(R"({"name": "att", "io_dtype": "bf16", "dynamic": {"d": 64},
    "tensors": {"q": {"dims": [1, 2, 128, "d"]}, "k": {"dims": [1, 2, 128, "d"]}, "v": {"dims": [1, 2, 128, "d"]}},
    "nodes": [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"]}],
    "outputs": ["o"]})",
                              "att.json");
  ASSERT_TRUE(sd.is_ok()) << sd.status().to_string();
  auto sb = compute_signature(*sd);
  auto sr = reshape_graph(*sd, {{"d", 128}});
  ASSERT_TRUE(sb.is_ok() && sr.is_ok()) << (sr.is_ok() ? "" : sr.status().to_string());
  auto sf = reshaped_signature(*sd, *sb, *sr);
  auto sfull = compute_signature(*sr);
  ASSERT_TRUE(sf.is_ok() && sfull.is_ok());
  EXPECT_TRUE(same(*sf, *sfull));
  EXPECT_NE(sf->structure, sb->structure) << "the scale differs, so the structure does";
}

// A dx of stride 2 has several valid extents and a dw's filter is not derived: reshape keeps what the
// spec declared (it used to fall back to the smallest dx and the formula's dw; found by review).
TEST(Planner, ReshapeKeepsADeclaredConvGradientExtent) {
  auto dgrad = parse_spec_string(R"({"name": "dg", "io_dtype": "fp16", "dynamic": {"batch": 2},
    "tensors": {"dy": {"dims": ["batch", 16, 4, 4], "layout": "NHWC"}, "w": {"dims": [16, 8, 3, 3], "layout": "NHWC"},
                "dx": {"dims": ["batch", 8, 8, 8], "layout": "NHWC"}},
    "nodes": [{"name": "dgrad", "op": "conv_dgrad", "inputs": ["dy", "w"], "outputs": ["dx"], "padding": [1, 1],
               "stride": [2, 2]}],
    "outputs": ["dx"]})",
                                 "dg.json");
  ASSERT_TRUE(dgrad.is_ok()) << dgrad.status().to_string();
  ASSERT_TRUE(validate_graph(*dgrad).is_ok());
  auto r = reshape_graph(*dgrad, {{"batch", 3}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const TensorDesc& dx = r->tensors[static_cast<size_t>(r->find_tensor("dx"))];
  EXPECT_EQ(dx.shape(), (std::vector<int64_t>{3, 8, 8, 8}));
  auto wgrad = parse_spec_string(R"({"name": "wg", "io_dtype": "fp16", "dynamic": {"batch": 2},
    "tensors": {"x": {"dims": ["batch", 8, 8, 8], "layout": "NHWC"}, "dy": {"dims": ["batch", 16, 8, 8], "layout": "NHWC"},
                "dw": {"dims": [16, 8, 3, 3], "layout": "NHWC", "dtype": "fp32"}},
    "nodes": [{"name": "wgrad", "op": "conv_wgrad", "inputs": ["x", "dy"], "outputs": ["dw"], "padding": [1, 1]}],
    "outputs": ["dw"]})",
                                 "wg.json");
  ASSERT_TRUE(wgrad.is_ok()) << wgrad.status().to_string();
  ASSERT_TRUE(validate_graph(*wgrad).is_ok());
  auto w = reshape_graph(*wgrad, {{"batch", 5}});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->tensors[static_cast<size_t>(w->find_tensor("dw"))].shape(), (std::vector<int64_t>{16, 8, 3, 3}));
}

}  // namespace
}  // namespace kiln
