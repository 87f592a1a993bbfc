// The scaled dot-product attention family in the graph layer: arity, inference, signature attributes,
// cost.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/ops/op_family.h"
#include "kiln/core/strings.h"

namespace kiln::graph_internal {
namespace {

void sdpa_arity(const Node& n, size_t* lo, size_t* hi) {
  // Dropout's seed and offset come last (kiln/graph/graph.h sdpa_inputs; validation refuses dropout where it is not
  // supported, naming the attribute rather than a count).
  const size_t dropout = n.sdpa.dropout > 0 ? 2 : 0;
  // FP8 attention: q, k, v, the six scales (kiln/graph/graph.h SdpaFp8Input); its backward pass q, k, v, o, do,
  // stats and the twelve scales (SdpaFp8BackwardInput); the lengths after them. It takes no dropout: with a
  // probability, with or without a seed and offset, the count passes and validation refuses the attribute.
  if (n.op == OpKind::kSdpaFp8 || n.op == OpKind::kSdpaFp8Backward) {
    *lo = *hi = (n.op == OpKind::kSdpaFp8 ? 9 : 18) + (n.sdpa.padding ? 2 : 0);
    *hi += dropout;
    return;
  }
  if (n.op == OpKind::kSdpaBackward) {  // q, k, v, o, do, stats, an optional bias, the lengths, ragged the offsets
    *lo = 6 + (n.sdpa.padding ? 2 : 0) + (n.sdpa.ragged ? 4 : 0) + dropout;
    *hi = *lo + 1;
    return;
  }
  // q, k, v, an optional additive bias, with a padding mask the two lengths, with paged caches the two page tables,
  // ragged the four offsets (over paged caches two: q's and o's; kiln/graph/graph.h sdpa_inputs)
  const size_t tail =
      (n.sdpa.padding ? 2 : 0) + (n.sdpa.paged ? 2 : 0) + (n.sdpa.ragged ? (n.sdpa.paged ? 2 : 4) : 0) + dropout;
  *lo = 3 + tail;
  *hi = 4 + tail;
}

// o and optionally the statistics; a backward pass's dq, dk, dv.
// sdpa_fp8's o and amax_o, and optionally the statistics; sdpa_fp8_backward's dq, dk, dv and four amax.
void sdpa_output_arity(const Node& n, size_t* lo, size_t* hi) {
  if (n.op == OpKind::kSdpaFp8Backward) {
    *lo = *hi = 7;
    return;
  }
  *lo = n.op == OpKind::kSdpaBackward ? 3 : n.op == OpKind::kSdpaFp8 ? 2 : 1;
  *hi = n.op == OpKind::kSdpaBackward || n.op == OpKind::kSdpaFp8 ? 3 : 2;
}

// A padding mask's lengths and paged caches' tables are data the caller gives: graph inputs, not a node's output
// (what a node writes has no range Kiln can draw or check; cuDNN reads them as given).
Status check_given(NodeCtx& c, size_t at, const char* what) {
  if (c.roles.producer(c.node.inputs[at]) >= 0)
    return c.error(c.in_label(at) + ": " + what +
                   " must be a graph input (data the caller gives), not a node's output");
  return Status::ok();
}

// An index tensor the caller gives (a page table, a length, a ragged offset; dropout's seed and offset, int64): a
// graph input (check_given, `what` naming one), rank 4, of `dtype` (`dtype_what` naming it in the dtype's message).
Status check_index_input(NodeCtx& c, size_t at, const char* what, const char* dtype_what,
                         DataType dtype = DataType::kInt32) {
  KILN_RETURN_IF_ERROR(check_given(c, at, what));
  KILN_RETURN_IF_ERROR(check_rank(c, at, 4, 4));
  if (c.in_dtype(at) != dtype)
    return c.error(c.in_label(at) + ": dtype " + std::string(dtype_name(c.in_dtype(at))) + " is not supported for " +
                   dtype_what + " (" + dtype_name(dtype) + " only)");
  return Status::ok();
}

// K and V as the keys and values of each batch entry, [B, Hk, Skv, D] and [B, Hk, Skv, Dv]: the tensors
// themselves, or with paged caches (containers [blocks, Hk, block_size, D] and page tables int32 [B, 1, pages, 1])
// B from q and Skv = pages * block_size, each table checked.
Status logical_kv(NodeCtx& c, const Dims& q, Dims* k, Dims* v) {
  *k = c.in(1).dims;
  *v = c.in(2).dims;
  if (!c.node.sdpa.paged) return Status::ok();
  if (!c.node.sdpa.padding)
    return c.error("attribute 'paged_kv': paged caches need \"padding_mask\": true (cuDNN reads a paged cache only "
                   "with each entry's sequence lengths)");
  const SdpaInputs r = sdpa_inputs(c.node);
  for (auto [table, cache] : {std::pair<int, Dims*>{r.page_table_k, k}, std::pair<int, Dims*>{r.page_table_v, v}}) {
    const size_t at = static_cast<size_t>(table);
    KILN_RETURN_IF_ERROR(check_index_input(c, at, "a page table", "a page table"));
    const Dims& t = c.in(at).dims;
    if (t[0].value != q[0].value || t[1].value != 1 || t[3].value != 1)
      return c.error(c.in_label(at) + ": dims " + dims_text(t) + " must be [B, 1, pages, 1] = [" +
                     std::to_string(q[0].value) + ", 1, pages, 1] (one row of cache blocks per batch entry)");
    const int64_t keys = t[2].value * (*cache)[2].value;
    if (keys > std::numeric_limits<int32_t>::max())
      return c.error(c.in_label(at) + ": " + std::to_string(t[2].value) + " pages of " +
                     std::to_string((*cache)[2].value) + " keys make " + std::to_string(keys) +
                     " keys, past cuDNN's int32 lengths");
    Dims logical = *cache;
    logical[0] = q[0];
    logical[2].value = keys;
    logical[2].symbol.clear();
    *cache = logical;
  }
  // The two caches and tables alike (blocks, block size, pages): what Kiln's references and checks assume.
  const Dims &kc = c.in(1).dims, &vc = c.in(2).dims;
  const Dims &tk = c.in(static_cast<size_t>(r.page_table_k)).dims, &tv = c.in(static_cast<size_t>(r.page_table_v)).dims;
  if (kc[0].value != vc[0].value || kc[2].value != vc[2].value || tk[2].value != tv[2].value)
    return c.error(c.in_label(2) + " and " + c.in_label(static_cast<size_t>(r.page_table_v)) + ": the V cache " +
                   dims_text(vc) + " and its table " + dims_text(tv) + " must have the K cache's blocks and block " +
                   "size " + dims_text(kc) + " and its table's pages " + dims_text(tk));
  return Status::ok();
}

// A padding mask's lengths: int32 [B, 1, 1, 1] each, graph inputs.
Status check_lengths(NodeCtx& c, const Dims& q) {
  const SdpaInputs r = sdpa_inputs(c.node);
  for (int i : {r.seq_len_q, r.seq_len_kv}) {
    if (i < 0) continue;
    const size_t at = static_cast<size_t>(i);
    KILN_RETURN_IF_ERROR(check_index_input(c, at, "a padding mask's length", "a padding mask's lengths"));
    const Dims& d = c.in(at).dims;
    if (d[0].value != q[0].value || d[1].value != 1 || d[2].value != 1 || d[3].value != 1)
      return c.error(c.in_label(at) + ": dims " + dims_text(d) + " must be [B, 1, 1, 1] = [" +
                     std::to_string(q[0].value) + ", 1, 1, 1] (one length per batch entry)");
  }
  return Status::ok();
}

// Ragged (THD) q, k, v and o (kiln/graph/graph.h SdpaAttrs::ragged): a padding mask, and four offsets int32
// [B + 1, 1, 1, 1], graph inputs (over paged caches two, q's and o's: k and v are the caches). One tensor in two
// offset roles must describe the same rows: the same lengths (q and o count queries, k and v keys) and the same
// token width (H*D, Hk*D, Hk*Dv, H*Dv). What a ragged node writes (an sdpa's o; a backward pass's dq, dk, dv, through
// q's, k's and v's offsets) is a graph output no node reads (its padded rows and the gaps between entries hold
// whatever the buffer held); a backward pass's o and do are read through o's offsets.
Status check_ragged(NodeCtx& c, const Dims& q, const Dims& k, const Dims& v) {
  if (!c.node.sdpa.ragged) return Status::ok();
  // (A ragged node without "padding_mask" is refused before its input count: src/graph/validate.cc.)
  const bool backward = c.node.op == OpKind::kSdpaBackward;
  const SdpaInputs r = sdpa_inputs(c.node);
  const int at[4] = {r.ragged_q, r.ragged_k, r.ragged_v, r.ragged_o};
  const char* role[4] = {"q's", "k's", "v's", "o's"};
  const int64_t width[4] = {q[1].value * q[3].value, k[1].value * k[3].value, v[1].value * v[3].value,
                            q[1].value * v[3].value};
  for (int i = 0; i < 4; ++i) {
    if (at[i] < 0) continue;  // k's and v's over paged caches
    const size_t a = static_cast<size_t>(at[i]);
    KILN_RETURN_IF_ERROR(check_index_input(c, a, "a ragged offset", "a ragged offset"));
    const Dims& d = c.in(a).dims;
    if (d[0].value != q[0].value + 1 || d[1].value != 1 || d[2].value != 1 || d[3].value != 1)
      return c.error(c.in_label(a) + ": dims " + dims_text(d) + " must be [B + 1, 1, 1, 1] = [" +
                     std::to_string(q[0].value + 1) + ", 1, 1, 1] (where each entry's rows start, and the end)");
    const bool counts_queries = i == 0 || i == 3;
    for (int j = 0; j < i; ++j) {
      if (at[j] < 0 || c.node.inputs[static_cast<size_t>(at[j])] != c.node.inputs[a]) continue;  // another tensor
      if ((j == 0) != counts_queries)  // j is q (queries) or k, v (keys)
        return c.error(c.in_label(a) + ": it serves as " + role[j] + " and " + role[i] +
                       " ragged offset, but one counts queries and the other keys: give each its own tensor");
      if (width[j] != width[i])
        return c.error(c.in_label(a) + ": it serves as " + role[j] + " and " + role[i] +
                       " ragged offset, whose tokens differ (" + std::to_string(width[j]) + " and " +
                       std::to_string(width[i]) + " elements): give each its own tensor");
    }
  }
  // The ragged tensors it reads (q, k and v with an offset: q alone over paged caches; a backward pass's o and do
  // too): graph inputs, each read by this one role only (cuDNN attaches the offsets to the tensor itself, so another
  // reader would read it through them too).
  std::vector<size_t> ragged_in;
  for (size_t i = 0; i < 3; ++i)
    if (at[i] >= 0) ragged_in.push_back(i);
  if (backward) ragged_in.insert(ragged_in.end(), {size_t{3}, size_t{4}});
  for (size_t i : ragged_in) {
    KILN_RETURN_IF_ERROR(check_given(c, i, "a ragged tensor"));
    if (c.roles.consumer_count(c.node.inputs[i]) != 1)
      return c.error(c.in_label(i) +
                     ": a ragged tensor is read by one role of its node only (another node or role reads it too, "
                     "and cuDNN would read it through this node's offsets): give each its own tensor");
  }
  // An offset tensor is read by this node's offset roles only: another node's offsets (other rows), a length or a
  // page table would each want other values than the ones Kiln's checks derive (and than the caller's).
  for (int i = 0; i < 4; ++i) {
    if (at[i] < 0) continue;
    const int t = c.node.inputs[static_cast<size_t>(at[i])];
    int roles_here = 0;
    for (int j = 0; j < 4; ++j) roles_here += at[j] >= 0 && c.node.inputs[static_cast<size_t>(at[j])] == t;
    if (c.roles.consumer_count(t) != roles_here)
      return c.error(c.in_label(static_cast<size_t>(at[i])) +
                     ": a ragged offset is read by its node's offset roles only (another node or input role reads "
                     "it too): give each its own tensor");
  }
  // The tensors' dims are numbers: the offsets' B + 1 and the token-major strides cannot follow a dynamic dim.
  for (size_t i : ragged_in)
    for (const Dim& d : c.in(i).dims)
      if (d.follows_symbols())
        return c.error(c.in_label(i) + ": dims " + dims_text(c.in(i).dims) +
                       " follow a dynamic dim, but a ragged tensor's dims are static (the offsets say how each batch "
                       "is packed)");
  for (size_t o = 0; o < (backward ? 3u : 1u); ++o) {
    const int t = c.node.outputs[o];
    if (!c.roles.is_graph_output(t) || c.roles.consumer_count(t) > 0)
      return c.error(c.out_label(o) + ": a ragged " + (backward ? "gradient" : "o") +
                     " must be a graph output that no node reads (its padded rows are not written)");
  }
  return Status::ok();
}
// The optional bias [B or 1, H or 1, Sq, Skv], added to the scaled scores before the softmax (and the band), in q's
// dtype. cuDNN (9.19, Frontend 1.32) takes no bias with a bottom-right diagonal.
Status check_bias(NodeCtx& c, const Dims& q, const Dims& k) {
  const int at = sdpa_inputs(c.node).bias;
  if (at < 0) return Status::ok();
  const size_t bi = static_cast<size_t>(at);
  KILN_RETURN_IF_ERROR(check_rank(c, bi, 4, 4));
  const Dims& b = c.in(bi).dims;
  if (c.in_dtype(bi) != c.in_dtype(0))
    return c.error(
        c.in_label(bi) + ": dtype " + std::string(dtype_name(c.in_dtype(bi))) + " differs from " + c.in_label(0) +
        " (" + dtype_name(c.in_dtype(0)) + "): the bias is in q's dtype" +
        (c.in_dtype(bi) != DataType::kInt32 ? ""
         : c.node.sdpa.padding
             ? " (a padding mask's lengths come after the bias, then the page tables and offsets; is an input "
               "missing, extra or out of order?)"
             : " (a padding mask's lengths need \"padding_mask\": true)"));
  const int64_t want[4] = {q[0].value, q[1].value, q[2].value, k[2].value};
  const char* what[4] = {"batch", "heads", "queries", "keys"};
  for (size_t i = 0; i < 4; ++i) {
    const bool broadcast = i < 2 && b[i].value == 1;
    if (b[i].value != want[i] && !broadcast)
      return c.error(c.in_label(bi) + ": dims " + dims_text(b) + " must be [B or 1, H or 1, Sq, Skv] = [" +
                     std::to_string(want[0]) + " or 1, " + std::to_string(want[1]) + " or 1, " +
                     std::to_string(want[2]) + ", " + std::to_string(want[3]) + "] (" + what[i] + ")");
  }
  return Status::ok();
}

// The diagonal band (SdpaAttrs): each bound in range, not contradicting causal, an alignment only with a bound to
// align; and what cuDNN (Frontend 1.32, cuDNN 9.19) refuses, refused here first: a sliding window or a
// bottom-right diagonal with more queries than keys. cuDNN takes a bound as an int32 or a float and compares a
// sliding window's positions as floats: the bounds and, with a window, both sequence lengths at most 2^24, where
// floats are exact.
Status check_band(NodeCtx& c, int64_t sq, int64_t skv) {
  const SdpaAttrs& a = c.node.sdpa;
  constexpr int64_t kMaxBound = int64_t{1} << 24;
  if (a.left_bound && (*a.left_bound < 1 || *a.left_bound > kMaxBound))
    return c.error("attribute 'left_bound': " + std::to_string(*a.left_bound) +
                   " must be between 1 (the diagonal's own key) and " + std::to_string(kMaxBound));
  if (a.right_bound && (*a.right_bound < 0 || *a.right_bound > kMaxBound))
    return c.error("attribute 'right_bound': " + std::to_string(*a.right_bound) + " must be between 0 and " +
                   std::to_string(kMaxBound));
  if (a.causal && a.right_bound && *a.right_bound != 0)
    return c.error("attribute 'right_bound': " + std::to_string(*a.right_bound) +
                   " contradicts 'causal': true (causal is right_bound 0)");
  if (a.alignment == DiagonalAlignment::kBottomRight && !a.masked())
    return c.error("attribute 'diagonal_alignment': bottom_right aligns a bound, and none is set (causal, "
                   "left_bound or right_bound)");
  return Status::ok();
}

// What cuDNN (9.19, Frontend 1.32) cannot run, or Kiln cannot check, though the spec is valid, checked after every
// InvalidArgument check (a spec with both kinds of fault exits 2, for the fault the author must fix).
Status band_support(NodeCtx& c, int64_t sq, int64_t skv) {
  const SdpaAttrs& a = c.node.sdpa;
  constexpr int64_t kMaxBound = int64_t{1} << 24;
  const std::string sizes = " (" + c.in_label(0) + " has " + std::to_string(sq) + " queries, " + c.in_label(1) + " " +
                            std::to_string(skv) + " keys)";
  if (a.alignment == DiagonalAlignment::kBottomRight && sq > skv)
    return not_supported(c.where +
                         ": cuDNN aligns the diagonal bottom-right only with at most as many queries as keys" + sizes);
  if (a.left_bound && sq > skv)
    return not_supported(
        c.where + ": cuDNN takes a sliding window (left_bound) only with at most as many queries as keys" + sizes);
  if (a.left_bound && (sq > kMaxBound || skv > kMaxBound))
    return not_supported(c.where + ": cuDNN compares a sliding window's positions as floats, exact up to " +
                         std::to_string(kMaxBound) + sizes);
  if (sdpa_inputs(c.node).bias >= 0 && a.alignment == DiagonalAlignment::kBottomRight)
    return not_supported(c.where + ": cuDNN takes no attention bias with a bottom-right diagonal");
  return Status::ok();
}

// "attribute 'dropout': 0.1": the probability as the author wrote it (the shortest text that reads back as the same
// double).
std::string dropout_label(double p) { return "attribute 'dropout': " + shortest_number(p); }

// Dropout's seed and offset (kiln/graph/graph.h SdpaAttrs::dropout): int64 [1, 1, 1, 1] graph inputs, read on the
// device (cuDNN's Philox generator takes them as tensors, so a CUDA graph replays with the values they hold).
Status check_dropout_inputs(NodeCtx& c) {
  const SdpaInputs r = sdpa_inputs(c.node);
  const double p = c.node.sdpa.dropout;
  // cuDNN takes the probability as a float: one that rounds to 0 or 1 there would not drop, or would divide by 0.
  if (p > 0 && (static_cast<float>(p) <= 0.0f || static_cast<float>(p) >= 1.0f))
    return c.error(dropout_label(p) + " rounds to " + (static_cast<float>(p) <= 0.0f ? "0" : "1") +
                   " as the float cuDNN takes: give a probability a float holds strictly between 0 and 1");
  if (r.seed >= 0 && c.node.inputs[static_cast<size_t>(r.seed)] == c.node.inputs[static_cast<size_t>(r.offset)])
    return c.error(c.in_label(static_cast<size_t>(r.seed)) +
                   " is both dropout's seed and its offset: give two tensors (a training loop advances the offset "
                   "at each step and keeps the seed)");
  for (int i : {r.seed, r.offset}) {
    if (i < 0) continue;
    const size_t at = static_cast<size_t>(i);
    const char* what = i == r.seed ? "dropout's seed" : "dropout's offset";
    if (c.in(at).by_value)
      return c.error(c.in_label(at) + ": " + what + " is read on the device (a tensor), not passed by value");
    KILN_RETURN_IF_ERROR(check_index_input(c, at, what, what, DataType::kInt64));
    for (const Dim& d : c.in(at).dims)
      if (d.value != 1)
        return c.error(c.in_label(at) + ": dims " + dims_text(c.in(at).dims) + " must be [1, 1, 1, 1] (" + what +
                       " is one value)");
  }
  return Status::ok();
}

// What Kiln or cuDNN (9.19, Frontend 1.32) cannot run with dropout, after every fault the author must fix. Kiln
// checks a dropout plan by probing the mask it draws (kiln/validate/dropout_probe.h), which reads v and o dense.
Status dropout_support(NodeCtx& c) {
  const SdpaAttrs& a = c.node.sdpa;
  if (!(a.dropout > 0)) return Status::ok();
  const std::string what = c.where + ": " + dropout_label(a.dropout);
  if (c.node.op == OpKind::kSdpaFp8 || c.node.op == OpKind::kSdpaFp8Backward)
    return not_supported(what + ": FP8 attention with dropout is not supported yet");
  if (a.paged) return not_supported(what + ": dropout over paged caches (decode) is not supported");
  if (a.ragged) return not_supported(what + ": dropout over ragged tensors is not supported yet");
  if (a.left_bound || a.alignment == DiagonalAlignment::kBottomRight)
    return not_supported(what + ": cuDNN takes dropout with no sliding window (left_bound) and no bottom-right "
                                "diagonal");
  // Kiln checks a dropout plan by probing the mask it draws (kiln/validate/dropout_probe.h): it replaces v (a
  // backward pass's do), which must be a graph input, and reads o (dv), which must be a graph output.
  const bool backward = c.node.op == OpKind::kSdpaBackward;
  const size_t replaced = backward ? 4 : 2, read = backward ? 2 : 0;
  if (!c.roles.is_graph_input(c.node.inputs[replaced]) || !c.roles.is_graph_output(c.node.outputs[read]))
    return not_supported(what + ": Kiln checks a plan that drops by replacing " + c.in_label(replaced) +
                         " and reading " + c.out_label(read) + ", so the first must be a graph input and the " +
                         "second a graph output (declare it among the graph's outputs)");
  return Status::ok();
}

// A backward pass whose o comes from the forward op in the same graph (sdpa for sdpa_backward, sdpa_fp8 for
// sdpa_fp8_backward) differentiates that node: the same band and scale (gradients of another band or scale are
// another function's), and with dropout the same probability, seed and offset (they draw the same mask).
Status check_matches_forward(NodeCtx& c) {
  const OpKind forward = c.node.op == OpKind::kSdpaFp8Backward ? OpKind::kSdpaFp8 : OpKind::kSdpa;
  const int writer = c.roles.producer(c.node.inputs[3]);
  if (writer < 0 || c.g.nodes[static_cast<size_t>(writer)].op != forward) return Status::ok();
  const Node& fwd = c.g.nodes[static_cast<size_t>(writer)];
  const SdpaAttrs &a = c.node.sdpa, &f = fwd.sdpa;
  const std::string from = c.in_label(3) + " comes from node '" + fwd.name + "' (" + op_kind_name(fwd.op) + "), ";
  const bool same_band = a.effective_right_bound() == f.effective_right_bound() && a.left_bound == f.left_bound &&
                         a.alignment == f.alignment;
  if (!same_band)
    return c.error(from + "whose band differs (causal, left_bound, right_bound, diagonal_alignment): a backward pass "
                          "of it takes the same band");
  const auto scale = [&](const Node& n) {
    const Dims& q = c.g.tensors[static_cast<size_t>(n.inputs[0])].dims;
    return n.sdpa.attn_scale.value_or(q.size() == 4 ? 1.0 / std::sqrt(static_cast<double>(q[3].value)) : 0.0);
  };
  if (static_cast<float>(scale(c.node)) != static_cast<float>(scale(fwd)))
    return c.error(from + "whose attn_scale is " + canonical_number(scale(fwd)) + ", not " +
                   canonical_number(scale(c.node)) + ": a backward pass of it takes the same scale");
  if (!(a.dropout > 0) && !(f.dropout > 0)) return Status::ok();
  const SdpaInputs mine = sdpa_inputs(c.node), theirs = sdpa_inputs(fwd);
  const auto tensor_at = [](const Node& n, int i) { return i >= 0 ? n.inputs[static_cast<size_t>(i)] : -1; };
  const bool same = a.dropout == f.dropout && tensor_at(c.node, mine.seed) == tensor_at(fwd, theirs.seed) &&
                    tensor_at(c.node, mine.offset) == tensor_at(fwd, theirs.offset);
  if (same) return Status::ok();
  return c.error(from + "whose " + (f.dropout > 0 ? dropout_label(f.dropout) : std::string("dropout is 0")) +
                 ": a backward pass of it takes the same probability, the same seed and offset tensors (its mask "
                 "again) and the same band");
}

// The optional second output: each query row's softmax statistics, the log-sum-exp (natural log) of its scaled,
// biased and masked scores, fp32 [B, H, Sq, 1] (what a backward pass reads back; kiln/graph/graph.h SdpaAttrs).
// Its dtype is the author's to fix (InvalidArgument). With a padding mask a padded query row's statistics are
// -infinity (no key: the log of an empty sum), what cuDNN 9.14 and newer write there.
Status stats_output(NodeCtx& c, const Dims& q, std::vector<Dims>* out) {
  if (c.out_dtype(1) != DataType::kFloat32)
    return c.error(c.out_label(1) + ": dtype " + std::string(dtype_name(c.out_dtype(1))) +
                   " is not supported for the softmax statistics (float32 only: declare \"dtype\": \"float32\")");
  out->push_back(Dims{q[0], q[1], q[2], Dim{1, "", false}});
  return Status::ok();
}
// cuDNN takes the scale as a float: it must stay a positive, finite, normal one.
Status check_attn_scale(NodeCtx& c) {
  if (const std::optional<double> a = c.node.sdpa.attn_scale;
      a && !(*a >= static_cast<double>(std::numeric_limits<float>::min()) &&
             *a <= static_cast<double>(std::numeric_limits<float>::max())))
    return c.error("attribute 'attn_scale': " + canonical_number(*a) +
                   " must be positive and a normal fp32 value (cuDNN takes it as a float)");
  return Status::ok();
}

// q, k, v's dtypes (fp16 or bf16, alike: inputs 0..count-1), compute fp32, SM 8.0+, a positive scale.
Status check_common(NodeCtx& c, const ValidateOptions& options, size_t count) {
  DataType qt = c.in_dtype(0);
  for (size_t i = 0; i < count; ++i) {
    DataType t = c.in_dtype(i);
    if (t != DataType::kFloat16 && t != DataType::kBFloat16)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(t)) + " is not supported by " +
                     node_op_name(c.node) + " (fp16 or bf16 only)");
    if (t != qt)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(t)) + " differs from " + c.in_label(0) + " (" +
                     dtype_name(qt) + ")");
  }
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  if (options.target_sm_version > 0 && options.target_sm_version < 80)
    return not_supported(c.where + ": " + node_op_name(c.node) + " needs SM 8.0 or newer, target is SM " +
                         std::to_string(options.target_sm_version / 10) + "." +
                         std::to_string(options.target_sm_version % 10));
  return check_attn_scale(c);
}

// q [B, H, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv] (k and v as the keys and values: logical_kv): batches and
// heads alike, Hk dividing H, head dims multiples of 8 up to 256.
Status check_qkv(NodeCtx& c, const Dims& q, const Dims& k, const Dims& v) {
  for (const Dims* kv : {&k, &v})
    if ((*kv)[0].value != q[0].value)
      return c.error(c.in_label(kv == &k ? 1 : 2) + ": batch " + std::to_string((*kv)[0].value) + " differs from " +
                     c.in_label(0) + " batch " + std::to_string(q[0].value));
  if (v[1].value != k[1].value)
    return c.error(c.in_label(2) + ": heads " + std::to_string(v[1].value) + " differ from " + c.in_label(1) +
                   " heads " + std::to_string(k[1].value));
  if (q[1].value % k[1].value != 0)
    return c.error(c.in_label(1) + ": heads " + std::to_string(k[1].value) + " do not divide " + c.in_label(0) +
                   " heads " + std::to_string(q[1].value));
  if (v[2].value != k[2].value)
    return c.error(c.in_label(2) + ": sequence length " + std::to_string(v[2].value) + " differs from " +
                   c.in_label(1) + " sequence length " + std::to_string(k[2].value) +
                   (c.node.sdpa.paged ? " (pages times block size, each from its page table and cache)" : ""));
  if (k[3].value != q[3].value)
    return c.error(c.in_label(1) + ": head dim " + std::to_string(k[3].value) + " differs from " + c.in_label(0) +
                   " head dim " + std::to_string(q[3].value));
  for (size_t i : {size_t{0}, size_t{2}}) {
    int64_t d = c.in(i).dims[3].value;
    if (d % 8 != 0 || d > 256)
      return c.error(c.in_label(i) + ": head dim " + std::to_string(d) + " must be a multiple of 8 and at most 256");
  }
  return Status::ok();
}

// sdpa's optional inputs are placed by their count (kiln/graph/graph.h sdpa_inputs): one missing or extra shifts
// every role after the bias, so a count that fits the other form (with or without a bias) reads a length as the
// bias, or the bias as a length. Their dtypes tell (a bias is q's, a length int32): said before any role's own check.
Status check_bias_by_dtype(NodeCtx& c) {
  const SdpaInputs r = sdpa_inputs(c.node);
  const std::string count = std::to_string(c.node.inputs.size()) + " inputs";
  const char* layout =
      c.node.op == OpKind::kSdpaBackward
          ? " (q, k, v, o, do, stats, an optional bias, and with \"padding_mask\": true seq_len_q and seq_len_kv, "
            "then with \"ragged\" the offsets of q, k, v and o, then with \"dropout\" its seed and offset)"
          : " (q, k, v, an optional bias, and with \"padding_mask\": true seq_len_q and seq_len_kv, then with "
            "\"paged_kv\" page_table_k and page_table_v, then with \"ragged\" the offsets of q, k, v and o: over "
            "paged caches of q and o only, then with \"dropout\" its seed and offset)";
  // With dropout, an int64 where the count put another role while the last two are not both int64: the seed or
  // offset out of place (they come last). With both in place, an int64 elsewhere is that role's own fault.
  const auto is_int64 = [&](int i) { return i >= 0 && c.in_dtype(static_cast<size_t>(i)) == DataType::kInt64; };
  const bool seeds_in_place = is_int64(r.seed) && is_int64(r.offset);
  for (int i : {r.bias, r.seq_len_q, r.seq_len_kv, r.page_table_k, r.page_table_v, r.ragged_q, r.ragged_k, r.ragged_v,
                r.ragged_o})
    if (c.node.sdpa.dropout > 0 && !seeds_in_place && is_int64(i))
      return c.error(c.in_label(static_cast<size_t>(i)) + ": int64, where " + count +
                     " put another role: dropout's seed and offset come last" + layout);
  if (r.bias >= 0 && c.in_dtype(static_cast<size_t>(r.bias)) == DataType::kInt32 && c.node.sdpa.padding)
    return c.error(c.in_label(static_cast<size_t>(r.bias)) + ": int32, where " + count +
                   " put the bias: is an input missing or extra?" + layout);
  if (r.bias < 0 && r.seq_len_q >= 0 && c.in_dtype(static_cast<size_t>(r.seq_len_q)) == c.in_dtype(0))
    return c.error(c.in_label(static_cast<size_t>(r.seq_len_q)) + ": " + dtype_name(c.in_dtype(0)) + ", where " +
                   count + " put seq_len_q (no bias): is an input missing or extra?" + layout);
  return Status::ok();
}

Status infer_sdpa_backward(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out);
Status infer_sdpa_fp8(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out);
Status infer_sdpa_fp8_backward(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out);

Status infer_sdpa(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out) {
  if (c.node.op == OpKind::kSdpaBackward) return infer_sdpa_backward(c, options, out);
  if (c.node.op == OpKind::kSdpaFp8) return infer_sdpa_fp8(c, options, out);
  if (c.node.op == OpKind::kSdpaFp8Backward) return infer_sdpa_fp8_backward(c, options, out);
  for (size_t i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(check_rank(c, i, 4, 4));
  KILN_RETURN_IF_ERROR(check_common(c, options, 3));
  KILN_RETURN_IF_ERROR(check_bias_by_dtype(c));
  DataType ot = c.out_dtype();
  if (ot != DataType::kFloat16 && ot != DataType::kBFloat16)
    return c.error(c.out_label() + ": dtype " + std::string(dtype_name(ot)) +
                   " is not supported by sdpa (fp16 or bf16 only)");
  const Dims& q = c.in(0).dims;
  Dims k, v;
  KILN_RETURN_IF_ERROR(logical_kv(c, q, &k, &v));
  KILN_RETURN_IF_ERROR(check_qkv(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_band(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(check_bias_by_dtype(c));
  KILN_RETURN_IF_ERROR(check_bias(c, q, k));
  KILN_RETURN_IF_ERROR(check_lengths(c, q));
  KILN_RETURN_IF_ERROR(check_ragged(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_dropout_inputs(c));
  out->push_back(Dims{q[0], q[1], q[2], v[3]});
  if (c.node.outputs.size() > 1) KILN_RETURN_IF_ERROR(stats_output(c, q, out));
  KILN_RETURN_IF_ERROR(band_support(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(dropout_support(c));
  return Status::ok();
}

// A backward pass's o and do (inputs 3 and 4) [B, H, Sq, Dv], and its statistics (input 5) fp32 [B, H, Sq, 1]: what
// the forward it differentiates wrote.
Status check_o_do_stats(NodeCtx& c, const Dims& q, const Dims& v) {
  const Dims want_o{q[0], q[1], q[2], v[3]};
  for (size_t i : {size_t{3}, size_t{4}}) {
    const Dims& d = c.in(i).dims;
    for (size_t a = 0; a < 4; ++a)
      if (d[a].value != want_o[a].value)
        return c.error(c.in_label(i) + ": dims " + dims_text(d) + " must be o's [B, H, Sq, Dv] = " + dims_text(want_o));
  }
  if (c.in_dtype(5) != DataType::kFloat32)
    return c.error(c.in_label(5) + ": dtype " + std::string(dtype_name(c.in_dtype(5))) +
                   " is not supported for the softmax statistics (float32 only)");
  const Dims& st = c.in(5).dims;
  if (st[0].value != q[0].value || st[1].value != q[1].value || st[2].value != q[2].value || st[3].value != 1)
    return c.error(c.in_label(5) + ": dims " + dims_text(st) + " must be [B, H, Sq, 1] = [" +
                   std::to_string(q[0].value) + ", " + std::to_string(q[1].value) + ", " + std::to_string(q[2].value) +
                   ", 1] (one log-sum-exp per query row, as the forward's statistics)");
  return Status::ok();
}

// The backward pass: q, k, v, o, do, stats (, bias), each checked against the forward it differentiates (o and do
// [B, H, Sq, Dv] in q's dtype, stats fp32 [B, H, Sq, 1]); dq, dk, dv shaped as q, k, v, fp16 or bf16.
Status infer_sdpa_backward(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out) {
  for (size_t i = 0; i < c.node.inputs.size(); ++i) KILN_RETURN_IF_ERROR(check_rank(c, i, 4, 4));
  if (c.node.sdpa.paged)
    return c.error("attribute 'paged_kv': paged caches serve decode; a backward pass reads k and v whole");
  KILN_RETURN_IF_ERROR(check_common(c, options, 5));
  const Dims &q = c.in(0).dims, &k = c.in(1).dims, &v = c.in(2).dims;
  KILN_RETURN_IF_ERROR(check_qkv(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_o_do_stats(c, q, v));
  for (size_t o = 0; o < 3; ++o) {
    const DataType t = c.out_dtype(o);
    if (t != DataType::kFloat16 && t != DataType::kBFloat16)
      return c.error(c.out_label(o) + ": dtype " + std::string(dtype_name(t)) +
                     " is not supported by sdpa_backward (fp16 or bf16 only: declare its \"dtype\" where another node "
                     "reads it)");
  }
  KILN_RETURN_IF_ERROR(check_band(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(check_bias_by_dtype(c));
  KILN_RETURN_IF_ERROR(check_bias(c, q, k));
  KILN_RETURN_IF_ERROR(check_lengths(c, q));
  KILN_RETURN_IF_ERROR(check_ragged(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_dropout_inputs(c));
  KILN_RETURN_IF_ERROR(check_matches_forward(c));
  // What Kiln or cuDNN cannot run yet, after every check the author must act on.
  KILN_RETURN_IF_ERROR(band_support(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(dropout_support(c));
  // cuDNN Frontend (1.32) runs a backward pass with head dims up to 256 on SM 9.x, up to 128 elsewhere (and on
  // SM 10.x q's 192 over v's 128).
  const int sm = options.target_sm_version;
  const bool sm100_192 = sm / 10 == 10 && q[3].value == 192 && v[3].value == 128;
  if (sm > 0 && sm / 10 != 9 && !sm100_192 && (q[3].value > 128 || v[3].value > 128))
    return not_supported(c.where + ": cuDNN's backward pass takes head dims up to 128 off SM 9.x (q's " +
                         std::to_string(q[3].value) + ", v's " + std::to_string(v[3].value) + "; target SM " +
                         std::to_string(sm / 10) + "." + std::to_string(sm % 10) + ")");
  if (q[2].value == 1 && k[2].value == 1)
    return not_supported(c.where + ": cuDNN's backward pass takes no single query over a single key (Sq = Skv = 1)");
  out->push_back(q);
  out->push_back(k);
  out->push_back(v);
  return Status::ok();
}

// One of sdpa_fp8's scales: an fp32 [1, 1, 1, 1] graph input (the caller's delayed-scaling state: cuDNN reads it
// on the device at each execution).
Status check_fp8_scale(NodeCtx& c, size_t at) {
  KILN_RETURN_IF_ERROR(check_given(c, at, "an FP8 scale"));
  if (c.in_dtype(at) != DataType::kFloat32)
    return c.error(c.in_label(at) + ": dtype " + std::string(dtype_name(c.in_dtype(at))) +
                   " is not supported for an FP8 scale (float32 only)");
  const Dims& d = c.in(at).dims;
  for (const Dim& x : d)
    if (x.value != 1) return c.error(c.in_label(at) + ": dims " + dims_text(d) + " must be [1, 1, 1, 1] (one scale)");
  return Status::ok();
}

// An FP8 node's scales (inputs first..last) are tensors, refused by value before any rank (a scalar's own reason,
// not its rank); then every input is rank 4.
Status check_fp8_ranks(NodeCtx& c, size_t first, size_t last) {
  for (size_t i = first; i <= last; ++i)
    if (c.in(i).by_value)
      return c.error(c.in_label(i) + ": an FP8 scale is read on the device (a tensor), not passed by value");
  for (size_t i = 0; i < c.node.inputs.size(); ++i) KILN_RETURN_IF_ERROR(check_rank(c, i, 4, 4));
  return Status::ok();
}

// FP8 attention (cuDNN's sdpa_fp8, per-tensor scaling): q, k, v fp8 e4m3 [B, H, S, D], the six scales, o fp8
// shaped as sdpa's, amax_o fp32 [1, 1, 1, 1], optionally the statistics. What cuDNN (9.19, Frontend 1.32) runs on
// SM 9.x: no bias (none can be given), no bottom-right diagonal, head dims multiples of 16 up to 256, an fp8 o.
Status infer_sdpa_fp8(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_fp8_ranks(c, kFp8DescaleQ, kFp8ScaleO));
  for (size_t i = 0; i < 3; ++i)
    if (c.in_dtype(i) != DataType::kFp8E4M3)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(c.in_dtype(i))) +
                     " is not supported by sdpa_fp8 (fp8_e4m3 only: q, k and v alike)");
  for (size_t i = kFp8DescaleQ; i <= kFp8ScaleO; ++i) KILN_RETURN_IF_ERROR(check_fp8_scale(c, i));
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  KILN_RETURN_IF_ERROR(check_attn_scale(c));
  if (c.node.sdpa.paged || c.node.sdpa.ragged)
    return c.error(std::string("attribute '") + (c.node.sdpa.paged ? "paged_kv" : "ragged") +
                   "': sdpa_fp8 takes q, k, v, the six scales and a padding mask's lengths only (no page tables or "
                   "offsets yet)");
  const DataType ot = c.out_dtype(kFp8O);
  if (ot != DataType::kFp8E4M3 && ot != DataType::kFp8E5M2)
    return c.error(c.out_label(kFp8O) + ": dtype " + std::string(dtype_name(ot)) +
                   " is not supported for sdpa_fp8's o (fp8_e4m3 or fp8_e5m2: declare its \"dtype\")");
  if (c.out_dtype(kFp8AmaxO) != DataType::kFloat32)
    return c.error(c.out_label(kFp8AmaxO) + ": dtype " + std::string(dtype_name(c.out_dtype(kFp8AmaxO))) +
                   " is not supported for amax_o (float32 only: declare \"dtype\": \"float32\")");
  const Dims &q = c.in(0).dims, &k = c.in(1).dims, &v = c.in(2).dims;
  KILN_RETURN_IF_ERROR(check_qkv(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_band(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(check_lengths(c, q));
  KILN_RETURN_IF_ERROR(check_dropout_inputs(c));
  out->push_back(Dims{q[0], q[1], q[2], v[3]});
  out->push_back(Dims{Dim{1, "", false}, Dim{1, "", false}, Dim{1, "", false}, Dim{1, "", false}});
  if (c.node.outputs.size() > kFp8Stats) {
    if (c.out_dtype(kFp8Stats) != DataType::kFloat32)
      return c.error(c.out_label(kFp8Stats) + ": dtype " + std::string(dtype_name(c.out_dtype(kFp8Stats))) +
                     " is not supported for the softmax statistics (float32 only: declare \"dtype\": \"float32\")");
    out->push_back(Dims{q[0], q[1], q[2], Dim{1, "", false}});
  }
  // What cuDNN cannot run though the spec is valid, after every check the author must act on.
  KILN_RETURN_IF_ERROR(band_support(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(dropout_support(c));
  if (c.node.sdpa.padding && c.node.outputs.size() > kFp8Stats)
    return not_supported(c.where + ": " + c.out_label(kFp8Stats) +
                         ": the statistics of FP8 attention with a padding mask are not supported (on an H100 with "
                         "cuDNN 9.19 they failed Kiln's check, whose padded rows are -infinity as sdpa's are)");
  const int sm = options.target_sm_version;
  const std::string target = sm > 0 ? "target SM " + std::to_string(sm / 10) + "." + std::to_string(sm % 10)
                                    : "no target given (SM 9.x assumed)";
  if (sm > 0 && sm < 90) return not_supported(c.where + ": cuDNN's FP8 attention needs SM 9.0 or newer, " + target);
  // cuDNN (9.19) aligns an FP8 band bottom-right on SM 10.x and newer only; without a target Kiln assumes SM 9.x
  // (validate --target-sm 100 for a Blackwell spec).
  if (c.node.sdpa.alignment == DiagonalAlignment::kBottomRight && sm < 100)
    return not_supported(c.where +
                         ": cuDNN's FP8 attention aligns the diagonal bottom-right only on SM 10.x and "
                         "newer (" +
                         target + ")");
  const int64_t d = q[3].value, dv = v[3].value;
  for (size_t i : {size_t{0}, size_t{2}})
    if (c.in(i).dims[3].value % 16 != 0)
      return not_supported(c.where + ": cuDNN's FP8 attention takes head dims that are multiples of 16 (" +
                           c.in_label(i) + "'s is " + std::to_string(c.in(i).dims[3].value) + ")");
  // On SM 10.x and newer cuDNN 9.19's FP8 attention takes head dims up to 128, or q's 192 over v's 128.
  if (sm >= 100 && (d > 128 || dv > 128) && !(d == 192 && dv == 128))
    return not_supported(c.where + ": cuDNN's FP8 attention takes head dims up to 128 (or q's 192 over v's 128) on " +
                         target + " (q's " + std::to_string(d) + ", v's " + std::to_string(dv) + ")");
  return Status::ok();
}

// sdpa_fp8_backward's data tensors: q, k, v, o, do fp8 e4m3 (o and do [B, H, Sq, Dv]), the statistics fp32
// [B, H, Sq, 1], the twelve scales (check_fp8_scale), dq, dk, dv fp8 e4m3 and the four amax fp32.
Status check_fp8_backward_tensors(NodeCtx& c, const Dims& q, const Dims& v) {
  for (size_t i = 0; i < 5; ++i)
    if (c.in_dtype(i) != DataType::kFp8E4M3)
      return c.error(c.in_label(i) + ": dtype " + std::string(dtype_name(c.in_dtype(i))) +
                     " is not supported by sdpa_fp8_backward (fp8_e4m3 only: q, k, v, o and do alike)");
  KILN_RETURN_IF_ERROR(check_o_do_stats(c, q, v));
  for (size_t i = kFp8bDescaleQ; i <= kFp8bScaleDp; ++i) {
    KILN_RETURN_IF_ERROR(check_fp8_scale(c, i));
    if (c.node.inputs[i] == c.node.inputs[5])
      return c.error(c.in_label(i) + ": it is both the softmax statistics and an FP8 scale: give each its own tensor");
  }
  for (size_t o = kFp8bDq; o <= kFp8bDv; ++o)
    if (c.out_dtype(o) != DataType::kFp8E4M3)
      return c.error(c.out_label(o) + ": dtype " + std::string(dtype_name(c.out_dtype(o))) +
                     " is not supported for sdpa_fp8_backward's gradients (fp8_e4m3 only: declare its \"dtype\")");
  for (size_t o = kFp8bAmaxDq; o <= kFp8bAmaxDp; ++o)
    if (c.out_dtype(o) != DataType::kFloat32)
      return c.error(c.out_label(o) + ": dtype " + std::string(dtype_name(c.out_dtype(o))) +
                     " is not supported for an amax (float32 only: declare \"dtype\": \"float32\")");
  return Status::ok();
}

// FP8 attention's backward pass (cuDNN's sdpa_fp8_backward, per-tensor scaling; kiln/graph/graph.h says what it
// computes): dq, dk, dv shaped as q, k, v, and amax_dq, amax_dk, amax_dv, amax_dp [1, 1, 1, 1]. What cuDNN (9.19,
// Frontend 1.32) runs on SM 9.x: head dims of 128 (q's and v's), no bias (none can be given), dropout, paged caches,
// ragged tensors or bottom-right diagonal.
Status infer_sdpa_fp8_backward(NodeCtx& c, const ValidateOptions& options, std::vector<Dims>* out) {
  KILN_RETURN_IF_ERROR(check_fp8_ranks(c, kFp8bDescaleQ, kFp8bScaleDp));
  if (c.node.sdpa.paged || c.node.sdpa.ragged)
    return c.error(std::string("attribute '") + (c.node.sdpa.paged ? "paged_kv" : "ragged") +
                   "': sdpa_fp8_backward takes q, k, v, o, do, stats, the twelve scales and a padding mask's lengths "
                   "only (no page tables or offsets)");
  KILN_RETURN_IF_ERROR(check_compute_fp32(c));
  KILN_RETURN_IF_ERROR(check_attn_scale(c));
  const Dims &q = c.in(0).dims, &k = c.in(1).dims, &v = c.in(2).dims;
  KILN_RETURN_IF_ERROR(check_qkv(c, q, k, v));
  KILN_RETURN_IF_ERROR(check_fp8_backward_tensors(c, q, v));
  KILN_RETURN_IF_ERROR(check_band(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(check_lengths(c, q));
  KILN_RETURN_IF_ERROR(check_dropout_inputs(c));
  KILN_RETURN_IF_ERROR(check_matches_forward(c));
  out->push_back(q);
  out->push_back(k);
  out->push_back(v);
  for (int i = 0; i < 4; ++i)
    out->push_back(Dims{Dim{1, "", false}, Dim{1, "", false}, Dim{1, "", false}, Dim{1, "", false}});
  // What cuDNN cannot run though the spec is valid, after every check the author must act on.
  KILN_RETURN_IF_ERROR(band_support(c, q[2].value, k[2].value));
  KILN_RETURN_IF_ERROR(dropout_support(c));
  const int sm = options.target_sm_version;
  const std::string target = sm > 0 ? "target SM " + std::to_string(sm / 10) + "." + std::to_string(sm % 10)
                                    : "no target given (SM 9.x assumed)";
  if (sm > 0 && sm < 90)
    return not_supported(c.where + ": cuDNN's FP8 attention backward pass needs SM 9.0 or newer, " + target);
  if (c.node.sdpa.alignment == DiagonalAlignment::kBottomRight && sm < 100)
    return not_supported(c.where +
                         ": cuDNN's FP8 attention backward pass aligns the diagonal bottom-right only on SM 10.x and "
                         "newer (" +
                         target + ")");
  const int64_t d = q[3].value, dv = v[3].value;
  // cuDNN 9.19 (Frontend 1.32): head dims of exactly 128 on SM 9.x; on SM 10.x and newer multiples of 16 up to 128,
  // or q's 192 over v's 128.
  if (sm < 100 && (d != 128 || dv != 128))
    return not_supported(c.where +
                         ": cuDNN's FP8 attention backward pass takes head dims of 128 only below SM 10.0 (q's " +
                         std::to_string(d) + ", v's " + std::to_string(dv) + "; " + target + ")");
  if (c.node.sdpa.alignment == DiagonalAlignment::kBottomRight && (q[2].value % 64 != 0 || k[2].value % 64 != 0))
    return not_supported(c.where +
                         ": cuDNN's FP8 attention backward pass aligns the diagonal bottom-right only with query and "
                         "key counts that are multiples of 64 (" +
                         c.in_label(0) + " has " + std::to_string(q[2].value) + " queries, " + c.in_label(1) + " " +
                         std::to_string(k[2].value) + " keys)");
  if (sm >= 100 && !((d <= 128 && dv <= 128 && d % 16 == 0 && dv % 16 == 0) || (d == 192 && dv == 128)))
    return not_supported(c.where +
                         ": cuDNN's FP8 attention backward pass takes head dims that are multiples of 16 up to 128 "
                         "(or q's 192 over v's 128) on " +
                         target + " (q's " + std::to_string(d) + ", v's " + std::to_string(dv) + ")");
  if (q[2].value == 1 && k[2].value == 1)
    return not_supported(c.where + ": cuDNN's backward pass takes no single query over a single key (Sq = Skv = 1)");
  // Measured (H100, cuDNN 9.19, 2026-12-07): with a band, cuDNN's FP8 backward pass wrote wrong dq rows where the
  // query or key count was not a multiple of 64 (causal 40x40, a window at 24x24, padded causal 40x48: dq Incorrect
  // by Kiln's check, everything else Passed), and right ones at 128x128 and, against torch, at 256x256.
  if (sm < 100 && c.node.sdpa.masked() && (q[2].value % 64 != 0 || k[2].value % 64 != 0))
    return not_supported(
        c.where +
        ": cuDNN's FP8 attention backward pass with a band (causal, left_bound, right_bound) needs query "
        "and key counts that are multiples of 64 below SM 10.0 (" +
        c.in_label(0) + " has " + std::to_string(q[2].value) + " queries, " + c.in_label(1) + " " +
        std::to_string(k[2].value) +
        " keys; on an H100 with cuDNN 9.19 its dq failed Kiln's check at 40x40, and passed at "
        "128x128)");
  return Status::ok();
}

// The scale as it applies (the default 1/sqrt(head_dim) written out), so that an explicit default and an
// omitted one sign alike; the band as it applies (causal=1 for a right bound of 0, however given; the other terms
// only where set, so graphs without a band sign as before they existed).
std::string sdpa_signature_attrs(const Graph& g, const Node& n) {
  const double head_dim = static_cast<double>(g.tensors[n.inputs[0]].dims[3].value);
  const double scale = n.sdpa.attn_scale ? *n.sdpa.attn_scale : 1.0 / std::sqrt(head_dim);
  const std::optional<int64_t> right = n.sdpa.effective_right_bound();
  std::string s = std::string(" causal=") + (right == 0 ? "1" : "0") + " attn_scale=" + canonical_number(scale);
  if (right && *right > 0) s += " right_bound=" + std::to_string(*right);
  if (n.sdpa.left_bound) s += " left_bound=" + std::to_string(*n.sdpa.left_bound);
  if (n.sdpa.alignment == DiagonalAlignment::kBottomRight) s += " alignment=bottom_right";
  if (n.sdpa.padding) s += " padding=1";
  if (n.sdpa.paged) s += " paged=1";
  if (n.sdpa.ragged) s += " ragged=1";
  // As the float cuDNN takes: probabilities one float holds sign alike.
  if (n.sdpa.dropout > 0) s += " dropout=" + canonical_number(static_cast<float>(n.sdpa.dropout));
  return s;  // sdpa_fp8's scales are data (tensors): its op name and dtypes sign it
}

// q [B, H, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv]: per (query, key) pair scored, D
// multiply-accumulates for q.k and Dv for p.v (a backward pass: 3 D + 2 Dv). With a band, query i scores the keys j with
// diagonal - left_bound < j <= diagonal + right_bound only (the diagonal i, or i + Skv - Sq bottom-right), as the
// references do.
OpCost sdpa_cost(const Graph& g, const Node& n) {
  const TensorDesc& q = g.tensors[static_cast<size_t>(n.inputs[0])];
  const TensorDesc& k = g.tensors[static_cast<size_t>(n.inputs[1])];
  const TensorDesc& v = g.tensors[static_cast<size_t>(n.inputs[2])];
  OpCost c;
  if (q.dims.size() != 4 || k.dims.size() != 4 || v.dims.size() != 4) return c;
  const double bh = static_cast<double>(q.dims[0].value) * static_cast<double>(q.dims[1].value);
  const int64_t sq = q.dims[2].value, skv = sdpa_keys_extent(g, n);
  double pairs = static_cast<double>(sq) * static_cast<double>(skv);
  if (n.sdpa.masked()) {
    const std::optional<int64_t> right = n.sdpa.effective_right_bound();
    const int64_t shift = n.sdpa.alignment == DiagonalAlignment::kBottomRight ? skv - sq : 0;
    pairs = 0.0;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t diag = i + shift;
      const int64_t first = n.sdpa.left_bound ? std::max<int64_t>(0, diag - *n.sdpa.left_bound + 1) : 0;
      const int64_t last = right ? std::min(skv, diag + *right + 1) : skv;
      pairs += static_cast<double>(std::max<int64_t>(0, last - first));
    }
  }
  const double d = static_cast<double>(q.dims[3].value), dv = static_cast<double>(v.dims[3].value);
  // The backward pass recomputes the scores (D), forms dP = dO V^T and dV = P^T dO (Dv each), dQ = dS K and
  // dK = dS^T Q (D each): 2.5 times the forward's work where D = Dv, as cuDNN Frontend's benchmarks count it.
  c.macs = bh * pairs * (is_attention_backward(n.op) ? 3.0 * d + 2.0 * dv : d + dv);
  c.flops = 2.0 * c.macs;
  return c;
}

}  // namespace

const OpFamily kSdpaFamily = {"sdpa", sdpa_arity, infer_sdpa, sdpa_signature_attrs, sdpa_cost, sdpa_output_arity};

}  // namespace kiln::graph_internal
