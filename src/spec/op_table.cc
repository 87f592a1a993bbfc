#include "spec/op_table.h"

#include <string>
#include <vector>

#include "kiln/graph/ops/families.h"
#include "spec/ops/spec_ops.h"

namespace kiln::spec_internal {
namespace {

constexpr PointwiseMode kPw = PointwiseMode::kIdentity;
constexpr ReductionMode kRed = ReductionMode::kSum;

// In documentation order: the convolutions and matmul, every pointwise mode under its name
// (pointwise_modes(), src/graph/ops/pointwise.cc), every reduction as reduce_<mode>, the norms and sdpa.
// A new pointwise or reduction mode needs nothing here.
const std::vector<OpInfo>& ops() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> v = {
        {op_kind_name(OpKind::kConvFprop), OpKind::kConvFprop, kPw, kRed},
        {op_kind_name(OpKind::kConvDgrad), OpKind::kConvDgrad, kPw, kRed},
        {op_kind_name(OpKind::kConvWgrad), OpKind::kConvWgrad, kPw, kRed},
        {op_kind_name(OpKind::kMatmul), OpKind::kMatmul, kPw, kRed},
    };
    for (PointwiseMode m : pointwise_modes()) v.push_back({pointwise_mode_name(m), OpKind::kPointwise, m, kRed});
    static std::vector<std::string> reduction_names;  // stable storage for the names OpInfo points to
    reduction_names.reserve(reduction_modes().size());
    for (ReductionMode m : reduction_modes()) {
      reduction_names.push_back(std::string("reduce_") + reduction_mode_name(m));
      v.push_back({reduction_names.back().c_str(), OpKind::kReduction, kPw, m});
    }
    v.push_back({op_kind_name(OpKind::kLayerNorm), OpKind::kLayerNorm, kPw, kRed});
    v.push_back({op_kind_name(OpKind::kRmsNorm), OpKind::kRmsNorm, kPw, kRed});
    v.push_back({op_kind_name(OpKind::kSdpa), OpKind::kSdpa, kPw, kRed});
    v.push_back({op_kind_name(OpKind::kSdpaBackward), OpKind::kSdpaBackward, kPw, kRed});
    v.push_back({op_kind_name(OpKind::kSdpaFp8), OpKind::kSdpaFp8, kPw, kRed});
    v.push_back({op_kind_name(OpKind::kSdpaFp8Backward), OpKind::kSdpaFp8Backward, kPw, kRed});
    return v;
  }();
  return table;
}

}  // namespace

namespace {
Status no_attributes(const ReadJson&, const std::string&, Node*) { return Status::ok(); }
void write_no_attributes(const Node&, WriteJson&) {}
}  // namespace

const OpInfo* find_op(const std::string& name) {
  std::string n = name == "gelu" ? "gelu_erf" : name == "swish" ? "silu" : name;
  for (const OpInfo& op : ops())
    if (n == op.name) return &op;
  return nullptr;
}

const SpecFamily kMatmulSpec = {{}, no_attributes, write_no_attributes};
const SpecFamily kPointwiseSpec = {{}, no_attributes, write_no_attributes};  // the mode is in the op's name

const SpecFamily& spec_family(OpKind kind) {
  static const SpecFamily* const kTable[kOpFamilyCount] = {&kConvSpec,      &kMatmulSpec, &kPointwiseSpec,
                                                           &kReductionSpec, &kNormSpec,   &kSdpaSpec};
  return *family_entry(kTable, kind);
}

bool is_op_attribute(const std::string& key) {
  for (OpKind k :
       {OpKind::kConvFprop, OpKind::kMatmul, OpKind::kPointwise, OpKind::kReduction, OpKind::kLayerNorm, OpKind::kSdpa})
    for (const std::string& a : spec_family(k).attributes)
      if (a == key) return true;
  return false;
}

const OpInfo* op_table(size_t* count) {
  *count = ops().size();
  return ops().data();
}

}  // namespace kiln::spec_internal
