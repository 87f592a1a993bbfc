// kiln/graph/graph.h: Kiln's own IR. Specs (JSON) and the C++ builder both produce a kiln::Graph; lowering
// turns it into a cuDNN Frontend graph; signatures are computed from it (never from the frontend's key()).
//
// Tensors are referred to by index into Graph::tensors. A tensor is a graph input when no node writes it,
// an output when it is listed in Graph::outputs, and virtual (an intermediate that cuDNN may keep on chip)
// otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"

namespace kiln {

enum class DataType { kFloat32, kFloat16, kBFloat16, kFp8E4M3, kFp8E5M2, kInt8, kInt32, kInt64 };
inline constexpr EnumName<DataType> kDataTypeNames[] = {
    {DataType::kFloat32, "fp32"},     {DataType::kFloat16, "fp16"},     {DataType::kBFloat16, "bf16"},
    {DataType::kFp8E4M3, "fp8_e4m3"}, {DataType::kFp8E5M2, "fp8_e5m2"}, {DataType::kInt8, "int8"},
    {DataType::kInt32, "int32"},      {DataType::kInt64, "int64"}};
static_assert(std::size(kDataTypeNames) == static_cast<size_t>(DataType::kInt64) + 1, "a DataType without a name");
const char* dtype_name(DataType t);                       // kDataTypeNames' name; "?" for a value outside the enum
StatusOr<DataType> parse_dtype(const std::string& name);  // accepts the names above (and "float", "half", "bfloat16")
size_t dtype_size(DataType t);

// How strides were given. Layout names resolve to strides at validation; the signature records the layout
// name, or the explicit strides when kExplicit.
enum class Layout { kRowMajor, kNCHW, kNHWC, kExplicit };
inline constexpr EnumName<Layout> kLayoutNames[] = {{Layout::kRowMajor, "row_major"},
                                                    {Layout::kNCHW, "NCHW"},
                                                    {Layout::kNHWC, "NHWC"},
                                                    {Layout::kExplicit, "explicit"}};
static_assert(std::size(kLayoutNames) == static_cast<size_t>(Layout::kExplicit) + 1, "a Layout without a name");
const char* layout_name(Layout l);  // kLayoutNames' name
StatusOr<Layout> parse_layout(const std::string& name);

// One dimension: a value, and for a dynamic dimension the symbol whose value may change between calls
// (e.g. "batch"). Two dims with the same symbol always have the same value.
struct Dim {
  int64_t value = 0;
  std::string symbol;  // empty: static
  // Set by inference on a dim a node computes from a dynamic one without being it (a convolution's output
  // extent when its input's is dynamic): its value follows the symbols, so the signature writes it as "~"
  // and one structure covers every value of them (docs/spec.md "Signatures"). Never on a graph input.
  bool derived = false;
  bool is_dynamic() const { return !symbol.empty(); }
  bool follows_symbols() const { return is_dynamic() || derived; }
};

struct TensorDesc {
  std::string name;
  std::vector<Dim> dims;         // empty for a tensor not yet inferred
  std::vector<int64_t> strides;  // filled by validation from `layout` unless kExplicit
  Layout layout = Layout::kRowMajor;
  std::optional<DataType> dtype;  // unset: inferred (graph io dtype for inputs/outputs, intermediate dtype inside)
  // A scalar passed by value at execution (e.g. a scale or epsilon); dims are all 1.
  bool by_value = false;
  double value = 0.0;                  // used when by_value
  std::vector<int64_t> shape() const;  // dims' values
  int64_t element_count() const;
  // Row-major with no gaps: the last stride 1, each other the product of the extents after it (a stride of an
  // extent-1 dim is never read: any value). False where the strides are not filled in.
  bool packed_row_major() const;
};

enum class OpKind {
  kConvFprop,
  kConvDgrad,
  kConvWgrad,
  kMatmul,
  kPointwise,
  kReduction,
  kLayerNorm,
  kRmsNorm,
  kSdpa,
  kSdpaBackward,
  kSdpaFp8,
  kSdpaFp8Backward,
};
inline constexpr EnumName<OpKind> kOpKindNames[] = {{OpKind::kConvFprop, "conv_fprop"},
                                                    {OpKind::kConvDgrad, "conv_dgrad"},
                                                    {OpKind::kConvWgrad, "conv_wgrad"},
                                                    {OpKind::kMatmul, "matmul"},
                                                    {OpKind::kPointwise, "pointwise"},
                                                    {OpKind::kReduction, "reduction"},
                                                    {OpKind::kLayerNorm, "layer_norm"},
                                                    {OpKind::kRmsNorm, "rms_norm"},
                                                    {OpKind::kSdpa, "sdpa"},
                                                    {OpKind::kSdpaBackward, "sdpa_backward"},
                                                    {OpKind::kSdpaFp8, "sdpa_fp8"},
                                                    {OpKind::kSdpaFp8Backward, "sdpa_fp8_backward"}};
static_assert(std::size(kOpKindNames) == static_cast<size_t>(OpKind::kSdpaFp8Backward) + 1, "an OpKind without a name");
const char* op_kind_name(OpKind k);  // kOpKindNames' name

enum class PointwiseMode {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMin,
  kMax,      // binary (broadcasting)
  kScale,    // x * scalar (by-value or 1-element tensor)
  kBiasAdd,  // x + bias broadcast along the last / channel axis
  kRelu,
  kGeluErf,
  kGeluTanh,
  kSilu,
  kSigmoid,
  kTanh,
  kExp,
  kAbs,
  kIdentity,  // unary
};
// In documentation order: the spec's op list (spec_op_names) and pointwise_modes() follow it.
inline constexpr EnumName<PointwiseMode> kPointwiseModeNames[] = {{PointwiseMode::kAdd, "add"},
                                                                  {PointwiseMode::kSub, "sub"},
                                                                  {PointwiseMode::kMul, "mul"},
                                                                  {PointwiseMode::kDiv, "div"},
                                                                  {PointwiseMode::kMin, "min"},
                                                                  {PointwiseMode::kMax, "max"},
                                                                  {PointwiseMode::kScale, "scale"},
                                                                  {PointwiseMode::kBiasAdd, "bias_add"},
                                                                  {PointwiseMode::kRelu, "relu"},
                                                                  {PointwiseMode::kGeluErf, "gelu_erf"},
                                                                  {PointwiseMode::kGeluTanh, "gelu_tanh"},
                                                                  {PointwiseMode::kSilu, "silu"},
                                                                  {PointwiseMode::kSigmoid, "sigmoid"},
                                                                  {PointwiseMode::kTanh, "tanh"},
                                                                  {PointwiseMode::kExp, "exp"},
                                                                  {PointwiseMode::kAbs, "abs"},
                                                                  {PointwiseMode::kIdentity, "identity"}};
static_assert(std::size(kPointwiseModeNames) == static_cast<size_t>(PointwiseMode::kIdentity) + 1,
              "a PointwiseMode without a name");
const char* pointwise_mode_name(PointwiseMode m);  // kPointwiseModeNames' name, as a spec writes the op
bool pointwise_is_unary(PointwiseMode m);
const std::vector<PointwiseMode>& pointwise_modes();  // every mode, in documentation order (the spec's)

enum class ReductionMode { kSum, kMax, kMin, kAmax };
inline constexpr EnumName<ReductionMode> kReductionModeNames[] = {{ReductionMode::kSum, "sum"},
                                                                  {ReductionMode::kMax, "max"},
                                                                  {ReductionMode::kMin, "min"},
                                                                  {ReductionMode::kAmax, "amax"}};
static_assert(std::size(kReductionModeNames) == static_cast<size_t>(ReductionMode::kAmax) + 1,
              "a ReductionMode without a name");
const char* reduction_mode_name(ReductionMode m);     // kReductionModeNames' name
const std::vector<ReductionMode>& reduction_modes();  // every mode, in documentation order

struct ConvAttrs {
  std::vector<int64_t> pre_padding, post_padding, stride, dilation;  // one entry per spatial dim
  int64_t groups = 1;
};
struct PointwiseAttrs {
  PointwiseMode mode = PointwiseMode::kIdentity;
};
struct ReductionAttrs {
  ReductionMode mode = ReductionMode::kSum;
  std::vector<int> axes;  // reduced axes of the input; the output keeps them with extent 1
};
struct NormAttrs {
  double epsilon = 1e-5;
};
// Which keys a query attends to (docs/spec.md "sdpa"): query i's diagonal is key i (top-left) or key
// i + Skv - Sq (bottom-right: the last query meets the last key, as in decode and chunked prefill); it attends to
// keys j with diagonal - left_bound < j <= diagonal + right_bound, each bound where set (none: every key).
enum class DiagonalAlignment { kTopLeft, kBottomRight };
struct SdpaAttrs {
  bool causal = false;                 // right_bound 0: no key past the diagonal
  std::optional<double> attn_scale;    // default 1/sqrt(head_dim)
  std::optional<int64_t> left_bound;   // a sliding window: the diagonal and left_bound - 1 keys before it (>= 1)
  std::optional<int64_t> right_bound;  // keys past the diagonal it may see (>= 0); not with causal
  DiagonalAlignment alignment = DiagonalAlignment::kTopLeft;
  // A padding mask (sdpa, sdpa_backward, sdpa_fp8): two more inputs, seq_len_q and seq_len_kv (int32 [B, 1, 1, 1];
  // where: sdpa_inputs), the valid queries and keys of each batch entry; keys past seq_len_kv are masked, query
  // rows past seq_len_q are written as zeros (their statistics -infinity, their dq 0; a padded key's dk, dv 0;
  // ragged, they are not written at all), and a bottom-right diagonal aligns each entry's own last query and key.
  bool padding = false;
  // Paged K/V caches (decode and chunked prefill over a paged cache; needs `padding`): k and v are containers
  // [blocks, Hk, block_size, D], and two more inputs after the lengths are page tables int32 [B, 1, pages, 1] (the cache
  // block of each entry's page of keys, values); an entry's key j is row j % block_size of block
  // table[j / block_size]: Skv = pages * block_size.
  bool paged = false;
  // Ragged (THD) q, k, v and o (sdpa and sdpa_backward, needs `padding`): each is packed token-major, [B, H, S, W] with strides
  // [S*H*W, W, H*W, 1], and entry b's rows start at element offset[b] of its buffer instead of b * S*H*W; the
  // node's last four inputs are those offsets, int32 [B + 1, 1, 1, 1], for q, k, v and o (multiples of H*W: whole
  // tokens). Over paged caches (a chunked prefill) only q and o are ragged: the last two inputs are their offsets.
  // Only each entry's first seq_len rows are read or written (the statistics stay dense [B, H, Sq, 1]: a row past
  // seq_len is -infinity, as a padded row's). A backward pass's do is packed as o and its dq, dk, dv as q, k, v,
  // each pair through one offset (the statistics read dense).
  bool ragged = false;
  // Dropout on the attention's probabilities (training), in [0, 1): 0 (the default, as at inference) is none. Over 0
  // (sdpa only, dense or padded), each probability is kept with probability 1 - dropout and scaled by
  // 1 / (1 - dropout), or zeroed, by cuDNN's Philox generator; two more inputs, last, seed and offset (int64
  // [1, 1, 1, 1], graph inputs, on the device), pick the mask: the same seed and offset draw the same mask. The
  // statistics are the scores' (before dropout), as a backward pass reads them. Kiln checks a plan against the mask
  // it drew (kiln/validate/dropout_probe.h).
  double dropout = 0;
  // The references' form of a dropout node (kiln/validate/dropout_probe.h): one more input after the offset, the
  // mask the plan drew, int8 [B, H, Sq, Skv] (1 kept, 0 dropped). Never from a spec; never lowered.
  bool dropout_keep_input = false;

  // The right bound that applies: 0 when causal.
  std::optional<int64_t> effective_right_bound() const { return causal ? std::optional<int64_t>(0) : right_bound; }
  bool masked() const { return causal || left_bound.has_value() || right_bound.has_value(); }
};

// Inputs and outputs by op (tensor indices, in this order):
//   conv_fprop: in {x, w}        out {y}
//   conv_dgrad: in {dy, w}       out {dx}
//   conv_wgrad: in {x, dy}       out {dw}
//   matmul:     in {a, b}        out {c}       ([..., M, K] x [..., K, N] -> [..., M, N])
//   pointwise:  in {a} or {a, b} out {y}
//   reduction:  in {x}           out {y}
//   layer_norm: in {x, scale, bias} out {y}    (inference; normalized over all axes but the first)
//   rms_norm:   in {x, scale}    out {y}
//   sdpa:       in {q, k, v (, bias) (, seq_len_q, seq_len_kv) (, page_table_k, page_table_v)
//                   (, ragged_q, ragged_k, ragged_v, ragged_o; over paged caches ragged_q, ragged_o)
//                   (, seed, offset with dropout)} out {o (, stats)}
//               ([B, H, S, D], fp16/bf16, SM80+; the bias, the lengths, the page tables and the offsets optional:
//               sdpa_inputs;
//               stats, when asked for, each query row's log-sum-exp of its scaled scores, fp32 [B, H, Sq, 1])
//   sdpa_backward: in {q, k, v, o, do, stats (, bias) (, seq_len_q, seq_len_kv)
//                   (, ragged_q, ragged_k, ragged_v, ragged_o)} out {dq, dk, dv}
//               (the gradients of an sdpa with these attributes: o and stats as its forward wrote them, do the
//               gradient of o; dq, dk, dv shaped and typed as q, k, v; no paged caches; ragged, do is packed as o
//               and dq, dk, dv as q, k, v, each pair through one offset tensor, the statistics dense)
//   sdpa_fp8:   in {q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o (, seq_len_q, seq_len_kv)}
//               out {o, amax_o (, stats)}
//               (FP8 attention: q, k, v fp8 e4m3 [B, H, S, D]; the six scales fp32 [1, 1, 1, 1] graph inputs; the
//               scores descale_q descale_k attn_scale q.k, P = softmax rounded to fp8 at scale_s and read back at
//               descale_s, o = fp8((P.v descale_v) scale_o), amax_o = max |P.v descale_v| before scale_o, fp32
//               [1, 1, 1, 1]; stats as sdpa's; SM 9.0+, no bias, paged caches or ragged tensors)
//   sdpa_fp8_backward: in {q, k, v, o, do, stats, descale_q, descale_k, descale_v, descale_o, descale_do, descale_s,
//                   descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp (, seq_len_q, seq_len_kv)}
//               out {dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp}
//               (FP8 attention's backward pass: q, k, v, o, do fp8 e4m3, each read at its descale; stats as
//               sdpa_backward's; P recomputed from the scores and stats, rounded to fp8 at scale_s for
//               dV = (P descale_s)^T dO; dS = P (dO.v - dO.o) rounded to fp8 at scale_dp and read back at descale_dp
//               for dQ = attn_scale dS K and dK = attn_scale dS^T Q; dq, dk, dv = fp8(dQ scale_dq, ...), fp8 e4m3;
//               amax_dq, amax_dk, amax_dv = max |dQ|, ... before their scales, amax_dp = max |dS| before scale_dp,
//               fp32 [1, 1, 1, 1]; SM 9.0+, no bias, dropout, paged caches or ragged tensors; the twelve scales
//               fp32 [1, 1, 1, 1] graph inputs)
// Every op writes one tensor, but for an sdpa's optional second, an sdpa_backward's three, an sdpa_fp8's two or
// three and an sdpa_fp8_backward's seven.
struct Node {
  std::string name;
  OpKind op = OpKind::kPointwise;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::optional<DataType> compute_dtype;  // unset: the graph's compute dtype
  ConvAttrs conv;
  PointwiseAttrs pointwise;
  ReductionAttrs reduction;
  NormAttrs norm;
  SdpaAttrs sdpa;
};

// Where an sdpa node's optional inputs are in Node::inputs (-1: absent): a bias after q, k, v; with
// SdpaAttrs::padding the lengths, and with SdpaAttrs::paged the page tables after them, then with SdpaAttrs::ragged
// the offsets, last. An sdpa_backward's bias is its seventh input; its lengths, then offsets, come last.
struct SdpaInputs {
  int bias = -1, seq_len_q = -1, seq_len_kv = -1, page_table_k = -1, page_table_v = -1;
  int ragged_q = -1, ragged_k = -1, ragged_v = -1, ragged_o = -1;  // SdpaAttrs::ragged's offsets
  int seed = -1, offset = -1, dropout_keep = -1;                   // SdpaAttrs::dropout's, after everything else
};
inline SdpaInputs sdpa_inputs(const Node& n) {
  SdpaInputs r;
  // FP8 attention takes no dropout (validation refuses it, NotSupported): its inputs are fixed, the lengths after the
  // scales; a seed and offset given after them are taken as such, so that the refusal names dropout.
  if (n.op == OpKind::kSdpaFp8 || n.op == OpKind::kSdpaFp8Backward) {
    const int base = (n.op == OpKind::kSdpaFp8 ? 9 : 18) + (n.sdpa.padding ? 2 : 0);
    if (n.sdpa.padding && static_cast<int>(n.inputs.size()) >= base) {
      r.seq_len_q = base - 2;
      r.seq_len_kv = base - 1;
    }
    if (n.sdpa.dropout > 0 && static_cast<int>(n.inputs.size()) == base + 2) {
      r.seed = base;
      r.offset = base + 1;
    }
    return r;
  }
  // Dropout's seed and offset (and the references' mask) come last: the other roles are placed before them.
  const int dropout_tail = n.sdpa.dropout > 0 ? 2 + (n.sdpa.dropout_keep_input ? 1 : 0) : 0;
  const int all = static_cast<int>(n.inputs.size());
  if (dropout_tail > 0 && all >= 3 + dropout_tail) {
    r.seed = all - dropout_tail;
    r.offset = r.seed + 1;
    if (n.sdpa.dropout_keep_input) r.dropout_keep = r.seed + 2;
  }
  const int count = all - dropout_tail;
  if (n.op == OpKind::kSdpaBackward) {  // q, k, v, o, do, stats (, bias) (, seq_len_q, seq_len_kv) (, 4 offsets)
    const int lengths = n.sdpa.padding ? 2 : 0, offsets = n.sdpa.ragged ? 4 : 0;
    if (count - lengths - offsets >= 7) r.bias = 6;
    if (count < 6 + lengths + offsets) return r;  // too few inputs: validation names what is missing
    if (n.sdpa.padding) {
      r.seq_len_q = count - offsets - 2;
      r.seq_len_kv = count - offsets - 1;
    }
    if (n.sdpa.ragged) {  // q's (also dq's), k's (dk's), v's (dv's) and o's (do's)
      r.ragged_q = count - 4;
      r.ragged_k = count - 3;
      r.ragged_v = count - 2;
      r.ragged_o = count - 1;
    }
    return r;
  }
  // Ragged over paged caches: q's and o's offsets only (k and v are the caches, read through the page tables).
  const int tables = n.sdpa.paged ? 2 : 0, offsets = n.sdpa.ragged ? (n.sdpa.paged ? 2 : 4) : 0;
  const int tail = (n.sdpa.padding ? 2 : 0) + tables + offsets;
  if (count - tail >= 4) r.bias = 3;
  if (count < 3 + tail) return r;  // too few inputs: validation names what is missing
  if (n.sdpa.padding) {
    r.seq_len_q = count - tail;
    r.seq_len_kv = count - tail + 1;
  }
  if (n.sdpa.paged) {
    r.page_table_k = count - offsets - 2;
    r.page_table_v = count - offsets - 1;
  }
  if (n.sdpa.ragged) {
    r.ragged_q = count - offsets;
    if (!n.sdpa.paged) {
      r.ragged_k = count - 3;
      r.ragged_v = count - 2;
    }
    r.ragged_o = count - 1;
  }
  return r;
}

// Whether an op is one of the attention family's composite cuDNN operations (sdpa, sdpa_backward, sdpa_fp8,
// sdpa_fp8_backward).
inline bool is_attention(OpKind k) {
  return k == OpKind::kSdpa || k == OpKind::kSdpaBackward || k == OpKind::kSdpaFp8 || k == OpKind::kSdpaFp8Backward;
}
// Whether an op is an attention's backward pass (sdpa_backward, sdpa_fp8_backward): q, k, v, o, do, stats first,
// dq, dk, dv its first outputs.
inline bool is_attention_backward(OpKind k) { return k == OpKind::kSdpaBackward || k == OpKind::kSdpaFp8Backward; }

// Whether a node is an sdpa or sdpa_backward over ragged (THD) tensors (SdpaAttrs::ragged; sdpa_fp8 takes none).
inline bool is_ragged_attention(const Node& n) {
  return (n.op == OpKind::kSdpa || n.op == OpKind::kSdpaBackward) && n.sdpa.ragged;
}

// An sdpa_fp8 node's inputs after q, k, v (Node::inputs positions) and its outputs (Node::outputs positions).
enum SdpaFp8Input { kFp8DescaleQ = 3, kFp8DescaleK, kFp8DescaleV, kFp8DescaleS, kFp8ScaleS, kFp8ScaleO };
enum SdpaFp8Output { kFp8O = 0, kFp8AmaxO = 1, kFp8Stats = 2 };
// An sdpa_fp8_backward node's scales after q, k, v, o, do, stats, and its outputs.
enum SdpaFp8BackwardInput {
  kFp8bDescaleQ = 6,
  kFp8bDescaleK,
  kFp8bDescaleV,
  kFp8bDescaleO,
  kFp8bDescaleDo,
  kFp8bDescaleS,
  kFp8bDescaleDp,
  kFp8bScaleS,
  kFp8bScaleDq,
  kFp8bScaleDk,
  kFp8bScaleDv,
  kFp8bScaleDp
};
enum SdpaFp8BackwardOutput { kFp8bDq = 0, kFp8bDk, kFp8bDv, kFp8bAmaxDq, kFp8bAmaxDk, kFp8bAmaxDv, kFp8bAmaxDp };

// The spec's name of a node's op (docs/spec.md's op table, never an alias): the op kind's name, a
// pointwise node's mode ("relu", "bias_add") or "reduce_" and a reduction's mode ("reduce_amax").
std::string node_op_name(const Node& node);

struct Graph {
  std::string name;
  DataType io_dtype = DataType::kFloat16;
  DataType intermediate_dtype = DataType::kFloat32;
  DataType compute_dtype = DataType::kFloat32;
  std::vector<TensorDesc> tensors;
  std::vector<Node> nodes;
  std::vector<int> outputs;                     // tensor indices the caller reads back
  std::map<std::string, int64_t> dynamic_dims;  // symbol -> current value
  // An engine configuration the author pins for this graph ("eng41_k2=4_k13=0", the identity text that
  // `kiln tune` prints); empty: none. Not part of the signature: it selects among plans, it does not
  // change the computation. `kiln run/tune --pin` overrides it.
  std::string pin;

  // Index of the tensor with this name, or -1.
  int find_tensor(const std::string& name) const;
  bool is_graph_input(int tensor) const;   // no node writes it
  bool is_graph_output(int tensor) const;  // listed in outputs
  bool is_virtual(int tensor) const { return !is_graph_input(tensor) && !is_graph_output(tensor); }
  // Node index that writes `tensor`, or -1.
  int producer(int tensor) const;
  // The tensor's dtype once validated (explicit, or the graph default for its role).
  DataType dtype_of(int tensor) const;
  // Each of producer(), is_graph_input() and dtype_of() scans the nodes (is_graph_output() the outputs):
  // fine for one question, quadratic in a loop over a large graph. Ask GraphRoles instead there.
};

// An sdpa node's key count Skv: k's dim 2, or with paged caches pages * block_size (0 for a node not yet
// validated).
int64_t sdpa_keys_extent(const Graph& g, const Node& n);

// The roles of every tensor of a graph, found in one pass over its nodes and outputs (O(nodes + tensors)),
// answering the same questions as Graph's methods in O(1). A snapshot: valid while the graph's nodes,
// outputs and tensors are not changed. Out-of-range node references are ignored (validation reports them).
class GraphRoles {
 public:
  explicit GraphRoles(const Graph& graph);
  int producer(int tensor) const;  // the first node writing it, or -1
  bool is_graph_input(int tensor) const { return producer(tensor) < 0; }
  bool is_graph_output(int tensor) const;
  bool is_virtual(int tensor) const { return !is_graph_input(tensor) && !is_graph_output(tensor); }
  int consumer_count(int tensor) const;  // how many node inputs read it (a node reading it twice counts twice)
  DataType dtype_of(int tensor) const;   // as Graph::dtype_of

 private:
  const Graph* graph_;
  std::vector<int> producer_;
  std::vector<int> consumers_;
  std::vector<char> output_;
};

// Node indices in an order where every node follows the producers of its inputs (Kahn's algorithm, lowest
// node index first among the ready ones, so the order is deterministic). Needs no validation: it checks
// what it relies on (every node writes one tensor, indices in range, no tensor written twice), and an
// error names the node or tensor at fault, or the nodes on a cycle.
StatusOr<std::vector<int>> topological_order(const Graph& graph);

// Where a validation error is: every message names what it can ("node 'gelu': input 'b': ...").
// Validation checks structure (unknown/missing/dangling tensors, cycles, arity), infers shapes and dtypes of
// outputs and intermediates, resolves layouts into strides, and rejects rank/broadcast mismatches,
// non-positive dims, unsupported dtype combinations and ops the target cannot run (sm_version, 0 = any).
struct ValidateOptions {
  int target_sm_version = 0;
};
Status validate_graph(Graph& graph, const ValidateOptions& options = {});

// Signatures (see docs/spec.md "Signatures"). Both are stable across runs, builds and machines: a
// canonical text form hashed with XXH3-128. Tensor and node names, JSON key order and whitespace do not
// enter them; dtypes, layouts, attributes, static dims and graph structure do. Dynamic dims enter the
// structure signature as symbols and the shape key as values.
struct GraphSignature {
  std::string structure;  // 32 hex digits
  std::string shape_key;  // "batch=8,seq=128" in canonical symbol order; "" when nothing is dynamic
  std::string canonical;  // the canonical text the structure hash was taken of (for debugging)
  // Canonical number of each tensor (by tensor index), the order of the canonical text: the same for
  // every graph with this structure signature, whatever order its tensors were declared in. Lowering
  // binds tensors to cuDNN by it (uid = id + 1), so a stored plan fits every graph with its signature.
  std::vector<int> tensor_ids;
};
StatusOr<GraphSignature> compute_signature(const Graph& validated_graph);
// The signature of `reshaped`, a graph of `base`'s structure at other values of its dynamic dims (reshape_graph),
// given `base_sig` = compute_signature(base). Where every piece of the canonical text reads the same for both
// (derived extents are written "~", symbols by name) only the shape key is made anew, a few hundred
// nanoseconds instead of a full signature; otherwise it is compute_signature(reshaped). Equal to
// compute_signature(reshaped) either way.
StatusOr<GraphSignature> reshaped_signature(const Graph& base, const GraphSignature& base_sig, const Graph& reshaped);

}  // namespace kiln
