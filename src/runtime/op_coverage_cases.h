// The per-op coverage cases (docs/numerics.md "Op coverage"): a small graph, built with the C++ builder,
// for every op, mode and dtype Kiln accepts. ops_test.cc (host tier) builds, validates and runs the host
// reference on every case; ops_gpu_test.cc (gpu tier) runs each through run_graph on the GPU, verifies it
// against the host and the device reference and prints one OPCOV line per case.
//
// Which cases must pass on the H200. A case with a core group belongs to a group that must have at least
// one Passed case: conv_fprop/dgrad/wgrad fp16 (the shipped examples' patterns), matmul fp16 and bf16,
// every pointwise mode in fp32 and in fp16 (standalone, or fused behind a matmul when cuDNN has no engine
// for a standalone pointwise graph), every reduction mode over the last axis and over all axes
// (standalone fp32, or fused behind an fp16 matmul as in examples/matmul_amax.json), layer_norm and
// rms_norm in fp16, sdpa in fp16 and bf16, causal and not, and sdpa bf16 with each kind of diagonal band (a
// causal sliding window, left and right bounds, bottom-right causal for chunked prefill and decode, a
// bottom-right window with grouped heads, MQA with a window), and with an additive bias (alone, and with a
// causal window), with a padding mask (alone, causal, bottom-right, with a window, with a bias), and over paged
// K/V caches (decode, a prefill chunk, a window). Every other case may be NotSupported (cuDNN
// has no engine for it on the device; the OPCOV line carries cuDNN's message); these are:
//   - conv with stride/dilation/groups > 1, fp32 (TF32) and bf16 convs, fp8 conv;
//   - matmul fp32 (TF32), batched rank 4, broadcast batch, every fp8 matmul (e4m3, e5m2, mixed; B
//     row-major or K-major: Hopper's FP8 tensor cores want K-contiguous B, and which layouts cuDNN
//     accepts is what these cases find out);
//   - the pointwise modes fused behind a convolution, pointwise in bf16;
//   - reductions of fp16 inputs, norms in bf16 and fp32;
//   - dtype casts through identity: fp32 -> bf16/fp16, fp16 -> fp8 e4m3/e5m2, fp8 -> fp16, fp32 -> int8
//     (plain and after a x100 scale), int8 -> fp32.
// No case may be Incorrect or Failed. A case with `kiln_rejects` is refused by Kiln's own validation (a
// coverage gap Kiln documents, e.g. integer matmul): the host test checks the message, the GPU test
// prints it as NotSupported.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/spec/builder.h"

namespace kiln::opcov {

struct OpCase {
  std::string name;          // "conv_fprop.stride2_dil2"
  std::string dtype;         // the case's data dtype as printed ("fp16", "fp8_e4m3", "fp32->int8")
  std::string core_group;    // non-empty: this group needs at least one Passed case
  bool allow_tf32 = false;   // an fp32 GEMM: cuDNN may use TF32 tensor cores for it
  std::string kiln_rejects;  // non-empty: Kiln's validation refuses the graph with a message containing this
  StatusCode reject_code = StatusCode::kInvalidArgument;  // ... and this code (NotSupported: past cuDNN's limits)
  StatusOr<Graph> graph = internal_error("not built");
};

namespace detail {

inline const char* dt(DataType t) { return dtype_name(t); }

inline OpCase make(std::string name, std::string dtype, std::string group, const GraphBuilder& b) {
  OpCase c;
  c.name = std::move(name);
  c.dtype = std::move(dtype);
  c.core_group = std::move(group);
  c.graph = b.build();
  return c;
}

inline bool is_binary(PointwiseMode m) { return !pointwise_is_unary(m); }

// Standalone pointwise: a [4, 16, 64]; binary modes take b [1, 16, 64] (broadcast over the batch), scale a
// by-value 0.5. Not b [1, 1, 64]: on the H200 with cuDNN 9.19 every engine configuration of a standalone
// pointwise graph that broadcasts over two dims of extent > 1 writes wrong or no values (the numerics gate
// rejects them all; see tune_gpu_test.cc, CudnnDefect).

inline GraphBuilder pointwise_graph(PointwiseMode m, DataType io) {
  GraphBuilder b(std::string("pw_") + pointwise_mode_name(m));
  b.io_dtype(io);
  TensorRef a = b.tensor("a", {4, 16, 64});
  TensorRef y;
  if (m == PointwiseMode::kScale) {
    y = b.pointwise("pw", m, a, b.scalar("s", 0.5, DataType::kFloat32), "y");
  } else if (is_binary(m)) {
    y = b.pointwise("pw", m, a, b.tensor("b", {1, 16, 64}), "y");
  } else {
    y = b.pointwise("pw", m, a, {}, "y");
  }
  b.output(y);
  return b;
}

// matmul [1, 32, 32] x [1, 32, 64] -> mode -> y, inputs and output in `io`, fp32 intermediates.
inline GraphBuilder matmul_pointwise_graph(PointwiseMode m, DataType io) {
  GraphBuilder b(std::string("mm_") + pointwise_mode_name(m));
  b.io_dtype(io);
  TensorRef mm = b.matmul("mm", b.tensor("a", {1, 32, 32}), b.tensor("w", {1, 32, 64}));
  TensorRef y;
  if (m == PointwiseMode::kScale) {
    y = b.pointwise("pw", m, mm, b.scalar("s", 0.5, DataType::kFloat32), "y");
  } else if (is_binary(m)) {
    y = b.pointwise("pw", m, mm, b.tensor("b", {1, 1, 64}), "y");
  } else {
    y = b.pointwise("pw", m, mm, {}, "y");
  }
  b.output(y);
  return b;
}

// conv_fprop fp16 NHWC [2, 16, 8, 8] * [32, 16, 3, 3] pad 1 -> mode -> y.
inline GraphBuilder conv_pointwise_graph(PointwiseMode m) {
  GraphBuilder b(std::string("conv_") + pointwise_mode_name(m));
  b.io_dtype(DataType::kFloat16);
  TensorRef x = b.tensor("x", {2, 16, 8, 8}, Layout::kNHWC);
  TensorRef w = b.tensor("w", {32, 16, 3, 3}, Layout::kNHWC);
  TensorRef conv = b.conv_fprop("conv", x, w, ConvOptions().padding({1, 1}));
  TensorRef y;
  if (m == PointwiseMode::kScale) {
    y = b.pointwise("pw", m, conv, b.scalar("s", 0.5, DataType::kFloat32), "y");
  } else if (is_binary(m)) {
    y = b.pointwise("pw", m, conv, b.tensor("b", {1, 32, 1, 1}, Layout::kNHWC), "y");
  } else {
    y = b.pointwise("pw", m, conv, {}, "y");
  }
  b.set_layout(y, Layout::kNHWC);
  b.output(y);
  return b;
}

struct ConvCase {
  const char* name;
  int64_t n, c, k, hw, f, pad, stride, dil, groups;
};

inline int64_t conv_out(const ConvCase& s) { return (s.hw + 2 * s.pad - s.dil * (s.f - 1) - 1) / s.stride + 1; }

// One convolution: `op` 0 fprop, 1 dgrad, 2 wgrad; NHWC; dx/dw declared (not unique with stride > 1).
inline GraphBuilder conv_graph(int op, const ConvCase& s, DataType io, DataType out) {
  const char* ops[] = {"conv_fprop", "conv_dgrad", "conv_wgrad"};
  GraphBuilder b(std::string(ops[op]) + "_" + s.name);
  b.io_dtype(io);
  const int64_t o = conv_out(s);
  ConvOptions opt =
      ConvOptions().padding({s.pad, s.pad}).stride({s.stride, s.stride}).dilation({s.dil, s.dil}).groups(s.groups);
  TensorRef y;
  if (op == 0) {
    TensorRef x = b.tensor("x", {s.n, s.c, s.hw, s.hw}, Layout::kNHWC);
    TensorRef w = b.tensor("w", {s.k, s.c / s.groups, s.f, s.f}, Layout::kNHWC);
    y = b.conv_fprop("conv", x, w, opt, "y");
  } else if (op == 1) {
    TensorRef dy = b.tensor("dy", {s.n, s.k, o, o}, Layout::kNHWC);
    TensorRef w = b.tensor("w", {s.k, s.c / s.groups, s.f, s.f}, Layout::kNHWC);
    b.tensor("y", {s.n, s.c, s.hw, s.hw}, Layout::kNHWC);
    y = b.conv_dgrad("conv", dy, w, opt, "y");
  } else {
    TensorRef x = b.tensor("x", {s.n, s.c, s.hw, s.hw}, Layout::kNHWC);
    TensorRef dy = b.tensor("dy", {s.n, s.k, o, o}, Layout::kNHWC);
    b.tensor("y", {s.k, s.c / s.groups, s.f, s.f}, Layout::kNHWC);
    y = b.conv_wgrad("conv", x, dy, opt, "y");
  }
  b.set_layout(y, Layout::kNHWC);
  if (out != io) b.set_dtype(y, out);
  b.output(y);
  return b;
}

// matmul a [batch_a..., M, K] x b [batch_b..., K, N]; `b_strides` empty for row-major.
inline GraphBuilder matmul_graph(const std::string& name, DataType a_dt, DataType b_dt, DataType out,
                                 std::vector<DimArg> a_dims, std::vector<DimArg> b_dims,
                                 std::vector<int64_t> b_strides = {}) {
  GraphBuilder b("matmul_" + name);
  b.io_dtype(out);
  TensorRef a = b.tensor("a", a_dims, Layout::kRowMajor, a_dt);
  TensorRef w = b_strides.empty() ? b.tensor("b", b_dims, Layout::kRowMajor, b_dt)
                                  : b.tensor_strided("b", b_dims, std::move(b_strides), b_dt);
  b.output(b.matmul("mm", a, w, "y"));
  return b;
}

// Reduction of x [4, 16, 64] over the last axis or every axis; `fused` puts it behind an fp16 matmul
// [1, 64, 32] x [1, 32, 64] whose output is also read (as examples/matmul_amax.json).
inline GraphBuilder reduction_graph(ReductionMode m, bool all_axes, bool fused, DataType in) {
  GraphBuilder b(std::string("reduce_") + reduction_mode_name(m) + (all_axes ? "_all" : "_last") +
                 (fused ? "_mm" : ""));
  b.io_dtype(in);
  TensorRef x;
  if (fused) {
    x = b.matmul("mm", b.tensor("a", {1, 64, 32}), b.tensor("w", {1, 32, 64}), "mm_out");
    b.output(x);
  } else {
    x = b.tensor("x", {4, 16, 64});
  }
  std::vector<int> axes = all_axes ? std::vector<int>{0, 1, 2} : std::vector<int>{2};
  TensorRef r = b.reduce("red", m, x, axes, "r");
  b.set_dtype(r, DataType::kFloat32);
  b.output(r);
  return b;
}

inline GraphBuilder norm_graph(bool layer, DataType io) {
  GraphBuilder b(layer ? "layer_norm" : "rms_norm");
  b.io_dtype(io);
  TensorRef x = b.tensor("x", {16, 64, 1, 1});
  TensorRef scale = b.tensor("scale", {1, 64, 1, 1}, Layout::kRowMajor, DataType::kFloat32);
  TensorRef y = layer ? b.layer_norm("norm", x, scale,
                                     b.tensor("bias", {1, 64, 1, 1}, Layout::kRowMajor, DataType::kFloat32), 1e-5, "y")
                      : b.rms_norm("norm", x, scale, 1e-5, "y");
  b.output(y);
  return b;
}

inline GraphBuilder sdpa_graph(bool causal, DataType io) {
  GraphBuilder b(causal ? "sdpa_causal" : "sdpa");
  b.io_dtype(io);
  TensorRef q = b.tensor("q", {1, 2, 32, 64}), k = b.tensor("k", {1, 2, 32, 64}), v = b.tensor("v", {1, 2, 32, 64});
  b.output(b.sdpa("attn", q, k, v, causal, std::nullopt, "o"));
  return b;
}

// SDPA with a diagonal band (kiln/graph/graph.h SdpaAttrs): sq queries over skv keys, h query heads over hk key
// heads, head dim 64.
// With `bias_dims` ({} for none), an additive bias of those dims; with a.padding, a padding mask's lengths; with
// `stats`, the softmax statistics as a second output "lse".
inline GraphBuilder sdpa_band_graph(const std::string& name, const SdpaAttrs& a, int64_t sq, int64_t skv, int64_t h = 2,
                                    int64_t hk = 2, std::vector<int64_t> bias_dims = {}, bool stats = false) {
  GraphBuilder b(name);
  b.io_dtype(DataType::kBFloat16);
  TensorRef q = b.tensor("q", {2, h, sq, 64}), k = b.tensor("k", {2, hk, skv, 64}), v = b.tensor("v", {2, hk, skv, 64});
  std::optional<TensorRef> bias, lq, lkv;
  if (!bias_dims.empty()) bias = b.tensor("bias", std::vector<DimArg>(bias_dims.begin(), bias_dims.end()));
  if (a.padding) {
    lq = b.tensor("seq_len_q", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
    lkv = b.tensor("seq_len_kv", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
  }
  TensorRef o = b.sdpa("attn", q, k, v, a, "o", bias, lq, lkv);
  b.output(o);
  if (stats) b.output(b.sdpa_stats(o, "lse"));
  return b;
}
// Paged K/V caches of `blocks` blocks of `block` keys, page tables of `pages` pages (Skv = pages * block), with a
// padding mask (lengths drawn per entry) and the band `a`; GQA 4/2; with `stats` the statistics "lse".
inline GraphBuilder sdpa_paged_graph(const std::string& name, SdpaAttrs a, int64_t sq, int64_t blocks, int64_t block,
                                     int64_t pages, bool stats = false) {
  GraphBuilder b(name);
  b.io_dtype(DataType::kBFloat16);
  a.padding = a.paged = true;
  TensorRef q = b.tensor("q", {2, 4, sq, 64}), k = b.tensor("k_cache", {blocks, 2, block, 64}),
            v = b.tensor("v_cache", {blocks, 2, block, 64});
  const auto i32 = [&](const char* n, std::vector<DimArg> d) {
    return b.tensor(n, d, Layout::kRowMajor, DataType::kInt32);
  };
  TensorRef o =
      b.sdpa("attn", q, k, v, a, "o", std::nullopt, i32("seq_len_q", {2, 1, 1, 1}), i32("seq_len_kv", {2, 1, 1, 1}),
             i32("page_table_k", {2, 1, pages, 1}), i32("page_table_v", {2, 1, pages, 1}));
  b.output(o);
  if (stats) b.output(b.sdpa_stats(o, "lse"));
  return b;
}
// Ragged (THD) q, k, v and o with a padding mask and the band `a`: q [2, h, sq, 64], k and v [2, hk, skv, 64], each
// packed token-major, and the four offsets int32 [3, 1, 1, 1] (drawn from the lengths, with gaps between the
// entries: reference_common.h ragged_offsets); with `shared_qo` q and o share one offset tensor (one token width);
// with `bias_dims` a bias (dense, by each entry's own query and key positions), with `stats` the statistics "lse".
inline GraphBuilder sdpa_ragged_graph(const std::string& name, SdpaAttrs a, int64_t sq, int64_t skv, int64_t h = 2,
                                      int64_t hk = 2, bool shared_qo = false, std::vector<int64_t> bias_dims = {},
                                      bool stats = false) {
  GraphBuilder b(name);
  b.io_dtype(DataType::kBFloat16);
  a.padding = a.ragged = true;
  const auto thd = [&](const char* n, int64_t heads, int64_t rows) {
    return b.tensor_strided(n, {2, heads, rows, 64}, {rows * heads * 64, 64, heads * 64, 1});
  };
  const auto i32 = [&](const char* n, std::vector<DimArg> d) {
    return b.tensor(n, d, Layout::kRowMajor, DataType::kInt32);
  };
  TensorRef q = thd("q", h, sq), k = thd("k", hk, skv), v = thd("v", hk, skv);
  const TensorRef rq = i32("ragged_q", {3, 1, 1, 1});
  const GraphBuilder::SdpaRaggedOffsets offsets{rq, i32("ragged_k", {3, 1, 1, 1}), i32("ragged_v", {3, 1, 1, 1}),
                                                shared_qo ? rq : i32("ragged_o", {3, 1, 1, 1})};
  std::optional<TensorRef> bias;
  if (!bias_dims.empty()) bias = b.tensor("bias", std::vector<DimArg>(bias_dims.begin(), bias_dims.end()));
  const TensorRef o = b.sdpa("attn", q, k, v, a, "o", bias, i32("seq_len_q", {2, 1, 1, 1}),
                             i32("seq_len_kv", {2, 1, 1, 1}), std::nullopt, std::nullopt, offsets);
  b.output(o);
  if (stats) b.output(b.sdpa_stats(o, "lse"));
  return b;
}
// A chunked prefill over paged caches: ragged q and o ([2, 4, sq, 64] token-major, their two offsets) over K/V
// caches of `blocks` blocks of `block` keys (GQA 4/2) through page tables of `pages` pages, with a padding mask and
// the band `a`; with `stats` the statistics "lse".
inline GraphBuilder sdpa_ragged_paged_graph(const std::string& name, SdpaAttrs a, int64_t sq, int64_t blocks,
                                            int64_t block, int64_t pages, bool stats = false) {
  GraphBuilder b(name);
  b.io_dtype(DataType::kBFloat16);
  a.padding = a.paged = a.ragged = true;
  const auto i32 = [&](const char* n, std::vector<DimArg> d) {
    return b.tensor(n, d, Layout::kRowMajor, DataType::kInt32);
  };
  TensorRef q = b.tensor_strided("q", {2, 4, sq, 64}, {sq * 4 * 64, 64, 4 * 64, 1});
  TensorRef k = b.tensor("k_cache", {blocks, 2, block, 64}), v = b.tensor("v_cache", {blocks, 2, block, 64});
  const GraphBuilder::SdpaRaggedOffsets offsets{i32("ragged_q", {3, 1, 1, 1}), std::nullopt, std::nullopt,
                                                i32("ragged_o", {3, 1, 1, 1})};
  TensorRef o =
      b.sdpa("attn", q, k, v, a, "o", std::nullopt, i32("seq_len_q", {2, 1, 1, 1}), i32("seq_len_kv", {2, 1, 1, 1}),
             i32("page_table_k", {2, 1, pages, 1}), i32("page_table_v", {2, 1, pages, 1}), offsets);
  b.output(o);
  if (stats) b.output(b.sdpa_stats(o, "lse"));
  return b;
}
// The backward pass of an sdpa with the band `a`: q [2, h, sq, 64], k and v [2, hk, skv, 64], o and do as q, the
// statistics fp32 [2, h, sq, 1] (drawn near a full row's log-sum-exp), with `bias_dims` a bias, and with a.padding
// a padding mask's lengths; dq, dk, dv.
inline GraphBuilder sdpa_backward_graph(const std::string& name, const SdpaAttrs& a, int64_t sq, int64_t skv,
                                        int64_t h = 2, int64_t hk = 2, std::vector<int64_t> bias_dims = {},
                                        DataType io = DataType::kBFloat16, double dropout = 0) {
  GraphBuilder b(name);
  b.io_dtype(io);
  TensorRef q = b.tensor("q", {2, h, sq, 64}), k = b.tensor("k", {2, hk, skv, 64}), v = b.tensor("v", {2, hk, skv, 64});
  TensorRef o = b.tensor("o", {2, h, sq, 64}), dout = b.tensor("do", {2, h, sq, 64});
  TensorRef stats = b.tensor("stats", {2, h, sq, 1}, Layout::kRowMajor, DataType::kFloat32);
  std::optional<TensorRef> bias, lq, lkv;
  if (!bias_dims.empty()) bias = b.tensor("bias", std::vector<DimArg>(bias_dims.begin(), bias_dims.end()));
  if (a.padding) {
    lq = b.tensor("seq_len_q", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
    lkv = b.tensor("seq_len_kv", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
  }
  std::optional<GraphBuilder::SdpaDropout> drop;  // with `dropout` over 0, its seed and offset int64 [1, 1, 1, 1]
  if (dropout > 0)
    drop = GraphBuilder::SdpaDropout{dropout, b.tensor("seed", {1, 1, 1, 1}, Layout::kRowMajor, DataType::kInt64),
                                     b.tensor("offset", {1, 1, 1, 1}, Layout::kRowMajor, DataType::kInt64)};
  const GraphBuilder::SdpaGrads g =
      b.sdpa_backward("grad", q, k, v, o, dout, stats, a, bias, lq, lkv, std::nullopt, drop);
  b.output(g.dq).output(g.dk).output(g.dv);
  return b;
}
// The backward pass over ragged (THD) tensors with a padding mask and the band `a`: q, o, do [2, h, sq, 64] and k,
// v [2, hk, skv, 64] packed token-major through the four offsets int32 [3, 1, 1, 1] (o's also do's; drawn from the
// lengths with gaps between the entries), the statistics dense fp32 [2, h, sq, 1]; dq, dk, dv packed as q, k, v
// (undeclared: token-major), their unowned rows unwritten.
inline GraphBuilder sdpa_backward_ragged_graph(const std::string& name, SdpaAttrs a, int64_t sq, int64_t skv,
                                               int64_t h = 2, int64_t hk = 2) {
  GraphBuilder b(name);
  b.io_dtype(DataType::kBFloat16);
  a.padding = a.ragged = true;
  const auto thd = [&](const char* n, int64_t heads, int64_t rows) {
    return b.tensor_strided(n, {2, heads, rows, 64}, {rows * heads * 64, 64, heads * 64, 1});
  };
  const auto i32 = [&](const char* n, std::vector<DimArg> d) {
    return b.tensor(n, d, Layout::kRowMajor, DataType::kInt32);
  };
  TensorRef q = thd("q", h, sq), k = thd("k", hk, skv), v = thd("v", hk, skv), o = thd("o", h, sq),
            dout = thd("do", h, sq);
  TensorRef stats = b.tensor("stats", {2, h, sq, 1}, Layout::kRowMajor, DataType::kFloat32);
  const GraphBuilder::SdpaRaggedOffsets offsets{i32("ragged_q", {3, 1, 1, 1}), i32("ragged_k", {3, 1, 1, 1}),
                                                i32("ragged_v", {3, 1, 1, 1}), i32("ragged_o", {3, 1, 1, 1})};
  const GraphBuilder::SdpaGrads g =
      b.sdpa_backward("grad", q, k, v, o, dout, stats, a, std::nullopt, i32("seq_len_q", {2, 1, 1, 1}),
                      i32("seq_len_kv", {2, 1, 1, 1}), offsets);
  b.output(g.dq).output(g.dk).output(g.dv);
  return b;
}
// FP8 attention (sdpa_fp8) with the band `a`: q [2, h, sq, d], k and v [2, hk, skv, d] fp8_e4m3, the six scales
// fp32 [1, 1, 1, 1] (drawn as delayed scaling sets them: reference_common.cc); o fp8_e4m3, amax_o, and with
// `stats` the statistics "lse".
inline GraphBuilder sdpa_fp8_graph(const std::string& name, const SdpaAttrs& a, int64_t sq, int64_t skv, int64_t h = 2,
                                   int64_t hk = 2, bool stats = false, int64_t d = 64) {
  std::optional<TensorRef> lq, lkv;
  GraphBuilder b(name);
  b.io_dtype(DataType::kFp8E4M3);
  TensorRef q = b.tensor("q", {2, h, sq, d}), k = b.tensor("k", {2, hk, skv, d}), v = b.tensor("v", {2, hk, skv, d});
  const auto scale = [&](const char* n) { return b.tensor(n, {1, 1, 1, 1}, Layout::kRowMajor, DataType::kFloat32); };
  const GraphBuilder::SdpaFp8Scales sc{scale("descale_q"), scale("descale_k"), scale("descale_v"),
                                       scale("descale_s"), scale("scale_s"),   scale("scale_o")};
  if (a.padding) {
    lq = b.tensor("seq_len_q", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
    lkv = b.tensor("seq_len_kv", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
  }
  const GraphBuilder::SdpaFp8Out out = b.sdpa_fp8("attn", q, k, v, sc, a, lq, lkv);
  b.output(out.o).output(out.amax_o);
  if (stats) b.output(b.sdpa_stats(out.o, "lse"));
  return b;
}
// FP8 attention's backward pass (sdpa_fp8_backward) with the band `a`: q, o, do [2, h, sq, d], k and v [2, hk, skv,
// d] fp8_e4m3, the statistics fp32 [2, h, sq, 1], the twelve scales fp32 [1, 1, 1, 1] (drawn as reference_common.cc
// says); dq, dk, dv fp8_e4m3 and the four amax.
inline GraphBuilder sdpa_fp8_backward_graph(const std::string& name, const SdpaAttrs& a, int64_t sq, int64_t skv,
                                            int64_t h = 2, int64_t hk = 2, int64_t d = 128) {
  std::optional<TensorRef> lq, lkv;
  GraphBuilder b(name);
  b.io_dtype(DataType::kFp8E4M3);
  TensorRef q = b.tensor("q", {2, h, sq, d}), k = b.tensor("k", {2, hk, skv, d}), v = b.tensor("v", {2, hk, skv, d});
  TensorRef o = b.tensor("o", {2, h, sq, d}), dout = b.tensor("do", {2, h, sq, d});
  TensorRef stats = b.tensor("stats", {2, h, sq, 1}, Layout::kRowMajor, DataType::kFloat32);
  const auto scale = [&](const char* n) { return b.tensor(n, {1, 1, 1, 1}, Layout::kRowMajor, DataType::kFloat32); };
  const GraphBuilder::SdpaFp8BackwardScales sc{scale("descale_q"),  scale("descale_k"),  scale("descale_v"),
                                               scale("descale_o"),  scale("descale_do"), scale("descale_s"),
                                               scale("descale_dp"), scale("scale_s"),    scale("scale_dq"),
                                               scale("scale_dk"),   scale("scale_dv"),   scale("scale_dp")};
  if (a.padding) {
    lq = b.tensor("seq_len_q", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
    lkv = b.tensor("seq_len_kv", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
  }
  const GraphBuilder::SdpaFp8Grads g = b.sdpa_fp8_backward("grad", q, k, v, o, dout, stats, sc, a, lq, lkv);
  for (TensorRef t : {g.dq, g.dk, g.dv, g.amax_dq, g.amax_dk, g.amax_dv, g.amax_dp}) b.output(t);
  return b;
}
// Dropout (training; kiln/graph/graph.h SdpaAttrs::dropout) with the band `a` (causal or none): q [2, h, sq, 64], k
// and v [2, hk, skv, 64], seed and offset int64 [1, 1, 1, 1]; with a.padding the lengths, with `stats` "lse". Kiln
// checks it by probing the mask the plan draws (kiln/validate/dropout_probe.h), against the device reference.
inline GraphBuilder sdpa_dropout_graph(const std::string& name, const SdpaAttrs& a, double p, int64_t sq, int64_t skv,
                                       int64_t h = 2, int64_t hk = 2, bool stats = false,
                                       DataType io = DataType::kBFloat16) {
  GraphBuilder b(name);
  b.io_dtype(io);
  TensorRef q = b.tensor("q", {2, h, sq, 64}), k = b.tensor("k", {2, hk, skv, 64}), v = b.tensor("v", {2, hk, skv, 64});
  std::optional<TensorRef> lq, lkv;
  if (a.padding) {
    lq = b.tensor("seq_len_q", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
    lkv = b.tensor("seq_len_kv", {2, 1, 1, 1}, Layout::kRowMajor, DataType::kInt32);
  }
  const auto i64 = [&](const char* n) { return b.tensor(n, {1, 1, 1, 1}, Layout::kRowMajor, DataType::kInt64); };
  const GraphBuilder::SdpaDropout drop{p, i64("seed"), i64("offset")};
  TensorRef o = b.sdpa("attn", q, k, v, a, "o", std::nullopt, lq, lkv, std::nullopt, std::nullopt, std::nullopt, drop);
  b.output(o);
  if (stats) b.output(b.sdpa_stats(o, "lse"));
  return b;
}
inline SdpaAttrs padded(SdpaAttrs a) {
  a.padding = true;
  return a;
}
inline SdpaAttrs band(bool causal, std::optional<int64_t> left, std::optional<int64_t> right = std::nullopt,
                      bool bottom_right = false) {
  SdpaAttrs a;
  a.causal = causal;
  a.left_bound = left;
  a.right_bound = right;
  a.alignment = bottom_right ? DiagonalAlignment::kBottomRight : DiagonalAlignment::kTopLeft;
  return a;
}

// y = identity(x) with x in `from`, y in `to` (a cast); with `scale` first y = identity(x * scale).
inline GraphBuilder cast_graph(DataType from, DataType to, double scale = 0) {
  GraphBuilder b(std::string("cast_") + dt(from) + "_" + dt(to));
  b.io_dtype(from);
  TensorRef x = b.tensor("x", {4, 16, 64});
  if (scale != 0) x = b.scale("scale", x, b.scalar("s", scale, DataType::kFloat32), "scaled");
  TensorRef y = b.pointwise("cast", PointwiseMode::kIdentity, x, {}, "y");
  b.set_dtype(y, to);
  b.output(y);
  return b;
}

// The attention backward pass and FP8 attention (each against both references), and FP8's refusals.
inline void sdpa_backward_and_fp8_cases(std::vector<OpCase>& cases) {
  auto add = [&](std::string name, std::string dtype, std::string group, const GraphBuilder& b) {
    cases.push_back(make(std::move(name), std::move(dtype), std::move(group), b));
  };
  // The backward pass (dq, dk, dv from q, k, v, o, do and the statistics): plain fp16, causal, a window over grouped
  // heads, a bias, and bottom-right causal over more keys than queries.
  add("sdpa_backward", "fp16", "sdpa_backward fp16",
      sdpa_backward_graph("sdpa_bwd", band(false, std::nullopt), 32, 32, 2, 2, {}, DataType::kFloat16));
  add("sdpa_backward.causal", "bf16", "sdpa_backward causal",
      sdpa_backward_graph("sdpa_bwd_causal", band(true, std::nullopt), 40, 40));
  add("sdpa_backward.window_gqa", "bf16", "sdpa_backward window gqa",
      sdpa_backward_graph("sdpa_bwd_window", band(true, 8), 40, 40, 4, 2));
  add("sdpa_backward.bias", "bf16", "sdpa_backward bias",
      sdpa_backward_graph("sdpa_bwd_bias", band(false, std::nullopt), 24, 40, 2, 2, {1, 2, 24, 40}));
  add("sdpa_backward.causal_bottom_right", "bf16", "sdpa_backward causal bottom-right",
      sdpa_backward_graph("sdpa_bwd_br", band(true, std::nullopt, std::nullopt, true), 16, 72));
  // With a padding mask: a padded query row's dq and a padded key's dk, dv are 0.
  add("sdpa_backward.padding", "bf16", "sdpa_backward padding",
      sdpa_backward_graph("sdpa_bwd_pad", padded(band(false, std::nullopt)), 24, 40));
  add("sdpa_backward.padding_causal_gqa", "bf16", "sdpa_backward padding causal gqa",
      sdpa_backward_graph("sdpa_bwd_pad_causal", padded(band(true, std::nullopt)), 40, 40, 4, 2));
  add("sdpa_backward.padding_bottom_right", "bf16", "sdpa_backward padding bottom-right",
      sdpa_backward_graph("sdpa_bwd_pad_br", padded(band(true, std::nullopt, std::nullopt, true)), 16, 48));
  // Over ragged (THD) tensors: each entry's own rows read and written through the offsets, the gaps unwritten.
  add("sdpa_backward.ragged", "bf16", "sdpa_backward ragged",
      sdpa_backward_ragged_graph("sdpa_bwd_ragged", band(false, std::nullopt), 24, 40));
  add("sdpa_backward.ragged_causal_gqa", "bf16", "sdpa_backward ragged causal gqa",
      sdpa_backward_ragged_graph("sdpa_bwd_ragged_causal", band(true, std::nullopt), 40, 40, 4, 2));
  add("sdpa_backward.ragged_bottom_right", "bf16", "sdpa_backward ragged bottom-right",
      sdpa_backward_ragged_graph("sdpa_bwd_ragged_br", band(true, std::nullopt, std::nullopt, true), 16, 48));
  // FP8 attention (o, amax_o; P rounded to fp8 inside): plain, causal, a window over grouped heads with head dim
  // 128, and with the statistics.
  add("sdpa_fp8", "fp8_e4m3", "sdpa_fp8", sdpa_fp8_graph("sdpa_fp8", band(false, std::nullopt), 32, 48));
  add("sdpa_fp8.causal", "fp8_e4m3", "sdpa_fp8 causal",
      sdpa_fp8_graph("sdpa_fp8_causal", band(true, std::nullopt), 40, 40));
  add("sdpa_fp8.window_gqa_d128", "fp8_e4m3", "sdpa_fp8 window gqa d128",
      sdpa_fp8_graph("sdpa_fp8_window", band(true, 8), 24, 24, 4, 2, false, 128));
  add("sdpa_fp8.stats", "fp8_e4m3", "sdpa_fp8 stats",
      sdpa_fp8_graph("sdpa_fp8_stats", band(false, std::nullopt), 32, 32, 2, 2, true));
  // With a padding mask: a padded row's o is 0 (amax_o over the valid rows); its statistics are refused.
  add("sdpa_fp8.padding", "fp8_e4m3", "sdpa_fp8 padding",
      sdpa_fp8_graph("sdpa_fp8_pad", padded(band(false, std::nullopt)), 32, 48));
  add("sdpa_fp8.padding_causal_gqa", "fp8_e4m3", "sdpa_fp8 padding causal gqa",
      sdpa_fp8_graph("sdpa_fp8_pad_causal", padded(band(true, std::nullopt)), 40, 40, 4, 2));
  // FP8 attention's backward pass (P and dS rounded to fp8 inside; head dims of 128, what cuDNN takes on SM 9.x):
  // plain, causal over grouped heads, a window, and with a padding mask.
  add("sdpa_fp8_backward", "fp8_e4m3", "sdpa_fp8_backward",
      sdpa_fp8_backward_graph("sdpa_fp8_bwd", band(false, std::nullopt), 32, 48));
  // With a band, lengths that are multiples of 64 (cuDNN 9.19's dq was wrong at others on an H100: below).
  add("sdpa_fp8_backward.causal_gqa", "fp8_e4m3", "sdpa_fp8_backward causal gqa",
      sdpa_fp8_backward_graph("sdpa_fp8_bwd_causal", band(true, std::nullopt), 64, 64, 4, 2));
  add("sdpa_fp8_backward.window", "fp8_e4m3", "sdpa_fp8_backward window",
      sdpa_fp8_backward_graph("sdpa_fp8_bwd_window", band(true, 8), 64, 64));
  add("sdpa_fp8_backward.padding_causal", "fp8_e4m3", "sdpa_fp8_backward padding causal",
      sdpa_fp8_backward_graph("sdpa_fp8_bwd_pad", padded(band(true, std::nullopt)), 64, 128));
  // Dropout: each its own core group. A window is past cuDNN's limits with dropout. The backward pass: grouped heads,
  // causal; padded.
  add("sdpa_backward.dropout_causal_gqa", "bf16", "sdpa_backward dropout causal gqa",
      sdpa_backward_graph("sdpa_bwd_drop", band(true, std::nullopt), 96, 96, 4, 2, {}, DataType::kBFloat16, 0.2));
  add("sdpa_backward.dropout_padding", "bf16", "sdpa_backward dropout padding",
      sdpa_backward_graph("sdpa_bwd_drop_pad", padded(band(false, std::nullopt)), 48, 80, 2, 2, {}, DataType::kBFloat16,
                          0.3));
  add("sdpa.dropout", "fp16", "sdpa dropout fp16",
      sdpa_dropout_graph("sdpa_drop", band(false, std::nullopt), 0.1, 64, 64, 2, 2, false, DataType::kFloat16));
  add("sdpa.dropout_causal_gqa", "bf16", "sdpa dropout causal gqa",
      sdpa_dropout_graph("sdpa_drop_causal", band(true, std::nullopt), 0.25, 96, 96, 4, 2));
  add("sdpa.dropout_padding_stats", "bf16", "sdpa dropout padding stats",
      sdpa_dropout_graph("sdpa_drop_pad", padded(band(true, std::nullopt)), 0.5, 48, 80, 2, 2, true));
  {
    OpCase c =
        make("sdpa.dropout_window", "bf16", "", sdpa_dropout_graph("sdpa_drop_window", band(true, 8), 0.1, 40, 40));
    c.kiln_rejects = "cuDNN takes dropout with no sliding window";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = make("sdpa_fp8.causal_bottom_right", "fp8_e4m3", "",
                    sdpa_fp8_graph("sdpa_fp8_br", band(true, std::nullopt, std::nullopt, true), 16, 48));
    c.kiln_rejects = "cuDNN's FP8 attention aligns the diagonal bottom-right only on SM 10.x";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = make("sdpa_fp8_backward.d64", "fp8_e4m3", "",
                    sdpa_fp8_backward_graph("sdpa_fp8_bwd_d64", band(false, std::nullopt), 32, 32, 2, 2, 64));
    c.kiln_rejects = "cuDNN's FP8 attention backward pass takes head dims of 128 only";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = make("sdpa_fp8_backward.causal_40", "fp8_e4m3", "",
                    sdpa_fp8_backward_graph("sdpa_fp8_bwd_causal_40", band(true, std::nullopt), 40, 40, 4, 2));
    c.kiln_rejects =
        "with a band (causal, left_bound, right_bound) needs query and key counts that are multiples of 64";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = make("sdpa_fp8.padding_stats", "fp8_e4m3", "",
                    sdpa_fp8_graph("sdpa_fp8_pad_stats", padded(band(false, std::nullopt)), 32, 48, 2, 2, true));
    c.kiln_rejects = "the statistics of FP8 attention with a padding mask are not supported";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
}

// sdpa in fp16 and bf16, causal and not, and with each kind of diagonal band.
inline void sdpa_cases(std::vector<OpCase>& cases) {
  using D = DataType;
  auto add = [&](std::string name, std::string dtype, std::string group, const GraphBuilder& b) {
    cases.push_back(make(std::move(name), std::move(dtype), std::move(group), b));
  };
  for (D io : {D::kFloat16, D::kBFloat16})
    for (bool causal : {false, true}) {
      const std::string n = causal ? "sdpa.causal" : "sdpa";
      add(n, dt(io), n + " " + dt(io), sdpa_graph(causal, io));
    }
  // The diagonal band (sliding windows, bottom-right alignment for decode and chunked prefill), bf16: each its own
  // core group, so each must pass against both references.
  add("sdpa.window_causal", "bf16", "sdpa window causal", sdpa_band_graph("sdpa_window_causal", band(true, 8), 40, 40));
  add("sdpa.band_left_right", "bf16", "sdpa band left+right", sdpa_band_graph("sdpa_band", band(false, 8, 4), 40, 40));
  add("sdpa.causal_bottom_right", "bf16", "sdpa causal bottom-right",
      sdpa_band_graph("sdpa_causal_br", band(true, std::nullopt, std::nullopt, true), 16, 72));
  add("sdpa.decode_bottom_right", "bf16", "sdpa decode bottom-right",
      sdpa_band_graph("sdpa_decode", band(true, std::nullopt, std::nullopt, true), 1, 100, 8, 2));
  add("sdpa.window_bottom_right_gqa", "bf16", "sdpa window bottom-right gqa",
      sdpa_band_graph("sdpa_window_br", band(true, 24, std::nullopt, true), 24, 96, 4, 2));
  // Grouped-query down to one key head (MQA) with a window; an additive bias, broadcast over the batch or the heads.
  add("sdpa.mqa_window", "bf16", "sdpa mqa window", sdpa_band_graph("sdpa_mqa", band(true, 16), 40, 40, 4, 1));
  add("sdpa.bias", "bf16", "sdpa bias",
      sdpa_band_graph("sdpa_bias", band(false, std::nullopt), 24, 40, 2, 2, {1, 2, 24, 40}));
  add("sdpa.bias_window_causal", "bf16", "sdpa bias window causal",
      sdpa_band_graph("sdpa_bias_window", band(true, 8), 40, 40, 4, 2, {2, 1, 40, 40}));
  // A padding mask (lengths drawn per batch entry): alone, causal, bottom-right causal (each entry's own last
  // query and key), with a window, with a bias.
  add("sdpa.padding", "bf16", "sdpa padding", sdpa_band_graph("sdpa_pad", padded(band(false, std::nullopt)), 24, 40));
  add("sdpa.padding_causal", "bf16", "sdpa padding causal",
      sdpa_band_graph("sdpa_pad_causal", padded(band(true, std::nullopt)), 40, 40, 4, 2));
  add("sdpa.padding_bottom_right", "bf16", "sdpa padding bottom-right",
      sdpa_band_graph("sdpa_pad_br", padded(band(true, std::nullopt, std::nullopt, true)), 16, 48));
  add("sdpa.padding_window", "bf16", "sdpa padding window",
      sdpa_band_graph("sdpa_pad_window", padded(band(true, 8)), 16, 48));
  add("sdpa.padding_bias", "bf16", "sdpa padding bias",
      sdpa_band_graph("sdpa_pad_bias", padded(band(false, std::nullopt)), 24, 40, 2, 2, {1, 2, 24, 40}));
  // Paged K/V caches (tables drawn over every block: repeats and unused blocks): decode (one query, bottom-right
  // causal), a chunk of a chunked prefill, and a window.
  add("sdpa.paged_decode", "bf16", "sdpa paged decode",
      sdpa_paged_graph("sdpa_paged_decode", band(true, std::nullopt, std::nullopt, true), 1, 12, 16, 5));
  add("sdpa.paged_prefill_chunk", "bf16", "sdpa paged prefill chunk",
      sdpa_paged_graph("sdpa_paged_chunk", band(true, std::nullopt, std::nullopt, true), 16, 9, 8, 6));
  add("sdpa.paged_window", "bf16", "sdpa paged window",
      sdpa_paged_graph("sdpa_paged_window", band(true, 12, std::nullopt, true), 8, 10, 16, 4));
  // The softmax statistics (a second output, fp32 log-sum-exp per query row): plain, causal bottom-right over more
  // keys, and with a bias, a window and grouped heads; each checked against both references.
  add("sdpa.stats", "bf16", "sdpa stats",
      sdpa_band_graph("sdpa_stats", band(false, std::nullopt), 32, 32, 2, 2, {}, true));
  add("sdpa.stats_causal_bottom_right", "bf16", "sdpa stats causal bottom-right",
      sdpa_band_graph("sdpa_stats_br", band(true, std::nullopt, std::nullopt, true), 16, 72, 2, 2, {}, true));
  add("sdpa.stats_bias_window_gqa", "bf16", "sdpa stats bias window gqa",
      sdpa_band_graph("sdpa_stats_bias_window", band(true, 8), 40, 40, 4, 2, {2, 1, 40, 40}, true));
  // Ragged (THD) q, k, v, o: packed entries with gaps between them.
  add("sdpa.ragged", "bf16", "sdpa ragged", sdpa_ragged_graph("sdpa_ragged", band(false, std::nullopt), 24, 40));
  add("sdpa.ragged_causal_gqa", "bf16", "sdpa ragged causal gqa",
      sdpa_ragged_graph("sdpa_ragged_causal", band(true, std::nullopt), 40, 40, 4, 2, true));
  add("sdpa.ragged_bottom_right_window", "bf16", "sdpa ragged bottom-right window",
      sdpa_ragged_graph("sdpa_ragged_br", band(true, 8, std::nullopt, true), 16, 48));
  // Ragged with the statistics (dense [B, H, Sq, 1]: an entry's rows past its length are -infinity, as a padded
  // row's) and with a bias (dense, read at each entry's own query and key positions).
  add("sdpa.ragged_stats_causal_gqa", "bf16", "sdpa ragged stats",
      sdpa_ragged_graph("sdpa_ragged_stats", band(true, std::nullopt), 40, 40, 4, 2, false, {}, true));
  add("sdpa.ragged_bias", "bf16", "sdpa ragged bias",
      sdpa_ragged_graph("sdpa_ragged_bias", band(false, std::nullopt), 24, 40, 2, 2, false, {2, 1, 24, 40}));
  // A chunked prefill over paged caches (ragged q and o, bottom-right causal), with the statistics.
  add("sdpa.ragged_paged_prefill", "bf16", "sdpa ragged paged prefill",
      sdpa_ragged_paged_graph("sdpa_ragged_paged", band(true, std::nullopt, std::nullopt, true), 16, 9, 8, 6, true));
  // Statistics with a padding mask (a padded query row's: -infinity) and over paged caches.
  add("sdpa.stats_padding", "bf16", "sdpa stats padding",
      sdpa_band_graph("sdpa_stats_pad", padded(band(false, std::nullopt)), 24, 40, 2, 2, {}, true));
  add("sdpa.stats_padding_causal_gqa", "bf16", "sdpa stats padding causal gqa",
      sdpa_band_graph("sdpa_stats_pad_causal", padded(band(true, std::nullopt)), 40, 40, 4, 2, {}, true));
  add("sdpa.stats_paged_chunk", "bf16", "sdpa stats paged",
      sdpa_paged_graph("sdpa_stats_paged", band(true, std::nullopt, std::nullopt, true), 16, 9, 8, 6, true));
  sdpa_backward_and_fp8_cases(cases);
  {
    OpCase c =
        make("sdpa.bias_bottom_right", "bf16", "",
             sdpa_band_graph("sdpa_bias_br", band(true, std::nullopt, std::nullopt, true), 8, 40, 2, 2, {1, 1, 8, 40}));
    c.kiln_rejects = "cuDNN takes no attention bias with a bottom-right diagonal";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = make("sdpa.window_more_queries", "bf16", "", sdpa_band_graph("sdpa_window_sq", band(true, 8), 48, 32));
    c.kiln_rejects = "sliding window (left_bound) only with at most as many queries as keys";
    c.reject_code = StatusCode::kNotSupported;
    cases.push_back(std::move(c));
  }
}

}  // namespace detail

inline std::vector<OpCase> op_coverage_cases() {
  using namespace detail;
  using D = DataType;
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::string dtype, std::string group, const GraphBuilder& b, bool tf32 = false) {
    cases.push_back(make(std::move(name), std::move(dtype), std::move(group), b));
    cases.back().allow_tf32 = tf32;
  };

  // ---- convolutions (NHWC) ----
  const ConvCase basic{"basic", 2, 16, 32, 8, 3, 1, 1, 1, 1};
  const ConvCase strided{"stride2_dil2", 2, 16, 32, 9, 3, 2, 2, 2, 1};
  const ConvCase grouped{"groups2", 2, 16, 32, 8, 3, 1, 1, 1, 2};
  const char* conv_ops[] = {"conv_fprop", "conv_dgrad", "conv_wgrad"};
  for (int op = 0; op < 3; ++op) {
    const std::string o = conv_ops[op];
    // wgrad writes fp32 dw, as examples/conv_wgrad.json.
    const D out16 = op == 2 ? D::kFloat32 : D::kFloat16;
    add(o + ".basic", "fp16", o + " fp16", conv_graph(op, basic, D::kFloat16, out16));
    add(o + ".stride2_dil2_pad2", "fp16", "", conv_graph(op, strided, D::kFloat16, out16));
    add(o + ".groups2", "fp16", "", conv_graph(op, grouped, D::kFloat16, out16));
    add(o + ".basic", "bf16", "", conv_graph(op, basic, D::kBFloat16, op == 2 ? D::kFloat32 : D::kBFloat16));
    add(o + ".basic", "fp32", "", conv_graph(op, basic, D::kFloat32, D::kFloat32), true);
  }
  add("conv_fprop.basic", "fp8_e4m3", "", conv_graph(0, basic, D::kFp8E4M3, D::kFloat16));

  // ---- matmul ----
  add("matmul.basic", "bf16", "matmul bf16",
      matmul_graph("bf16", D::kBFloat16, D::kBFloat16, D::kBFloat16, {1, 32, 64}, {1, 64, 48}));
  add("matmul.basic", "fp16", "matmul fp16",
      matmul_graph("fp16", D::kFloat16, D::kFloat16, D::kFloat16, {1, 32, 64}, {1, 64, 48}));
  add("matmul.basic", "fp32", "", matmul_graph("fp32", D::kFloat32, D::kFloat32, D::kFloat32, {1, 32, 64}, {1, 64, 48}),
      true);
  add("matmul.batched", "fp16", "",
      matmul_graph("batched", D::kFloat16, D::kFloat16, D::kFloat16, {4, 32, 64}, {4, 64, 48}));
  add("matmul.batched_rank4", "fp16", "",
      matmul_graph("batched4", D::kFloat16, D::kFloat16, D::kFloat16, {2, 3, 32, 64}, {2, 3, 64, 48}));
  add("matmul.broadcast_b", "fp16", "",
      matmul_graph("broadcast", D::kFloat16, D::kFloat16, D::kFloat16, {4, 32, 64}, {1, 64, 48}));
  // fp8 products write fp16; b [1, K=64, N=48] either row-major or K-contiguous (column-major).
  const std::vector<int64_t> k_major{64 * 48, 1, 64};
  add("matmul.fp8_b_kmajor", "fp8_e4m3", "",
      matmul_graph("e4m3_kmajor", D::kFp8E4M3, D::kFp8E4M3, D::kFloat16, {1, 32, 64}, {1, 64, 48}, k_major));
  add("matmul.fp8_b_rowmajor", "fp8_e4m3", "",
      matmul_graph("e4m3_rowmajor", D::kFp8E4M3, D::kFp8E4M3, D::kFloat16, {1, 32, 64}, {1, 64, 48}));
  add("matmul.fp8_b_kmajor", "fp8_e5m2", "",
      matmul_graph("e5m2_kmajor", D::kFp8E5M2, D::kFp8E5M2, D::kFloat16, {1, 32, 64}, {1, 64, 48}, k_major));
  add("matmul.fp8_mixed_b_kmajor", "fp8_e4m3xe5m2", "",
      matmul_graph("mixed_kmajor", D::kFp8E4M3, D::kFp8E5M2, D::kFloat16, {1, 32, 64}, {1, 64, 48}, k_major));
  {
    // Kiln's validation accepts integers only in identity: an int8 GEMM is a coverage gap it names.
    OpCase c = make("matmul.int8_int32_out", "int8", "",
                    matmul_graph("int8", D::kInt8, D::kInt8, D::kInt32, {1, 32, 64}, {1, 64, 48}));
    c.kiln_rejects = "is not supported by matmul (expected a floating-point type)";
    cases.push_back(std::move(c));
  }

  // ---- pointwise: every mode standalone (fp32, fp16, bf16) and fused behind a matmul (fp32, fp16) and a conv ----
  const PointwiseMode modes[] = {
      PointwiseMode::kAdd,     PointwiseMode::kSub,     PointwiseMode::kMul,      PointwiseMode::kDiv,
      PointwiseMode::kMin,     PointwiseMode::kMax,     PointwiseMode::kScale,    PointwiseMode::kBiasAdd,
      PointwiseMode::kRelu,    PointwiseMode::kGeluErf, PointwiseMode::kGeluTanh, PointwiseMode::kSilu,
      PointwiseMode::kSigmoid, PointwiseMode::kTanh,    PointwiseMode::kExp,      PointwiseMode::kIdentity};
  for (PointwiseMode m : modes) {
    const std::string mn = pointwise_mode_name(m);
    for (D io : {D::kFloat32, D::kFloat16}) {
      const std::string group = "pointwise " + mn + " " + dt(io);
      add("pointwise." + mn, dt(io), group, pointwise_graph(m, io));
      add("matmul+" + mn, dt(io), group, matmul_pointwise_graph(m, io), io == D::kFloat32);
    }
    add("pointwise." + mn, "bf16", "", pointwise_graph(m, D::kBFloat16));
  }
  for (PointwiseMode m : {PointwiseMode::kBiasAdd, PointwiseMode::kRelu, PointwiseMode::kScale, PointwiseMode::kAdd,
                          PointwiseMode::kGeluTanh, PointwiseMode::kSilu})
    add(std::string("conv_fprop+") + pointwise_mode_name(m), "fp16", "", conv_pointwise_graph(m));

  // ---- reductions: every mode over the last axis and over all axes ----
  for (ReductionMode m : {ReductionMode::kSum, ReductionMode::kMax, ReductionMode::kMin, ReductionMode::kAmax}) {
    const std::string mn = std::string("reduce_") + reduction_mode_name(m);
    for (bool all : {false, true}) {
      const std::string axes = all ? "all_axes" : "last_axis";
      const std::string group = mn + " " + axes;
      add(mn + "." + axes, "fp32", group, reduction_graph(m, all, false, D::kFloat32));
      add("matmul+" + mn + "." + axes, "fp16", group, reduction_graph(m, all, true, D::kFloat16));
      add(mn + "." + axes, "fp16", "", reduction_graph(m, all, false, D::kFloat16));
    }
  }

  // ---- norms ----
  for (bool layer : {true, false}) {
    const std::string n = layer ? "layer_norm" : "rms_norm";
    add(n, "fp16", n + " fp16", norm_graph(layer, D::kFloat16));
    add(n, "bf16", "", norm_graph(layer, D::kBFloat16));
    add(n, "fp32", "", norm_graph(layer, D::kFloat32));
  }

  sdpa_cases(cases);

  // ---- dtype casts through identity ----
  add("cast", "fp32->bf16", "", cast_graph(D::kFloat32, D::kBFloat16));
  add("cast", "fp16->fp32", "", cast_graph(D::kFloat16, D::kFloat32));
  add("cast", "fp16->fp8_e4m3", "", cast_graph(D::kFloat16, D::kFp8E4M3));
  add("cast", "fp16->fp8_e5m2", "", cast_graph(D::kFloat16, D::kFp8E5M2));
  add("cast", "fp8_e4m3->fp16", "", cast_graph(D::kFp8E4M3, D::kFloat16));
  add("cast", "fp32->int8", "", cast_graph(D::kFloat32, D::kInt8));
  add("cast.scaled_x100", "fp32->int8", "", cast_graph(D::kFloat32, D::kInt8, 100.0));
  add("cast", "int8->fp32", "", cast_graph(D::kInt8, D::kFloat32));
  return cases;
}

// The core groups every run must pass (one Passed case each), in the order above.
inline std::vector<std::string> core_groups(const std::vector<OpCase>& cases) {
  std::vector<std::string> groups;
  for (const OpCase& c : cases)
    if (!c.core_group.empty() && std::find(groups.begin(), groups.end(), c.core_group) == groups.end())
      groups.push_back(c.core_group);
  return groups;
}

}  // namespace kiln::opcov
