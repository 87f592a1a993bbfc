// The scaled dot-product attention family's attributes in a spec: causal, attn_scale.
#include "spec/ops/spec_ops.h"

namespace kiln::spec_internal {
namespace {

Status parse_sdpa(const ReadJson& j, const std::string& where, Node* n) {
  auto attr = [&](const char* key) { return where + ": attribute '" + key + "'"; };
  if (j.contains("causal")) {
    if (!j["causal"].is_boolean()) return type_error(attr("causal"), "true or false", j["causal"]);
    n->sdpa.causal = j["causal"].get<bool>();
  }
  if (j.contains("attn_scale")) {
    double s;
    KILN_RETURN_IF_ERROR(get_number(j["attn_scale"], attr("attn_scale"), &s));
    n->sdpa.attn_scale = s;
  }
  return Status::ok();
}

void write_sdpa(const Node& n, WriteJson& j) {
  j["causal"] = n.sdpa.causal;
  if (n.sdpa.attn_scale) j["attn_scale"] = *n.sdpa.attn_scale;
}

}  // namespace

const SpecFamily kSdpaSpec = {{"causal", "attn_scale"}, parse_sdpa, write_sdpa};

}  // namespace kiln::spec_internal
