// The scaled dot-product attention family's attributes in a spec: causal, attn_scale, and the diagonal band
// (left_bound, right_bound, diagonal_alignment), padding_mask, paged_kv, ragged and dropout (kiln/graph/graph.h
// SdpaAttrs says what they mean).
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
  for (const char* key : {"left_bound", "right_bound"}) {
    if (!j.contains(key)) continue;
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(get_int(j[key], attr(key), &v));
    (std::string(key) == "left_bound" ? n->sdpa.left_bound : n->sdpa.right_bound) = v;
  }
  if (j.contains("padding_mask")) {
    if (!j["padding_mask"].is_boolean()) return type_error(attr("padding_mask"), "true or false", j["padding_mask"]);
    n->sdpa.padding = j["padding_mask"].get<bool>();
  }
  for (const auto& [key, flag] :
       {std::make_pair("paged_kv", &n->sdpa.paged), std::make_pair("ragged", &n->sdpa.ragged)}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean()) return type_error(attr(key), "true or false", j[key]);
    *flag = j[key].get<bool>();
  }
  if (j.contains("dropout")) {  // a probability; any but 0 is refused at validation (kiln/graph/graph.h SdpaAttrs)
    double p = 0;
    KILN_RETURN_IF_ERROR(get_number(j["dropout"], attr("dropout"), &p));
    if (!(p >= 0 && p < 1))
      return invalid_argument(attr("dropout") + ": " + j["dropout"].dump() + " is not a probability in [0, 1)");
    n->sdpa.dropout = p;
  }
  if (j.contains("diagonal_alignment")) {
    const ReadJson& a = j["diagonal_alignment"];
    if (a == "top_left") {
      n->sdpa.alignment = DiagonalAlignment::kTopLeft;
    } else if (a == "bottom_right") {
      n->sdpa.alignment = DiagonalAlignment::kBottomRight;
    } else {
      return invalid_argument(attr("diagonal_alignment") + ": expected \"top_left\" or \"bottom_right\", got " +
                              a.dump());
    }
  }
  return Status::ok();
}

void write_sdpa(const Node& n, WriteJson& j) {
  j["causal"] = n.sdpa.causal;
  if (n.sdpa.attn_scale) j["attn_scale"] = *n.sdpa.attn_scale;
  if (n.sdpa.left_bound) j["left_bound"] = *n.sdpa.left_bound;
  if (n.sdpa.right_bound) j["right_bound"] = *n.sdpa.right_bound;
  if (n.sdpa.alignment == DiagonalAlignment::kBottomRight) j["diagonal_alignment"] = "bottom_right";
  if (n.sdpa.padding) j["padding_mask"] = true;
  if (n.sdpa.paged) j["paged_kv"] = true;
  if (n.sdpa.ragged) j["ragged"] = true;
  if (n.sdpa.dropout > 0) j["dropout"] = n.sdpa.dropout;
}

}  // namespace

const SpecFamily kSdpaSpec = {{"causal", "attn_scale", "left_bound", "right_bound", "diagonal_alignment",
                               "padding_mask", "paged_kv", "ragged", "dropout"},
                              parse_sdpa,
                              write_sdpa};

}  // namespace kiln::spec_internal
