// The reduction family's attributes in a spec: axes.
#include "spec/ops/spec_ops.h"

namespace kiln::spec_internal {
namespace {

Status parse_reduction(const ReadJson& j, const std::string& where, Node* n) {
  if (!j.contains("axes")) return Status::ok();
  const std::string attr = where + ": attribute 'axes'";
  std::vector<int64_t> axes;
  KILN_RETURN_IF_ERROR(get_int_list(j["axes"], attr, &axes));
  if (j["axes"].is_array() && axes.empty())
    return invalid_argument(attr + ": must not be empty (omit it to reduce every axis)");
  for (int64_t a : axes) {
    if (a < -64 || a > 64) return invalid_argument(attr + ": axis " + std::to_string(a) + " is out of range");
    n->reduction.axes.push_back(static_cast<int>(a));
  }
  return Status::ok();
}

void write_reduction(const Node& n, WriteJson& j) {
  if (!n.reduction.axes.empty()) j["axes"] = n.reduction.axes;
}

}  // namespace

const SpecFamily kReductionSpec = {{"axes"}, parse_reduction, write_reduction};

}  // namespace kiln::spec_internal
