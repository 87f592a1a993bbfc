// Decode attention over paged caches as a spec (knl4's tests: kernel_plan_test.cc, kernel_plan_gpu_test.cc): q
// [b, h, 1, d] over caches [blocks, hk, bs, d] through page tables [b, 1, pages, 1], with the lengths; `attrs` more
// JSON members of the node, `outputs` its outputs (an "lse" among them is declared fp32). Only for tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/spec/spec.h"

namespace kiln::test {

inline Graph paged_decode_graph(int64_t b, int64_t h, int64_t hk, int64_t d, int64_t bs, int64_t pages, int64_t blocks,
                                const std::string& io = "bf16", const std::string& attrs = "",
                                const std::string& outputs = "\"o\"") {
  const auto dims = [](std::vector<int64_t> v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  const std::string i32 = R"(, "dtype": "int32"})";
  const std::string spec =
      R"({"name": "decode", "io_dtype": ")" + io + R"(", "tensors": {"q": {"dims": )" + dims({b, h, 1, d}) +
      R"(}, "k": {"dims": )" + dims({blocks, hk, bs, d}) + R"(}, "v": {"dims": )" + dims({blocks, hk, bs, d}) +
      R"(}, "lq": {"dims": )" + dims({b, 1, 1, 1}) + i32 + R"(, "lkv": {"dims": )" + dims({b, 1, 1, 1}) + i32 +
      R"(, "tk": {"dims": )" + dims({b, 1, pages, 1}) + i32 + R"(, "tv": {"dims": )" + dims({b, 1, pages, 1}) + i32 +
      (outputs.find("lse") != std::string::npos ? R"(, "lse": {"dtype": "float32"})" : "") +
      R"(}, "nodes": [{"name": "attn", "op": "sdpa", "padding_mask": true, "paged_kv": true, "inputs": ["q", "k", "v",
      "lq", "lkv", "tk", "tv"], "outputs": [)" +
      outputs + "]" + attrs + R"(}], "outputs": [)" + outputs + "]}";
  auto g = parse_spec_string(spec, "paged_decode_graph");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << spec;
  return g.is_ok() ? *g : Graph{};
}

}  // namespace kiln::test
