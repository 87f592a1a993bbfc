// Internal to the graph layer: what the graph layer knows of each op family, one module per family
// (src/graph/ops/<family>.cc: arity, shape and dtype inference, signature attributes, cost), reached
// through one table (op_family(), src/graph/ops/op_families.cc). The references of a family are in
// src/validate/ops/<family>.*, its lowering in src/lower/ops/<family>.cc. Adding an op or a pointwise
// mode: docs/contributing.md "Adding an op or a pointwise mode".
#pragma once

#include <string>
#include <vector>

#include "graph/validate_internal.h"
#include "kiln/graph/graph.h"
#include "kiln/graph/op_cost.h"

namespace kiln::graph_internal {

using Dims = std::vector<Dim>;

// Context for one node during inference: names its inputs and outputs in messages.
struct NodeCtx {
  Graph& g;
  const GraphRoles& roles;
  Node& node;
  std::string where;

  const TensorDesc& in(size_t i) const { return g.tensors[node.inputs[i]]; }
  DataType in_dtype(size_t i) const { return roles.dtype_of(node.inputs[i]); }
  DataType out_dtype(size_t i = 0) const { return roles.dtype_of(node.outputs[i]); }
  std::string in_label(size_t i) const { return "input '" + in(i).name + "'"; }
  std::string out_label(size_t i = 0) const { return "output '" + g.tensors[node.outputs[i]].name + "'"; }
  Status error(const std::string& what) const { return invalid_argument(where + ": " + what); }
  DataType compute() const { return node.compute_dtype ? *node.compute_dtype : g.compute_dtype; }
};

// Checks several families share (src/graph/infer.cc).
Status check_rank(const NodeCtx& c, size_t i, size_t lo, size_t hi);  // input i's rank in [lo, hi]
Status check_float_in(const NodeCtx& c, size_t i);                    // input i is floating-point
Status check_float_out(const NodeCtx& c);                             // the output is floating-point
Status check_compute_fp32(const NodeCtx& c);                          // compute dtype fp32
// Matmul and convolutions: the two data inputs share a dtype (fp8 variants may mix), compute is fp32 or
// (for fp16 inputs) fp16, and an fp8 product is written in a wider type.
Status check_gemm_dtypes(const NodeCtx& c);
// Numpy-style broadcast of a and b (right-aligned). On ties prefers the dim that follows the symbols (a
// dynamic one, then a derived one), else a's.
Status broadcast(const NodeCtx& c, const Dims& a, const std::string& a_label, const Dims& b, const std::string& b_label,
                 Dims* out);
// A double as the signature writes it ("%.17g").
std::string canonical_number(double v);

struct OpFamily {
  const char* name;  // "conv", "matmul", "pointwise", "reduction", "norm", "sdpa"
  // Accepted input counts [lo, hi].
  void (*arity)(const Node& node, size_t* lo, size_t* hi);
  // Shape and dtype inference and attribute checks (infer_node's contract, validate_internal.h).
  Status (*infer)(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out);
  // The node's attributes in the signature's canonical text (" axes=[1]"), "" for none. Precondition: a
  // validated node (defaulted attributes filled in).
  std::string (*signature_attrs)(const Graph& graph, const Node& node);
  // The node's macs and flops (node_cost fills in the bytes, which every family counts alike).
  OpCost (*cost)(const Graph& graph, const Node& node);
  // Accepted output counts [lo, hi]; null: one. An sdpa writes o and optionally its softmax statistics, an
  // sdpa_backward dq, dk and dv.
  void (*output_arity)(const Node& node, size_t* lo, size_t* hi) = nullptr;
};

// The cost of `elements` element operations (no contraction): one FLOP each.
inline OpCost element_op_cost(double elements) {
  OpCost c;
  c.macs = c.flops = elements;
  return c;
}

extern const OpFamily kConvFamily;
extern const OpFamily kMatmulFamily;
extern const OpFamily kPointwiseFamily;
extern const OpFamily kReductionFamily;
extern const OpFamily kNormFamily;
extern const OpFamily kSdpaFamily;

// The family of an op kind (the one table from OpKind to families).
const OpFamily& op_family(OpKind kind);

}  // namespace kiln::graph_internal
