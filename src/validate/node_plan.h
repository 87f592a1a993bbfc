// Internal to the validate layer: the shape arithmetic shared by the host and device references and the
// tolerance code. A NodePlan is a node with its geometry resolved and checked, expressed over packed
// row-major ("logical") arrays; the references gather strided inputs into that form and scatter
// outputs back through the graph's strides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "validate/ops/sdpa_math.h"

namespace kiln::validate_internal {

// Packed geometry of a tensor (the graph layer answers the rest: topological_order, GraphRoles for
// producers and dtypes, kiln/graph/ops/conv.h for convolution geometry).
std::vector<int64_t> tensor_dims(const Graph& g, int t);     // [1] for a by-value scalar without dims
std::vector<int64_t> tensor_strides(const Graph& g, int t);  // row-major when the desc has none
int64_t product(const std::vector<int64_t>& v);
// "[2,3]"
std::string dims_str(const std::vector<int64_t>& d);
// "'x'": a tensor's name, quoted
std::string tensor_label(const Graph& g, int t);
// "node 'gelu' (pointwise)"
std::string node_label(const Graph& g, int node);

// Strides (in elements of a packed row-major array of `in`) that read `in` broadcast to `out`
// (right-aligned numpy rules: 0 where `in` has extent 1 or lacks the axis).
StatusOr<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

struct ConvGeom {
  int64_t n = 0, c = 0, k = 0, groups = 1;  // c: input channels, k: output channels
  int64_t in[3] = {1, 1, 1}, filt[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t filt_size() const { return filt[0] * filt[1] * filt[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

struct MatmulGeom {
  std::vector<int64_t> batch;             // the output's batch dims
  std::vector<int64_t> a_batch, b_batch;  // packed strides of a/b per output batch dim (0: broadcast)
  int64_t m = 0, n = 0, k = 0;
  int64_t batch_count() const { return product(batch); }
};

struct ReduceGeom {
  std::vector<int64_t> in_dims;
  std::vector<bool> reduced;  // per axis
  int64_t reduced_count = 1;
};

struct NormGeom {
  int64_t rows = 0, inner = 0;  // rows = dims[0], inner = product of the rest
  std::vector<int64_t> x_dims;
  std::vector<int64_t> scale_strides, bias_strides;  // broadcast strides over x_dims
};

struct SdpaGeom {
  int64_t b = 0, h = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0;
  double scale = 1.0;
  SdpaBand band;      // the keys each query attends to (sdpa_math.h)
  SdpaBias bias;      // an additive bias on the scores, if the node has one (sdpa_math.h)
  SdpaPaging paging;  // paged K/V caches (sdpa_math.h)
  int ragged = 0;     // ragged (THD) q, k, v, o through their offsets (sdpa_math.h sdpa_ragged_row)
  // Dropout (kiln/graph/graph.h SdpaAttrs::dropout): each probability times keep / (1 - dropout), keep the mask the
  // plan drew (the references' form's last input, [B, H, Sq, Skv]: kiln/validate/dropout_probe.h).
  double dropout = 0;
};

struct PointwiseGeom {
  std::vector<int64_t> out_dims;
  std::vector<int64_t> a_strides, b_strides;  // broadcast strides; b empty for unary
};

struct NodePlan {
  int node = -1;
  int output = 0;  // which of the node's outputs this plan computes (an sdpa's 1: its softmax statistics)
  OpKind op = OpKind::kPointwise;
  ConvGeom conv;
  MatmulGeom mm;
  ReduceGeom red;
  NormGeom norm;
  SdpaGeom sdpa;
  PointwiseGeom pw;
  int64_t reduction_length = 1;  // see ToleranceOptions::reduction_length
};

// Resolves and checks one node (the checks every op shares, its geometry by its family:
// src/validate/ops/<family>.cc); errors name the node and tensor at fault. Defined beside the families'
// table (src/validate/ops/reference_families.cc).
StatusOr<NodePlan> plan_node(const Graph& g, int node);

}  // namespace kiln::validate_internal
