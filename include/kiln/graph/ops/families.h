// kiln/graph/ops/families.h: the op families and the one map from OpKind to them. Each layer that knows
// the families keeps one table of its entries indexed by OpFamilyId (graph: src/graph/ops/op_families.cc,
// validate: src/validate/ops/reference_families.cc, lower: src/lower/graph_lowering.cc), so adding a
// family is a row in each (docs/contributing.md "Adding an op or a pointwise mode").
#pragma once

#include <cstddef>
#include <iterator>

#include "kiln/core/enum_names.h"
#include "kiln/graph/graph.h"

namespace kiln {

enum class OpFamilyId { kConv, kMatmul, kPointwise, kReduction, kNorm, kSdpa };
constexpr size_t kOpFamilyCount = 6;
inline constexpr EnumName<OpFamilyId> kOpFamilyNames[] = {
    {OpFamilyId::kConv, "conv"},           {OpFamilyId::kMatmul, "matmul"}, {OpFamilyId::kPointwise, "pointwise"},
    {OpFamilyId::kReduction, "reduction"}, {OpFamilyId::kNorm, "norm"},     {OpFamilyId::kSdpa, "sdpa"}};
static_assert(std::size(kOpFamilyNames) == kOpFamilyCount, "an op family without a name");

// conv_fprop, conv_dgrad, conv_wgrad -> kConv; layer_norm, rms_norm -> kNorm; sdpa, sdpa_backward -> kSdpa; the
// others their own.
OpFamilyId op_family_of(OpKind kind);
// kOpFamilyNames' name
const char* op_family_name(OpFamilyId family);
// The output counts a node of its op may have, [lo, hi]: one, but for an sdpa's one or two (o, its softmax
// statistics) and an sdpa_backward's three (dq, dk, dv). The graph layer's rule, which the references read too.
void node_output_arity(const Node& node, size_t* lo, size_t* hi);

// A layer's table entry for `kind` (tables are indexed by OpFamilyId, in its order).
template <typename Entry>
const Entry& family_entry(const Entry (&table)[kOpFamilyCount], OpKind kind) {
  return table[static_cast<size_t>(op_family_of(kind))];
}

}  // namespace kiln
