// Helpers for graph-layer tests: small graphs built directly in the IR.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::testing {

inline int add_tensor(Graph& g, const std::string& name, std::vector<int64_t> dims, Layout layout = Layout::kRowMajor) {
  TensorDesc t;
  t.name = name;
  for (int64_t d : dims) t.dims.push_back(Dim{d, ""});
  t.layout = layout;
  g.tensors.push_back(t);
  return static_cast<int>(g.tensors.size()) - 1;
}

inline int add_node(Graph& g, const std::string& name, OpKind op, std::vector<int> in, const std::string& out_name) {
  int out = g.find_tensor(out_name);
  if (out < 0) {
    TensorDesc t;
    t.name = out_name;
    g.tensors.push_back(t);
    out = static_cast<int>(g.tensors.size()) - 1;
  }
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(in);
  n.outputs = {out};
  g.nodes.push_back(n);
  return static_cast<int>(g.nodes.size()) - 1;
}

// The error message contains every one of `parts`.
#define EXPECT_ERROR_HAS(status, ...)                                                                       \
  do {                                                                                                      \
    ::kiln::Status s_ = (status);                                                                           \
    EXPECT_FALSE(s_.is_ok());                                                                               \
    for (const char* p_ : {__VA_ARGS__})                                                                    \
      EXPECT_NE(s_.message().find(p_), std::string::npos) << "missing '" << p_ << "' in: " << s_.message(); \
  } while (0)

}  // namespace kiln::testing
