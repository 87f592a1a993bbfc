// Internal to the spec layer: the spec op names and what they map to in Kiln's IR.
#pragma once

#include <string>

#include "kiln/graph/graph.h"

namespace kiln::spec_internal {

struct OpInfo {
  const char* name;  // as written in a spec
  OpKind kind;
  PointwiseMode pointwise;  // when kind == kPointwise
  ReductionMode reduction;  // when kind == kReduction
};

// Looks up a spec op name (aliases: "gelu" = "gelu_erf", "swish" = "silu"); nullptr when unknown.
const OpInfo* find_op(const std::string& name);
// All canonical names, in documentation order.
const OpInfo* op_table(size_t* count);

}  // namespace kiln::spec_internal
