// Lowering of the scaled dot-product attention family: Kiln node -> frontend node.
#include <cmath>

#include "lower/ops/lower_ops.h"

namespace kiln::lower_detail {

namespace {

// The band (validate checked the bounds' ranges and what cuDNN refuses): causal is a right bound of 0. Forward and
// backward attributes alike.
template <typename Attrs>
void set_band(Attrs& attrs, const SdpaAttrs& a) {
  if (const std::optional<int64_t> right = a.effective_right_bound())
    attrs.set_diagonal_band_right_bound(static_cast<int>(*right));
  if (a.left_bound) attrs.set_diagonal_band_left_bound(static_cast<int>(*a.left_bound));
  attrs.set_diagonal_alignment(a.alignment == DiagonalAlignment::kBottomRight ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                                                              : fe::DiagonalAlignment_t::TOP_LEFT);
}

// A padding mask: each entry's lengths (validate checked their dims and dtypes). sdpa, its backward and FP8 alike.
template <typename Attrs>
void set_padding(LowerCtx& c, Attrs& attrs, const Node& n) {
  const SdpaInputs x = sdpa_inputs(n);
  if (x.seq_len_q < 0) return;
  attrs.set_padding_mask(true)
      .set_seq_len_q(input_tensor(c, n.inputs[static_cast<size_t>(x.seq_len_q)]))
      .set_seq_len_kv(input_tensor(c, n.inputs[static_cast<size_t>(x.seq_len_kv)]));
}

double scale_of(const LowerCtx& c, const Node& n) {
  const auto& q = c.g.tensors[static_cast<size_t>(n.inputs[0])];
  return n.sdpa.attn_scale.value_or(1.0 / std::sqrt(static_cast<double>(q.dims.back().value)));
}

// dq, dk, dv from q, k, v, o, do, stats (and the bias, the lengths, the offsets): validate checked every dim and
// dtype. Ragged, q and dq go through q's offsets, k and dk k's, v and dv v's, o and do o's; the statistics are
// dense.
Status lower_sdpa_backward(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  auto attrs =
      fe::graph::SDPA_backward_attributes().set_name(n.name).set_attn_scale(static_cast<float>(scale_of(c, n)));
  set_band(attrs, n.sdpa);
  const SdpaInputs x = sdpa_inputs(n);
  if (x.bias >= 0) attrs.set_bias(in(static_cast<size_t>(x.bias)));
  set_padding(c, attrs, n);
  const int offsets[3] = {x.ragged_q, x.ragged_k, x.ragged_v};
  if (x.ragged_o >= 0) {
    for (size_t i = 0; i < 3; ++i) in(i)->set_ragged_offset(in(static_cast<size_t>(offsets[i])));
    for (size_t i : {size_t{3}, size_t{4}}) in(i)->set_ragged_offset(in(static_cast<size_t>(x.ragged_o)));
  }
  if (x.seed >= 0)  // dropout: the forward's mask again, from the same seed and offset (validate checked them)
    attrs.set_dropout(static_cast<float>(n.sdpa.dropout), in(static_cast<size_t>(x.seed)),
                      in(static_cast<size_t>(x.offset)));
  auto outs = c.fg.sdpa_backward(in(0), in(1), in(2), in(3), in(4), in(5), attrs);
  for (size_t o = 0; o < 3; ++o) {
    finish_output(c, n.outputs[o], outs[o]);
    if (x.ragged_o >= 0) outs[o]->set_ragged_offset(in(static_cast<size_t>(offsets[o])));
  }
  return Status::ok();
}

// FP8 attention: q, k, v and the six scales (validate checked them); o, amax_o and, where asked for, the
// statistics. cuDNN's amax of the softmax (Amax_S) stays virtual (dims set, as the frontend asks): nothing reads it,
// and a graph that declares it an output is refused by some of cuDNN's FP8 engines.
Status lower_sdpa_fp8(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const bool stats = n.outputs.size() > kFp8Stats;
  auto attrs = fe::graph::SDPA_fp8_attributes().set_name(n.name).set_generate_stats(stats).set_attn_scale(
      static_cast<float>(scale_of(c, n)));
  set_band(attrs, n.sdpa);
  set_padding(c, attrs, n);
  auto outs = c.fg.sdpa_fp8(in(0), in(1), in(2), in(kFp8DescaleQ), in(kFp8DescaleK), in(kFp8DescaleV), in(kFp8DescaleS),
                            in(kFp8ScaleS), in(kFp8ScaleO), attrs);
  // Amax_S is virtual, but the frontend asks for its dims (1.32: "Tensor 'attn::Amax_S' dims not set").
  if (outs[2]) outs[2]->set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
  finish_output(c, n.outputs[kFp8O], outs[0]);
  finish_output(c, n.outputs[kFp8AmaxO], outs[3]);
  if (stats) finish_output(c, n.outputs[kFp8Stats], outs[1]);
  return Status::ok();
}

// FP8 attention's backward pass: q, k, v, o, do, the statistics and the twelve scales (validate checked them, and
// the lengths); dq, dk, dv and the four amax.
Status lower_sdpa_fp8_backward(LowerCtx& c, const Node& n) {
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  auto attrs =
      fe::graph::SDPA_fp8_backward_attributes().set_name(n.name).set_attn_scale(static_cast<float>(scale_of(c, n)));
  set_band(attrs, n.sdpa);
  set_padding(c, attrs, n);
  auto outs = c.fg.sdpa_fp8_backward(in(0), in(1), in(2), in(3), in(4), in(5), in(kFp8bDescaleQ), in(kFp8bDescaleK),
                                     in(kFp8bDescaleV), in(kFp8bDescaleO), in(kFp8bDescaleDo), in(kFp8bDescaleS),
                                     in(kFp8bDescaleDp), in(kFp8bScaleS), in(kFp8bScaleDq), in(kFp8bScaleDk),
                                     in(kFp8bScaleDv), in(kFp8bScaleDp), attrs);
  // The frontend's order is Kiln's (SdpaFp8BackwardOutput): dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV, Amax_dP.
  for (size_t o = 0; o < outs.size(); ++o) finish_output(c, n.outputs[o], outs[o]);
  return Status::ok();
}

}  // namespace

Status lower_sdpa(LowerCtx& c, const Node& n) {
  if (n.op == OpKind::kSdpaBackward) return lower_sdpa_backward(c, n);
  if (n.op == OpKind::kSdpaFp8) return lower_sdpa_fp8(c, n);
  if (n.op == OpKind::kSdpaFp8Backward) return lower_sdpa_fp8_backward(c, n);
  auto in = [&](size_t i) { return input_tensor(c, n.inputs[i]); };
  const double scale = scale_of(c, n);
  // A second output asks for the softmax statistics (validate checked it: fp32 [B, H, Sq, 1]).
  const bool stats = n.outputs.size() > 1;
  auto attrs =
      fe::graph::SDPA_attributes().set_name(n.name).set_generate_stats(stats).set_attn_scale(static_cast<float>(scale));
  set_band(attrs, n.sdpa);
  const SdpaInputs x = sdpa_inputs(n);  // validate checked their dims and dtypes
  if (x.bias >= 0) attrs.set_bias(in(static_cast<size_t>(x.bias)));
  set_padding(c, attrs, n);
  if (x.page_table_k >= 0) {  // k and v are the caches; Skv = pages * block size, said rather than inferred
    attrs.set_paged_attention_k_table(in(static_cast<size_t>(x.page_table_k)))
        .set_paged_attention_v_table(in(static_cast<size_t>(x.page_table_v)))
        .set_paged_attention_max_seq_len_kv(static_cast<int>(sdpa_keys_extent(c.g, n)));
  }
  if (x.ragged_q >= 0) {  // ragged (THD) q, k, v: each entry's rows from its offset on (validate checked them)
    in(0)->set_ragged_offset(in(static_cast<size_t>(x.ragged_q)));
    if (x.ragged_k >= 0) {  // over paged caches only q and o are ragged
      in(1)->set_ragged_offset(in(static_cast<size_t>(x.ragged_k)));
      in(2)->set_ragged_offset(in(static_cast<size_t>(x.ragged_v)));
    }
  }
  if (x.seed >= 0)  // dropout: cuDNN's Philox mask from the seed and offset tensors (validate checked them)
    attrs.set_dropout(static_cast<float>(n.sdpa.dropout), in(static_cast<size_t>(x.seed)),
                      in(static_cast<size_t>(x.offset)));
  auto outs = c.fg.sdpa(in(0), in(1), in(2), attrs);
  finish_output(c, n.outputs[0], outs[0]);
  if (x.ragged_o >= 0) outs[0]->set_ragged_offset(in(static_cast<size_t>(x.ragged_o)));
  if (stats) finish_output(c, n.outputs[1], outs[1]);
  return Status::ok();
}

}  // namespace kiln::lower_detail
