// kiln/spec/builder.h: a fluent C++ way to write a Kiln graph, equivalent to a JSON spec (docs/spec.md).
//
//   GraphBuilder b("conv_bias_relu");
//   b.io_dtype(DataType::kFloat16).dynamic("batch", 32);
//   TensorRef x = b.tensor("x", {"batch", 64, 56, 56}, Layout::kNHWC);
//   TensorRef w = b.tensor("w", {64, 64, 3, 3}, Layout::kNHWC);
//   TensorRef y = b.conv_fprop("conv", x, w, ConvOptions().padding({1, 1}));
//   b.output(b.relu("relu", b.bias_add("bias", y, bias)));
//   StatusOr<Graph> g = b.build();   // validated
//
// Mistakes (unknown refs, duplicate names) are remembered and reported by build(); the other calls never
// fail. Each op's output tensor is named after the node unless `out` is given.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln {

// A tensor of the graph being built (index into Graph::tensors; -1 when invalid).
struct TensorRef {
  int index = -1;
};

// One dim of a declared tensor: a static extent or a dynamic dim's symbol.
struct DimArg {
  DimArg(int64_t v) : value(v) {}                  // NOLINT: implicit by design
  DimArg(int v) : value(v) {}                      // NOLINT
  DimArg(const char* s) : symbol(s) {}             // NOLINT
  DimArg(std::string s) : symbol(std::move(s)) {}  // NOLINT
  int64_t value = 0;
  std::string symbol;
};

struct ConvOptions {
  ConvAttrs attrs;
  ConvOptions& padding(std::vector<int64_t> p) {
    attrs.pre_padding = p;
    attrs.post_padding = std::move(p);
    return *this;
  }
  ConvOptions& pre_padding(std::vector<int64_t> p) {
    attrs.pre_padding = std::move(p);
    return *this;
  }
  ConvOptions& post_padding(std::vector<int64_t> p) {
    attrs.post_padding = std::move(p);
    return *this;
  }
  ConvOptions& stride(std::vector<int64_t> s) {
    attrs.stride = std::move(s);
    return *this;
  }
  ConvOptions& dilation(std::vector<int64_t> d) {
    attrs.dilation = std::move(d);
    return *this;
  }
  ConvOptions& groups(int64_t g) {
    attrs.groups = g;
    return *this;
  }
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "");

  GraphBuilder& io_dtype(DataType t);
  GraphBuilder& intermediate_dtype(DataType t);
  GraphBuilder& compute_dtype(DataType t);
  GraphBuilder& dynamic(const std::string& symbol, int64_t value);

  // Declares a tensor (a graph input, or a node output whose dims/layout/dtype you want to fix up front).
  TensorRef tensor(const std::string& name, const std::vector<DimArg>& dims, Layout layout = Layout::kRowMajor,
                   std::optional<DataType> dtype = std::nullopt);
  TensorRef tensor_strided(const std::string& name, const std::vector<DimArg>& dims, std::vector<int64_t> strides,
                           std::optional<DataType> dtype = std::nullopt);
  // A by-value scalar input (dims [1] unless `rank` says more, all 1).
  TensorRef scalar(const std::string& name, double value, std::optional<DataType> dtype = std::nullopt,
                   size_t rank = 1);

  // Ops. `out`: the output tensor's name (default: the node name); if a tensor of that name was declared
  // with tensor(), the node writes it.
  TensorRef conv_fprop(const std::string& name, TensorRef x, TensorRef w, const ConvOptions& o = {},
                       std::string out = "");
  TensorRef conv_dgrad(const std::string& name, TensorRef dy, TensorRef w, const ConvOptions& o = {},
                       std::string out = "");
  TensorRef conv_wgrad(const std::string& name, TensorRef x, TensorRef dy, const ConvOptions& o = {},
                       std::string out = "");
  TensorRef matmul(const std::string& name, TensorRef a, TensorRef b, std::string out = "");
  TensorRef pointwise(const std::string& name, PointwiseMode mode, TensorRef a, TensorRef b = {}, std::string out = "");
  TensorRef bias_add(const std::string& name, TensorRef x, TensorRef bias, std::string out = "");
  TensorRef scale(const std::string& name, TensorRef x, TensorRef s, std::string out = "");
  TensorRef relu(const std::string& name, TensorRef x, std::string out = "");
  TensorRef gelu(const std::string& name, TensorRef x, std::string out = "");  // erf form
  TensorRef reduce(const std::string& name, ReductionMode mode, TensorRef x, std::vector<int> axes = {},
                   std::string out = "");
  TensorRef layer_norm(const std::string& name, TensorRef x, TensorRef scale, TensorRef bias, double epsilon = 1e-5,
                       std::string out = "");
  TensorRef rms_norm(const std::string& name, TensorRef x, TensorRef scale, double epsilon = 1e-5,
                     std::string out = "");
  TensorRef sdpa(const std::string& name, TensorRef q, TensorRef k, TensorRef v, bool causal = false,
                 std::optional<double> attn_scale = std::nullopt, std::string out = "");
  // With every attribute (a sliding window, a right bound, the diagonal's alignment: kiln/graph/graph.h SdpaAttrs),
  // an optional additive bias on the scores ([B or 1, H or 1, Sq, Skv], q's dtype), and a padding mask's lengths
  // (int32 [B, 1, 1, 1] each; giving both sets attrs.padding), and page tables (int32 [B, 1, pages, 1] each; giving
  // both sets attrs.paged, and k and v are then caches [blocks, Hk, block_size, D]).
  // With `ragged`, q, k, v and o are ragged (THD): the offsets of each one's entries, int32 [B + 1, 1, 1, 1]
  // (kiln/graph/graph.h SdpaAttrs::ragged; sets attrs.ragged; needs the lengths); over paged caches q and o only
  // (a chunked prefill: leave k and v unset).
  struct SdpaRaggedOffsets {
    TensorRef q;
    std::optional<TensorRef> k, v;  // none over paged caches (only q and o are ragged there)
    TensorRef o;
  };
  // With `dropout`, cuDNN drops each probability with probability `probability` (sets attrs.dropout; training):
  // its mask is drawn from the seed and offset, int64 [1, 1, 1, 1] graph inputs (kiln/graph/graph.h
  // SdpaAttrs::dropout).
  struct SdpaDropout {
    double probability = 0;
    TensorRef seed, offset;
  };
  TensorRef sdpa(const std::string& name, TensorRef q, TensorRef k, TensorRef v, const SdpaAttrs& attrs,
                 std::string out = "", std::optional<TensorRef> bias = std::nullopt,
                 std::optional<TensorRef> seq_len_q = std::nullopt, std::optional<TensorRef> seq_len_kv = std::nullopt,
                 std::optional<TensorRef> page_table_k = std::nullopt,
                 std::optional<TensorRef> page_table_v = std::nullopt,
                 std::optional<SdpaRaggedOffsets> ragged = std::nullopt,
                 std::optional<SdpaDropout> dropout = std::nullopt);
  // The backward pass of an sdpa with attributes `attrs` (no paged caches): dq, dk, dv (named name + "_dq", "_dk",
  // "_dv"; shaped and typed as q, k, v) from q, k, v, the forward's o and statistics, and do, the gradient of o; with
  // the forward's bias where it had one, and its padding mask's lengths where it had one (giving both sets
  // attrs.padding). With `ragged` (all four offsets, k's and v's included; sets attrs.ragged; needs the lengths),
  // q, k, v, o and do are ragged as the forward's were: do through o's offsets, and dq, dk, dv written packed as q,
  // k, v through theirs. With `dropout`, the forward's probability, seed and offset (its mask again).
  struct SdpaGrads {
    TensorRef dq, dk, dv;
  };
  SdpaGrads sdpa_backward(const std::string& name, TensorRef q, TensorRef k, TensorRef v, TensorRef o, TensorRef dout,
                          TensorRef stats, const SdpaAttrs& attrs = {}, std::optional<TensorRef> bias = std::nullopt,
                          std::optional<TensorRef> seq_len_q = std::nullopt,
                          std::optional<TensorRef> seq_len_kv = std::nullopt,
                          std::optional<SdpaRaggedOffsets> ragged = std::nullopt,
                          std::optional<SdpaDropout> dropout = std::nullopt);
  // FP8 attention (cuDNN's sdpa_fp8, SM 9.0+; no bias, paged caches or ragged tensors): q, k, v fp8_e4m3 [B, H, S, D],
  // the six scales fp32 [1, 1, 1, 1] graph inputs (kiln/graph/graph.h sdpa_fp8); o (named name + "_o", fp8_e4m3
  // unless set_dtype makes it fp8_e5m2) and amax_o (name + "_amax_o", fp32 [1, 1, 1, 1]).
  struct SdpaFp8Scales {
    TensorRef descale_q, descale_k, descale_v, descale_s, scale_s, scale_o;
  };
  struct SdpaFp8Out {
    TensorRef o, amax_o;
  };
  // With a padding mask's lengths (int32 [B, 1, 1, 1] each; giving either sets attrs.padding, and validation
  // names a missing one).
  SdpaFp8Out sdpa_fp8(const std::string& name, TensorRef q, TensorRef k, TensorRef v, const SdpaFp8Scales& scales,
                      const SdpaAttrs& attrs = {}, std::optional<TensorRef> seq_len_q = std::nullopt,
                      std::optional<TensorRef> seq_len_kv = std::nullopt);
  // FP8 attention's backward pass (cuDNN's sdpa_fp8_backward, SM 9.0+, head dims 128 there; no bias, dropout, paged
  // caches or ragged tensors): q, k, v, o, do fp8_e4m3, the statistics fp32 [B, H, Sq, 1], the twelve scales fp32
  // [1, 1, 1, 1] graph inputs (kiln/graph/graph.h sdpa_fp8_backward); dq, dk, dv (named name + "_dq", "_dk", "_dv",
  // fp8_e4m3, shaped as q, k, v) and the four amax (name + "_amax_dq", "_amax_dk", "_amax_dv", "_amax_dp", fp32
  // [1, 1, 1, 1]). With a padding mask's lengths as sdpa_fp8's.
  struct SdpaFp8BackwardScales {
    TensorRef descale_q, descale_k, descale_v, descale_o, descale_do, descale_s, descale_dp;
    TensorRef scale_s, scale_dq, scale_dk, scale_dv, scale_dp;
  };
  struct SdpaFp8Grads {
    TensorRef dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp;
  };
  SdpaFp8Grads sdpa_fp8_backward(const std::string& name, TensorRef q, TensorRef k, TensorRef v, TensorRef o,
                                 TensorRef dout, TensorRef stats, const SdpaFp8BackwardScales& scales,
                                 const SdpaAttrs& attrs = {}, std::optional<TensorRef> seq_len_q = std::nullopt,
                                 std::optional<TensorRef> seq_len_kv = std::nullopt);
  // The softmax statistics of the sdpa (or sdpa_fp8) node that writes `o`, as that node's last output: each query
  // row's log-sum-exp of its scaled scores, fp32 [B, H, Sq, 1] (named `out`, by default the node's name + "_stats").
  TensorRef sdpa_stats(TensorRef o, std::string out = "");

  // Fix-ups on a tensor (usually an op's output): its dtype, its layout.
  GraphBuilder& set_dtype(TensorRef t, DataType dtype);
  GraphBuilder& set_layout(TensorRef t, Layout layout);
  // The compute dtype of the node that writes `t`.
  GraphBuilder& set_compute_dtype(TensorRef t, DataType dtype);

  GraphBuilder& output(TensorRef t);

  // The graph, validated (validate_graph), or the first mistake made while building.
  StatusOr<Graph> build(const ValidateOptions& options = {}) const;

 private:
  TensorRef add_node(Node node, const std::vector<TensorRef>& inputs, std::string out);
  bool check_ref(TensorRef t, const std::string& where);
  // The tensor named `name`, declared now (no dims: a node's output, inferred) if it is not yet.
  int find_or_add_tensor(const std::string& name);
  void fail(const std::string& message);

  Graph graph_;
  Status error_;
};

}  // namespace kiln
