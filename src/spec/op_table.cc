#include "spec/op_table.h"

#include <iterator>

#include "kiln/spec/spec.h"

namespace kiln::spec_internal {
namespace {

constexpr PointwiseMode kPw = PointwiseMode::kIdentity;
constexpr ReductionMode kRed = ReductionMode::kSum;

const OpInfo kOps[] = {
    {"conv_fprop", OpKind::kConvFprop, kPw, kRed},
    {"conv_dgrad", OpKind::kConvDgrad, kPw, kRed},
    {"conv_wgrad", OpKind::kConvWgrad, kPw, kRed},
    {"matmul", OpKind::kMatmul, kPw, kRed},
    {"add", OpKind::kPointwise, PointwiseMode::kAdd, kRed},
    {"sub", OpKind::kPointwise, PointwiseMode::kSub, kRed},
    {"mul", OpKind::kPointwise, PointwiseMode::kMul, kRed},
    {"div", OpKind::kPointwise, PointwiseMode::kDiv, kRed},
    {"min", OpKind::kPointwise, PointwiseMode::kMin, kRed},
    {"max", OpKind::kPointwise, PointwiseMode::kMax, kRed},
    {"scale", OpKind::kPointwise, PointwiseMode::kScale, kRed},
    {"bias_add", OpKind::kPointwise, PointwiseMode::kBiasAdd, kRed},
    {"relu", OpKind::kPointwise, PointwiseMode::kRelu, kRed},
    {"gelu_erf", OpKind::kPointwise, PointwiseMode::kGeluErf, kRed},
    {"gelu_tanh", OpKind::kPointwise, PointwiseMode::kGeluTanh, kRed},
    {"silu", OpKind::kPointwise, PointwiseMode::kSilu, kRed},
    {"sigmoid", OpKind::kPointwise, PointwiseMode::kSigmoid, kRed},
    {"tanh", OpKind::kPointwise, PointwiseMode::kTanh, kRed},
    {"exp", OpKind::kPointwise, PointwiseMode::kExp, kRed},
    {"identity", OpKind::kPointwise, PointwiseMode::kIdentity, kRed},
    {"reduce_sum", OpKind::kReduction, kPw, ReductionMode::kSum},
    {"reduce_max", OpKind::kReduction, kPw, ReductionMode::kMax},
    {"reduce_min", OpKind::kReduction, kPw, ReductionMode::kMin},
    {"reduce_amax", OpKind::kReduction, kPw, ReductionMode::kAmax},
    {"layer_norm", OpKind::kLayerNorm, kPw, kRed},
    {"rms_norm", OpKind::kRmsNorm, kPw, kRed},
    {"sdpa", OpKind::kSdpa, kPw, kRed},
};

}  // namespace

const OpInfo* find_op(const std::string& name) {
  std::string n = name == "gelu" ? "gelu_erf" : name == "swish" ? "silu" : name;
  for (const OpInfo& op : kOps)
    if (n == op.name) return &op;
  return nullptr;
}

const OpInfo* op_table(size_t* count) {
  *count = std::size(kOps);
  return kOps;
}

}  // namespace kiln::spec_internal

namespace kiln {

const std::vector<std::string>& spec_op_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& op : spec_internal::kOps) v.push_back(op.name);
    return v;
  }();
  return names;
}

}  // namespace kiln
