// kiln/graph/ops/conv.h: the convolution family's geometry, shared by inference, the references and
// lowering (src/graph/ops/conv.cc).
#pragma once

#include <cstdint>

#include "kiln/graph/graph.h"

namespace kiln {

// The tensors of a conv node by role, whichever of the three it computes: x [N, C, spatial...],
// w [K, C/groups, filter...], y [N, K, out...] (fprop reads x, w and writes y; dgrad reads dy, w and
// writes dx; wgrad reads x, dy and writes dw). Precondition: the node has its inputs and output.
struct ConvRoles {
  int x = -1, w = -1, y = -1;
};
ConvRoles conv_roles(const Node& node);

// One spatial extent of y: floor((in + pre + post - dilation*(filter-1) - 1) / stride) + 1, or 0 when the
// dilated filter does not fit the padded input. Precondition: stride and dilation >= 1.
int64_t conv_output_extent(int64_t in, int64_t filter, int64_t pre, int64_t post, int64_t stride, int64_t dilation);

}  // namespace kiln
