// The convolution family's attributes in a spec: padding (or pre_padding and post_padding), stride,
// dilation, groups.
#include "spec/ops/spec_ops.h"

namespace kiln::spec_internal {
namespace {

Status parse_conv(const ReadJson& j, const std::string& where, Node* n) {
  auto attr = [&](const char* key) { return where + ": attribute '" + key + "'"; };
  if (j.contains("padding")) {
    if (j.contains("pre_padding") || j.contains("post_padding"))
      return invalid_argument(attr("padding") + ": give 'padding' or 'pre_padding'/'post_padding', not both");
    KILN_RETURN_IF_ERROR(get_int_list(j["padding"], attr("padding"), &n->conv.pre_padding));
    n->conv.post_padding = n->conv.pre_padding;
  }
  if (j.contains("pre_padding"))
    KILN_RETURN_IF_ERROR(get_int_list(j["pre_padding"], attr("pre_padding"), &n->conv.pre_padding));
  if (j.contains("post_padding"))
    KILN_RETURN_IF_ERROR(get_int_list(j["post_padding"], attr("post_padding"), &n->conv.post_padding));
  if (j.contains("stride")) KILN_RETURN_IF_ERROR(get_int_list(j["stride"], attr("stride"), &n->conv.stride));
  if (j.contains("dilation")) KILN_RETURN_IF_ERROR(get_int_list(j["dilation"], attr("dilation"), &n->conv.dilation));
  if (j.contains("groups")) KILN_RETURN_IF_ERROR(get_int(j["groups"], attr("groups"), &n->conv.groups));
  return Status::ok();
}

// Before validation the lists may be empty (defaults); after it they hold one entry per spatial dim.
void write_conv(const Node& n, WriteJson& j) {
  if (!n.conv.pre_padding.empty()) j["pre_padding"] = n.conv.pre_padding;
  if (!n.conv.post_padding.empty()) j["post_padding"] = n.conv.post_padding;
  if (!n.conv.stride.empty()) j["stride"] = n.conv.stride;
  if (!n.conv.dilation.empty()) j["dilation"] = n.conv.dilation;
  j["groups"] = n.conv.groups;
}

}  // namespace

const SpecFamily kConvSpec = {
    {"padding", "pre_padding", "post_padding", "stride", "dilation", "groups"}, parse_conv, write_conv};

}  // namespace kiln::spec_internal
