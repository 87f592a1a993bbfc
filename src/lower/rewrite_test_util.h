// Shared by the lower layer's host tests of graph rewrites (canonicalize_test.cc, known_defects_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <map>

#include "kiln/graph/graph.h"
#include "kiln/validate/reference.h"

namespace kiln {

// The rewrite describes the same memory: the host reference run on the rewritten graph, fed the very
// storage of the original inputs, writes exactly the storage the original graph's reference writes.
inline void expect_same_memory_results(const Graph& original, const Graph& rewritten) {
  auto inputs = make_random_inputs(original, 5);
  ASSERT_TRUE(inputs.is_ok()) << inputs.status().to_string();
  std::map<int, HostTensor> moved;
  for (const auto& [idx, t] : *inputs) {
    const TensorDesc& d = rewritten.tensors[static_cast<size_t>(idx)];
    HostTensor r = HostTensor::zeros(t.dtype, d.shape(), d.strides);
    ASSERT_EQ(r.storage.size(), t.storage.size()) << d.name << ": the rewrite changed the memory span";
    r.storage = t.storage;
    moved.emplace(idx, std::move(r));
  }
  auto want = run_host_reference(original, *inputs);
  auto got = run_host_reference(rewritten, moved);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(want->size(), got->size());
  for (size_t i = 0; i < want->size(); ++i) EXPECT_EQ((*want)[i].storage, (*got)[i].storage) << "output " << i;
}

}  // namespace kiln
