// A seeded generator of random valid graph specs (JSON text) over every op family Kiln accepts: pointwise
// chains (rank 1-6, broadcasts, by-value scalars, layouts and padded strides), matmuls (rank 2-5, broadcast
// batch dims, transposed operands, fp8, epilogues, an AMAX reduction), convolutions (fprop, dgrad, wgrad; 2-D
// and 3-D; NHWC and NCHW; stride, dilation, padding, groups, depthwise), reductions over any axes, layer and
// RMS norms, and attention (GQA, head dims 8-256; causal, sliding windows and bottom-right diagonals; a bias and
// the statistics; padding masks, paged K/V caches and ragged tensors; the backward pass; FP8; dropout). The differential
// sweeps run it: the host tier through validation, canonicalization and deviceless lowering
// (src/lower/sweep_test.cc), the GPU tier through the Planner against the references (src/runtime/sweep_gpu_test.cc).
//
// random_spec(seed, i) is a pure function of its arguments (its own splitmix64 stream, no std:: distribution,
// whose output differs between standard libraries), so a failing (seed, i) names the same spec everywhere;
// the spec's name says it ("sweep_s<seed>_<i>_<family>"). Sizes are small (a host reference of every spec
// takes milliseconds) with a few medium ones. Every spec is meant to be valid: the host sweep fails on one
// that does not validate (a generator or a validator bug, either worth knowing).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::testing {

class SpecRng {
 public:
  explicit SpecRng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t below(int64_t n) { return n <= 1 ? 0 : static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  bool percent(int p) { return below(100) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))];
  }

 private:
  uint64_t state_;
};

struct RandomSpec {
  std::string family;  // "pointwise", "matmul", "matmul_amax", "conv_fprop", "conv_dgrad", "conv_wgrad",
                       // "reduction", "norm", "sdpa"
  std::string name;    // "sweep_s<seed>_<index>_<family>"
  std::string json;
};

namespace random_spec_detail {

inline std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
inline int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}
inline std::string q(const std::string& s) { return "\"" + s + "\""; }

// The JSON text of a spec under construction.
struct SpecText {
  std::string name, io_dtype = "fp16", intermediate_dtype = "fp32", compute_dtype = "fp32";
  std::vector<std::string> tensors, nodes, outputs;
  int next_tensor = 0, next_node = 0;

  std::string fresh() { return "t" + std::to_string(next_tensor++); }
  void tensor(const std::string& n, const std::string& body) { tensors.push_back(q(n) + ": {" + body + "}"); }
  // A node with its attributes ("" or ", \"axes\": [1]") and outputs.
  void node_outputs(const std::string& op, const std::vector<std::string>& in, const std::string& attrs,
                    const std::vector<std::string>& outs) {
    auto names = [](const std::vector<std::string>& v) {
      std::string t;
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + q(v[i]);
      return t;
    };
    nodes.push_back("{\"name\": " + q("n" + std::to_string(next_node++) + "_" + op) + ", \"op\": " + q(op) +
                    ", \"inputs\": [" + names(in) + "], \"outputs\": [" + names(outs) + "]" + attrs + "}");
  }
  // A node of one output (a fresh name unless given), returning its name.
  std::string node(const std::string& op, const std::vector<std::string>& in, const std::string& attrs = "",
                   const std::string& out_name = "") {
    const std::string out = out_name.empty() ? fresh() : out_name;
    node_outputs(op, in, attrs, {out});
    return out;
  }
  std::string text() const {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
      return s;
    };
    std::vector<std::string> outs;
    for (const std::string& o : outputs) outs.push_back(q(o));
    return "{\"name\": " + q(name) + ", \"io_dtype\": " + q(io_dtype) +
           ", \"intermediate_dtype\": " + q(intermediate_dtype) + ", \"compute_dtype\": " + q(compute_dtype) +
           ", \"tensors\": {" + join(tensors) + "}, \"nodes\": [" + join(nodes) + "], \"outputs\": [" + join(outs) +
           "]}";
  }
};

// Random extents for a tensor of `rank` dims, at most `max_elems` elements in all.
inline std::vector<int64_t> random_dims(SpecRng& r, int rank, int64_t max_elems) {
  static const std::vector<int64_t> kExtents = {1, 1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64, 100, 128, 256, 1000};
  std::vector<int64_t> d(static_cast<size_t>(rank));
  for (int64_t& e : d) e = r.pick(kExtents);
  while (product(d) > max_elems) {  // shrink the largest extent until it fits
    auto it = std::max_element(d.begin(), d.end());
    *it = std::max<int64_t>(1, *it / 4);
  }
  return d;
}

// "dims" and a layout for an input tensor: row-major mostly; NHWC at rank >= 3; or padded explicit strides
// (each row of the innermost axis padded by a few elements, as a slice of a wider buffer is).
inline std::string input_body(SpecRng& r, const std::vector<int64_t>& d, const std::string& dtype = "") {
  std::string b = "\"dims\": " + ints(d);
  if (!dtype.empty()) b += ", \"dtype\": " + q(dtype);
  const int roll = static_cast<int>(r.below(100));
  if (d.size() >= 3 && roll < 15) {
    b += ", \"layout\": \"NHWC\"";
  } else if (d.size() >= 2 && roll < 25) {
    std::vector<int64_t> s(d.size());
    int64_t stride = 1;
    for (size_t i = d.size(); i-- > 0;) {
      s[i] = stride;
      stride *= d[i] + (i == d.size() - 1 ? r.below(3) * 8 : 0);
    }
    b += ", \"strides\": " + ints(s);
  }
  return b;
}

inline const std::vector<std::string>& float_dtypes() {
  static const std::vector<std::string> v = {"fp32", "fp16", "bf16"};
  return v;
}

inline void pointwise(SpecRng& r, SpecText& s) {
  s.io_dtype = r.pick(float_dtypes());
  const int rank = 1 + static_cast<int>(r.below(6));
  const std::vector<int64_t> dims = random_dims(r, rank, r.percent(10) ? (1 << 20) : (1 << 15));
  std::string cur = s.fresh();
  s.tensor(cur, input_body(r, dims));
  static const std::vector<std::string> kUnary = {"relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid",
                                                  "tanh", "abs",      "identity",  "exp"};
  static const std::vector<std::string> kBinary = {"add", "sub", "mul", "min", "max"};
  const int ops = 1 + static_cast<int>(r.below(r.percent(10) ? 12 : 4));
  for (int i = 0; i < ops; ++i) {
    const int kind = static_cast<int>(r.below(10));
    std::string next;
    if (kind < 4) {
      next = s.node(r.pick(kUnary), {cur});
    } else if (kind < 5) {
      const std::string sc = s.fresh();
      s.tensor(sc, "\"value\": " + std::string(r.pick(std::vector<std::string>{"0.5", "2", "-1.25", "3"})));
      next = s.node("scale", {cur, sc});
    } else {
      // The other operand: the same dims, a broadcast (some extents 1), or a suffix of the dims (a lower rank,
      // right-aligned); bias_add takes the same rank with extents 1 or x's.
      std::vector<int64_t> od = dims;
      const int shape = static_cast<int>(r.below(10));
      const bool bias = kind == 9;
      if (shape >= 4)
        for (int64_t& e : od)
          if (r.percent(50)) e = 1;
      if (shape >= 8 && !bias) od.erase(od.begin(), od.begin() + r.below(static_cast<int64_t>(od.size())));
      const std::string other = s.fresh();
      s.tensor(other, input_body(r, od));
      next = bias ? s.node("bias_add", {cur, other})
                  : (r.percent(50) ? s.node(r.pick(kBinary), {cur, other}) : s.node(r.pick(kBinary), {other, cur}));
    }
    if (i + 1 < ops && r.percent(10)) s.outputs.push_back(next);  // an intermediate read back too
    cur = next;
  }
  s.outputs.push_back(cur);
}

inline void matmul(SpecRng& r, SpecText& s, bool amax) {
  static const std::vector<int64_t> kMnk = {1, 8, 16, 24, 32, 64, 96, 128, 256};
  const int64_t m = r.pick(kMnk), k = r.pick(kMnk), n = r.pick(kMnk);
  const bool fp8 = !amax && r.percent(10);
  if (fp8) {
    s.io_dtype = r.pick(std::vector<std::string>{"fp8_e4m3", "fp8_e5m2"});
  } else {
    s.io_dtype = r.pick(float_dtypes());
  }
  const int ra = 2 + static_cast<int>(r.below(4)), rb = 2 + static_cast<int>(r.below(4));
  const int batch = std::max(ra, rb) - 2;
  std::vector<int64_t> out_batch(static_cast<size_t>(batch));
  for (int64_t& e : out_batch) e = r.pick(std::vector<int64_t>{1, 1, 2, 3, 4});
  // Each operand's batch dims: right-aligned suffix of the output's, each extent the output's or 1.
  auto operand_batch = [&](int rank) {
    std::vector<int64_t> b(out_batch.end() - (rank - 2), out_batch.end());
    for (int64_t& e : b)
      if (r.percent(25)) e = 1;
    return b;
  };
  std::vector<int64_t> a = operand_batch(ra), bd = operand_batch(rb);
  // The output's batch extents where neither operand has one above 1 become 1 (broadcast gives max).
  a.push_back(m);
  a.push_back(k);
  bd.push_back(k);
  bd.push_back(n);
  s.tensor("a", input_body(r, a));
  std::string b_body = "\"dims\": " + ints(bd);
  if (r.percent(25)) {  // b stored transposed: [..., N, K] in memory
    std::vector<int64_t> st(bd.size());
    st[bd.size() - 2] = 1;
    st[bd.size() - 1] = k;
    int64_t outer = k * n;
    for (size_t i = bd.size() - 2; i-- > 0;) {
      st[i] = outer;
      outer *= bd[i];
    }
    b_body += ", \"strides\": " + ints(st);
  }
  s.tensor("b", b_body);
  const std::string out_dtype = fp8 ? r.pick(float_dtypes()) : "";
  std::string cur = s.node("matmul", {"a", "b"});
  if (fp8) s.tensor(cur, "\"dtype\": " + q(out_dtype));
  const int epi = static_cast<int>(r.below(4));
  const int out_rank = std::max(ra, rb);
  for (int i = 0; i < epi; ++i) {
    const int kind = static_cast<int>(r.below(4));
    if (kind == 0) {
      std::vector<int64_t> bias(static_cast<size_t>(out_rank), 1);
      bias.back() = n;
      const std::string bn = s.fresh();
      s.tensor(bn, "\"dims\": " + ints(bias) + (fp8 ? ", \"dtype\": " + q(out_dtype) : ""));
      cur = s.node("bias_add", {cur, bn});
    } else if (kind == 1) {
      cur = s.node("relu", {cur});
    } else if (kind == 2) {
      cur = s.node(r.percent(50) ? "gelu_tanh" : "gelu_erf", {cur});
    } else {
      const std::string sc = s.fresh();
      s.tensor(sc, "\"value\": 0.5");
      cur = s.node("scale", {cur, sc});
    }
  }
  if (fp8 && epi > 0) s.tensor(cur, "\"dtype\": " + q(out_dtype));
  s.outputs.push_back(cur);
  if (amax) {
    std::vector<int64_t> axes;
    for (int i = 0; i < out_rank; ++i) axes.push_back(i);
    const std::string am = s.fresh();
    s.tensor(am, "\"dtype\": \"fp32\"");
    s.node("reduce_amax", {cur}, ", \"axes\": " + ints(axes), am);
    s.outputs.push_back(am);
  }
}

inline void conv(SpecRng& r, SpecText& s, const std::string& op) {
  s.io_dtype = r.pick(float_dtypes());
  const int sp = r.percent(80) ? 2 : 3;
  const int64_t nb = r.pick(std::vector<int64_t>{1, 2, 4});
  int64_t c = r.pick(std::vector<int64_t>{3, 4, 8, 16, 32, 64});
  int64_t groups = 1, kout = r.pick(std::vector<int64_t>{4, 8, 16, 32, 64});
  const int g = static_cast<int>(r.below(10));
  if (g == 0 && c % 2 == 0) {
    groups = 2;
    kout = 2 * r.pick(std::vector<int64_t>{2, 4, 8, 16});
  } else if (g == 1) {
    groups = c;  // depthwise (a channel multiplier of 1 or 2)
    kout = c * r.pick(std::vector<int64_t>{1, 2});
  }
  const int64_t f = r.pick(std::vector<int64_t>{1, 3, 3, 5});
  const int64_t stride = r.percent(30) ? 2 : 1, dil = r.percent(15) ? 2 : 1;
  const int64_t pad = r.pick(std::vector<int64_t>{0, 1, f / 2});
  std::vector<int64_t> x = {nb, c}, w = {kout, c / groups}, y = {nb, kout};
  for (int i = 0; i < sp; ++i) {
    int64_t in = r.pick(sp == 2 ? std::vector<int64_t>{5, 7, 8, 14, 16, 28} : std::vector<int64_t>{4, 6, 8});
    in = std::max(in, dil * (f - 1) + 1);  // at least one output position
    x.push_back(in);
    w.push_back(f);
    y.push_back((in + 2 * pad - dil * (f - 1) - 1) / stride + 1);
  }
  const bool nhwc = r.percent(70);
  const std::string layout = nhwc ? ", \"layout\": \"NHWC\"" : "";
  const std::string attrs = ", \"padding\": " + std::to_string(pad) + ", \"stride\": " + std::to_string(stride) +
                            ", \"dilation\": " + std::to_string(dil) + ", \"groups\": " + std::to_string(groups);
  if (op == "conv_fprop") {
    s.tensor("x", "\"dims\": " + ints(x) + layout);
    s.tensor("w", "\"dims\": " + ints(w) + layout);
    std::string cur = s.node("conv_fprop", {"x", "w"}, attrs);
    if (r.percent(50)) {
      std::vector<int64_t> bias(y.size(), 1);
      bias[1] = kout;
      s.tensor("bias", "\"dims\": " + ints(bias) + layout);
      cur = s.node("bias_add", {cur, "bias"});
      cur = s.node("relu", {cur});
    }
    s.tensor(cur, layout.empty() ? "" : layout.substr(2));
    s.outputs.push_back(cur);
  } else if (op == "conv_dgrad") {
    s.tensor("dy", "\"dims\": " + ints(y) + layout);
    s.tensor("w", "\"dims\": " + ints(w) + layout);
    s.tensor("dx", "\"dims\": " + ints(x) + layout);
    s.node("conv_dgrad", {"dy", "w"}, attrs, "dx");
    s.outputs.push_back("dx");
  } else {
    s.tensor("x", "\"dims\": " + ints(x) + layout);
    s.tensor("dy", "\"dims\": " + ints(y) + layout);
    s.tensor("dw", "\"dims\": " + ints(w) + layout);
    s.node("conv_wgrad", {"x", "dy"}, attrs, "dw");
    s.outputs.push_back("dw");
  }
}

inline void reduction(SpecRng& r, SpecText& s) {
  s.io_dtype = r.pick(float_dtypes());
  const int rank = 1 + static_cast<int>(r.below(6));
  const std::vector<int64_t> dims = random_dims(r, rank, 1 << 15);
  s.tensor("x", input_body(r, dims));
  std::string cur = "x";
  if (r.percent(25)) cur = s.node(r.pick(std::vector<std::string>{"relu", "abs", "exp"}), {cur});
  std::vector<int64_t> axes;
  for (int i = 0; i < rank; ++i)
    if (r.percent(50)) axes.push_back(i);
  if (axes.empty()) axes.push_back(r.below(rank));
  const std::string op = r.pick(std::vector<std::string>{"reduce_sum", "reduce_max", "reduce_min", "reduce_amax"});
  const std::string y = s.fresh();
  if (r.percent(50)) s.tensor(y, "\"dtype\": \"fp32\"");
  s.node(op, {cur}, r.percent(15) && axes.size() == static_cast<size_t>(rank) ? "" : ", \"axes\": " + ints(axes), y);
  s.outputs.push_back(y);
}

inline void norm(SpecRng& r, SpecText& s) {
  s.io_dtype = r.pick(float_dtypes());
  const bool layer = r.percent(50);
  const int rank = 2 + static_cast<int>(r.below(4));
  std::vector<int64_t> x = {r.pick(std::vector<int64_t>{1, 4, 16, 64, 100})};
  const int64_t hidden = r.pick(std::vector<int64_t>{32, 64, 128, 256, 768, 1024});
  x.push_back(hidden);
  while (static_cast<int>(x.size()) < rank) x.push_back(r.pick(std::vector<int64_t>{1, 1, 2, 4}));
  std::vector<int64_t> p = x;
  p[0] = 1;
  const std::string pdtype = r.percent(70) ? "fp32" : s.io_dtype;
  s.tensor("x", "\"dims\": " + ints(x));
  s.tensor("scale", "\"dims\": " + ints(p) + ", \"dtype\": " + q(pdtype));
  std::vector<std::string> in = {"x", "scale"};
  if (layer) {
    s.tensor("bias", "\"dims\": " + ints(p) + ", \"dtype\": " + q(pdtype));
    in.push_back("bias");
  }
  const std::string eps = r.pick(std::vector<std::string>{"1e-5", "1e-6", "0.001"});
  std::string cur = s.node(layer ? "layer_norm" : "rms_norm", in, ", \"epsilon\": " + eps);
  if (r.percent(25)) cur = s.node("relu", {cur});
  s.outputs.push_back(cur);
}

// ---- attention: every variant of issue 36 (docs/spec.md), each valid by construction ----

// The heads, lengths and head dim of one attention node: h query heads over hk key heads (hk divides h).
struct AttnShape {
  int64_t b, h, hk, sq, skv, d, dv;
};
inline AttnShape attn_shape(SpecRng& r, const std::vector<int64_t>& dims, bool same_dv) {
  AttnShape a{};
  a.b = r.pick(std::vector<int64_t>{1, 2, 3});
  a.h = r.pick(std::vector<int64_t>{1, 2, 4, 8});
  a.hk = r.percent(30) ? r.pick(std::vector<int64_t>{1, a.h / 2 > 0 ? a.h / 2 : 1}) : a.h;
  a.sq = r.pick(std::vector<int64_t>{1, 16, 64, 100, 128, 256});
  a.skv = r.percent(60) ? a.sq : r.pick(std::vector<int64_t>{16, 64, 128, 200});
  a.d = r.pick(dims);
  a.dv = same_dv || r.percent(85) ? a.d : r.pick(std::vector<int64_t>{32, 64, 128});
  return a;
}
inline const std::vector<int64_t>& attn_head_dims() {
  static const std::vector<int64_t> d = {8, 32, 64, 64, 128, 128, 256};
  return d;
}
// A dense [B, H, S, W] tensor, or a ragged one packed token-major (strides [S*H*W, W, H*W, 1]).
inline std::string attn_dims(int64_t b, int64_t heads, int64_t rows, int64_t w, bool token_major) {
  std::string body = "\"dims\": " + ints({b, heads, rows, w});
  if (token_major) body += ", \"strides\": " + ints({rows * heads * w, w, heads * w, 1});
  return body;
}
inline std::string int32_dims(const std::vector<int64_t>& dims) {
  return "\"dims\": " + ints(dims) + ", \"dtype\": \"int32\"";
}
// The node's mask: causal or not; where queries do not outnumber the keys (cuDNN 9.19 takes a band or a
// bottom-right diagonal only then), sometimes a sliding window and the bottom-right alignment. `droppable`: neither
// was drawn (cuDNN takes dropout only then).
inline std::string attn_mask(SpecRng& r, const AttnShape& a, bool has_bias, bool* droppable = nullptr) {
  const bool causal = r.percent(50);
  std::string attrs = std::string(", \"causal\": ") + (causal ? "true" : "false");
  if (droppable) *droppable = true;
  if (a.sq > a.skv) return attrs;
  const bool window = r.percent(25);
  if (window) attrs += ", \"left_bound\": " + std::to_string(1 + r.below(a.skv));
  const bool bottom_right = (causal || window) && !has_bias && r.percent(40);
  if (bottom_right)  // cuDNN takes no bias with a bottom-right diagonal
    attrs += ", \"diagonal_alignment\": \"bottom_right\"";
  if (droppable) *droppable = !window && !bottom_right;
  return attrs;
}
// Dropout (training, docs/spec.md "dropout") where the node takes it, a quarter of the time: a probability and
// its seed and offset, int64 [1, 1, 1, 1], the node's last inputs.
inline void attn_dropout(SpecRng& r, SpecText& s, bool droppable, std::string& attrs, std::vector<std::string>& in) {
  if (!droppable || !r.percent(25)) return;
  attrs += ", \"dropout\": " + r.pick(std::vector<std::string>{"0.1", "0.25", "0.5"});
  for (const char* n : {"seed", "offset"}) {
    s.tensor(n, "\"dims\": [1, 1, 1, 1], \"dtype\": \"int64\"");
    in.push_back(n);
  }
}
// An attention node whose outputs (the statistics, a backward pass's gradients, FP8's amax too) are the graph's.
inline void attn_node(SpecText& s, const std::string& op, const std::vector<std::string>& in, const std::string& attrs,
                      const std::vector<std::string>& outs) {
  s.node_outputs(op, in, attrs, outs);
  for (const std::string& o : outs) s.outputs.push_back(o);
}
// A bias [B or 1, H or 1, Sq, Skv] (the node's input after q, k, v and, in a backward pass, o, do, the statistics).
inline void attn_bias(SpecRng& r, SpecText& s, const AttnShape& a, std::vector<std::string>& in) {
  s.tensor("bias", "\"dims\": " + ints({r.percent(50) ? a.b : 1, r.percent(50) ? a.h : 1, a.sq, a.skv}));
  in.push_back("bias");
}
inline void attn_stats_tensor(SpecText& s) { s.tensor("lse", "\"dtype\": \"float32\""); }
// The lengths of a padding mask, int32 [B, 1, 1, 1] each: the node's inputs after q, k, v (and the bias).
inline void attn_lengths(SpecText& s, const AttnShape& a, std::vector<std::string>& in) {
  s.tensor("seq_q", int32_dims({a.b, 1, 1, 1}));
  s.tensor("seq_kv", int32_dims({a.b, 1, 1, 1}));
  in.push_back("seq_q");
  in.push_back("seq_kv");
}
// Ragged offsets, int32 [B + 1, 1, 1, 1], one per name given (a name repeated shares one tensor).
inline void attn_offsets(SpecText& s, const AttnShape& a, const std::vector<std::string>& names,
                         std::vector<std::string>& in) {
  for (const std::string& n : names) {
    if (std::find(in.begin(), in.end(), n) == in.end()) s.tensor(n, int32_dims({a.b + 1, 1, 1, 1}));
    in.push_back(n);
  }
}

// sdpa forward over dense tensors, with a padding mask, over paged caches (decode and chunked prefill), or ragged
// (over dense or paged caches); a bias and the statistics where the form takes them.
inline void sdpa_forward(SpecRng& r, SpecText& s, bool padded, bool paged, bool ragged) {
  AttnShape a = attn_shape(r, attn_head_dims(), paged || ragged);
  const int64_t block = r.pick(std::vector<int64_t>{16, 32, 64});
  if (paged) {
    if (r.percent(40)) a.sq = 1;                                       // decode
    a.skv = block * (1 + r.below(std::max<int64_t>(1, 256 / block)));  // pages * block_size
  }
  const int64_t pages = a.skv / block, blocks = a.b * pages + r.below(4);
  s.tensor("q", attn_dims(a.b, a.h, a.sq, a.d, ragged));
  if (paged) {
    s.tensor("k", "\"dims\": " + ints({blocks, a.hk, block, a.d}));
    s.tensor("v", "\"dims\": " + ints({blocks, a.hk, block, a.dv}));
  } else {
    s.tensor("k", attn_dims(a.b, a.hk, a.skv, a.d, ragged));
    s.tensor("v", attn_dims(a.b, a.hk, a.skv, a.dv, ragged));
  }
  std::vector<std::string> in = {"q", "k", "v"};
  const bool bias = !paged && r.percent(15);
  bool droppable = false;
  std::string attrs = attn_mask(r, a, bias, &droppable);
  if (bias) attn_bias(r, s, a, in);
  if (padded || paged || ragged) {
    attn_lengths(s, a, in);
    attrs += ", \"padding_mask\": true";
  }
  if (paged) {
    const bool own_v_table = r.percent(70);  // else K and V read one table
    s.tensor("table_k", int32_dims({a.b, 1, pages, 1}));
    if (own_v_table) s.tensor("table_v", int32_dims({a.b, 1, pages, 1}));
    in.push_back("table_k");
    in.push_back(own_v_table ? "table_v" : "table_k");
    attrs += ", \"paged_kv\": true";
  }
  if (ragged) {
    const bool share_kv = r.percent(30), share_qo = a.d == a.dv && r.percent(30);
    std::vector<std::string> names = {"off_q"};
    if (!paged) names.insert(names.end(), {"off_k", share_kv ? "off_k" : "off_v"});
    names.push_back(share_qo ? "off_q" : "off_o");
    attn_offsets(s, a, names, in);
    attrs += ", \"ragged\": true";
  }
  std::vector<std::string> outs = {"o"};
  if (r.percent(20)) {
    attn_stats_tensor(s);
    outs.push_back("lse");
  }
  if (r.percent(30)) attrs += ", \"attn_scale\": 0.1";
  attn_dropout(r, s, droppable && !paged && !ragged, attrs, in);
  attn_node(s, "sdpa", in, attrs, outs);
}

// sdpa_backward: q, k, v, o, do, the forward's statistics (and a bias), dense, with a padding mask, or ragged.
inline void sdpa_backward(SpecRng& r, SpecText& s, bool padded, bool ragged) {
  AttnShape a = attn_shape(r, attn_head_dims(), ragged);
  if (a.sq == 1 && a.skv == 1) a.skv = 16;  // one query over one key: cuDNN refuses it
  s.tensor("q", attn_dims(a.b, a.h, a.sq, a.d, ragged));
  s.tensor("k", attn_dims(a.b, a.hk, a.skv, a.d, ragged));
  s.tensor("v", attn_dims(a.b, a.hk, a.skv, a.dv, ragged));
  s.tensor("o", attn_dims(a.b, a.h, a.sq, a.dv, ragged));
  s.tensor("do", attn_dims(a.b, a.h, a.sq, a.dv, ragged));
  s.tensor("stats", "\"dims\": " + ints({a.b, a.h, a.sq, 1}) + ", \"dtype\": \"float32\"");
  std::vector<std::string> in = {"q", "k", "v", "o", "do", "stats"};
  const bool bias = r.percent(15);
  bool droppable = false;
  std::string attrs = attn_mask(r, a, bias, &droppable);
  if (bias) attn_bias(r, s, a, in);
  if (padded || ragged) {
    attn_lengths(s, a, in);
    attrs += ", \"padding_mask\": true";
  }
  if (ragged) {
    attn_offsets(s, a, {"off_q", "off_k", "off_v", "off_o"}, in);
    attrs += ", \"ragged\": true";
  }
  if (r.percent(30)) attrs += ", \"attn_scale\": 0.1";
  attn_dropout(r, s, droppable && !ragged, attrs, in);
  attn_node(s, "sdpa_backward", in, attrs, {"dq", "dk", "dv"});
}

// sdpa_fp8: q, k, v fp8_e4m3 and the six fp32 scales; o in fp8 and amax_o (and the statistics, without a
// padding mask); head dims a multiple of 16; no bottom-right diagonal (NotSupported on SM 9.x).
inline void sdpa_fp8(SpecRng& r, SpecText& s) {
  s.io_dtype = "fp8_e4m3";
  AttnShape a = attn_shape(r, std::vector<int64_t>{16, 32, 64, 64, 128, 128}, true);
  s.tensor("q", attn_dims(a.b, a.h, a.sq, a.d, false));
  s.tensor("k", attn_dims(a.b, a.hk, a.skv, a.d, false));
  s.tensor("v", attn_dims(a.b, a.hk, a.skv, a.dv, false));
  std::vector<std::string> in = {"q", "k", "v"};
  for (const char* n : {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"}) {
    s.tensor(n, "\"dims\": [1, 1, 1, 1], \"dtype\": \"float32\"");
    in.push_back(n);
  }
  std::string attrs = std::string(", \"causal\": ") + (r.percent(50) ? "true" : "false");
  const bool padded = r.percent(25);
  if (padded) {
    attn_lengths(s, a, in);
    attrs += ", \"padding_mask\": true";
  }
  s.tensor("o", std::string("\"dtype\": ") + (r.percent(70) ? "\"fp8_e4m3\"" : "\"fp8_e5m2\""));
  s.tensor("amax_o", "\"dtype\": \"float32\"");
  std::vector<std::string> outs = {"o", "amax_o"};
  if (!padded && r.percent(20)) {
    attn_stats_tensor(s);
    outs.push_back("lse");
  }
  attn_node(s, "sdpa_fp8", in, attrs, outs);
}

// sdpa_fp8_backward: q, k, v, o, do fp8_e4m3 with head dims of 128 (what cuDNN takes on SM 9.x), the statistics,
// the twelve fp32 scales; dq, dk, dv and the four amax; causal or not, sometimes a sliding window, sometimes a
// padding mask.
inline void sdpa_fp8_backward(SpecRng& r, SpecText& s) {
  s.io_dtype = "fp8_e4m3";
  AttnShape a = attn_shape(r, std::vector<int64_t>{128}, true);
  if (a.sq == 1 && a.skv == 1) a.skv = 16;  // one query over one key: cuDNN refuses it
  const bool causal = r.percent(50);
  if (causal) {  // with a band, lengths that are multiples of 64 (NotSupported otherwise on SM 9.x)
    a.sq = r.pick(std::vector<int64_t>{64, 128, 256});
    a.skv = r.percent(60) ? a.sq : r.pick(std::vector<int64_t>{64, 128, 256});
  }
  s.tensor("q", attn_dims(a.b, a.h, a.sq, a.d, false));
  s.tensor("k", attn_dims(a.b, a.hk, a.skv, a.d, false));
  s.tensor("v", attn_dims(a.b, a.hk, a.skv, a.dv, false));
  s.tensor("o", attn_dims(a.b, a.h, a.sq, a.dv, false));
  s.tensor("do", attn_dims(a.b, a.h, a.sq, a.dv, false));
  s.tensor("stats", "\"dims\": " + ints({a.b, a.h, a.sq, 1}) + ", \"dtype\": \"float32\"");
  std::vector<std::string> in = {"q", "k", "v", "o", "do", "stats"};
  for (const char* n : {"descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                        "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp"}) {
    s.tensor(n, "\"dims\": [1, 1, 1, 1], \"dtype\": \"float32\"");
    in.push_back(n);
  }
  std::string attrs = std::string(", \"causal\": ") + (causal ? "true" : "false");
  if (causal && a.sq <= a.skv && r.percent(25)) attrs += ", \"left_bound\": " + std::to_string(1 + r.below(a.sq));
  if (r.percent(25)) {
    attn_lengths(s, a, in);
    attrs += ", \"padding_mask\": true";
  }
  for (const char* n : {"amax_dq", "amax_dk", "amax_dv", "amax_dp"}) s.tensor(n, "\"dtype\": \"float32\"");
  attn_node(s, "sdpa_fp8_backward", in, attrs, {"dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"});
}

// One attention node, its form drawn: dense 40%, padded 10%, paged 10%, ragged 8%, ragged over paged caches 4%,
// backward 12% (with a padding mask 4%, ragged 4%), FP8 5%, FP8's backward 3%.
inline void sdpa(SpecRng& r, SpecText& s) {
  s.io_dtype = r.percent(50) ? "fp16" : "bf16";
  const int roll = static_cast<int>(r.below(100));
  if (roll < 40) return sdpa_forward(r, s, false, false, false);
  if (roll < 50) return sdpa_forward(r, s, true, false, false);
  if (roll < 60) return sdpa_forward(r, s, true, true, false);
  if (roll < 68) return sdpa_forward(r, s, true, false, true);
  if (roll < 72) return sdpa_forward(r, s, true, true, true);
  if (roll < 84) return sdpa_backward(r, s, false, false);
  if (roll < 88) return sdpa_backward(r, s, true, false);
  if (roll < 92) return sdpa_backward(r, s, true, true);
  if (roll < 97) return sdpa_fp8(r, s);
  sdpa_fp8_backward(r, s);
}

}  // namespace random_spec_detail

// The index-th spec of the sweep with this seed. Families in proportion: pointwise 25%, matmul 20%,
// matmul + amax 5%, conv (fprop 12%, dgrad 4%, wgrad 4%), reduction 12%, norm 8%, sdpa 10%.
inline RandomSpec random_spec(uint64_t seed, int index) {
  using namespace random_spec_detail;
  SpecRng r(seed * 1000003ull + static_cast<uint64_t>(index));
  const int roll = static_cast<int>(r.below(100));
  RandomSpec out;
  out.family = roll < 25   ? "pointwise"
               : roll < 45 ? "matmul"
               : roll < 50 ? "matmul_amax"
               : roll < 62 ? "conv_fprop"
               : roll < 66 ? "conv_dgrad"
               : roll < 70 ? "conv_wgrad"
               : roll < 82 ? "reduction"
               : roll < 90 ? "norm"
                           : "sdpa";
  out.name = "sweep_s" + std::to_string(seed) + "_" + std::to_string(index) + "_" + out.family;
  SpecText s;
  s.name = out.name;
  if (out.family == "pointwise") pointwise(r, s);
  if (out.family == "matmul" || out.family == "matmul_amax") matmul(r, s, out.family == "matmul_amax");
  if (out.family.rfind("conv_", 0) == 0) conv(r, s, out.family);
  if (out.family == "reduction") reduction(r, s);
  if (out.family == "norm") norm(r, s);
  if (out.family == "sdpa") sdpa(r, s);
  out.json = s.text();
  return out;
}

}  // namespace kiln::testing
