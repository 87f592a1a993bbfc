// The normalization family's attributes in a spec (layer_norm, rms_norm): epsilon.
#include "spec/ops/spec_ops.h"

namespace kiln::spec_internal {
namespace {

Status parse_norm(const ReadJson& j, const std::string& where, Node* n) {
  if (j.contains("epsilon"))
    KILN_RETURN_IF_ERROR(get_number(j["epsilon"], where + ": attribute 'epsilon'", &n->norm.epsilon));
  return Status::ok();
}

void write_norm(const Node& n, WriteJson& j) { j["epsilon"] = n.norm.epsilon; }

}  // namespace

const SpecFamily kNormSpec = {{"epsilon"}, parse_norm, write_norm};

}  // namespace kiln::spec_internal
