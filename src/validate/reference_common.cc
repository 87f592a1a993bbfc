#include "validate/reference_common.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <thread>

#include "kiln/core/strings.h"
#include "kiln/graph/op_cost.h"
#include "kiln/validate/reference.h"
#include "validate/input_gen.h"
#include "validate/ops/pointwise_math.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {

StatusOr<PreparedGraph> prepare_graph(const Graph& g, bool values) {
  PreparedGraph p;
  KILN_ASSIGN_OR_RETURN(p.order, topological_order(g));
  for (int n : p.order) {
    KILN_ASSIGN_OR_RETURN(NodePlan plan, plan_node(g, n));
    const Node& node = g.nodes[static_cast<size_t>(n)];
    if (values && node.sdpa.dropout > 0 && sdpa_inputs(node).dropout_keep < 0) {
      return not_supported(node_label(g, n) + ": dropout " + shortest_number(node.sdpa.dropout) +
                           ": the reference needs the mask the plan drew (kiln/validate/dropout_probe.h), which was "
                           "not given");
    }
    // One plan per output: a node with two (an sdpa with its statistics) is evaluated once for each.
    const size_t outputs = g.nodes[static_cast<size_t>(n)].outputs.size();
    for (size_t o = 0; o < outputs; ++o) {
      plan.output = static_cast<int>(o);
      p.plans.push_back(plan);
    }
  }
  p.macs = graph_cost(g).macs;  // the one count (kiln/graph/op_cost.h), once every node's geometry is checked
  return p;
}

std::vector<int> loaded_inputs(const Graph& g, const GraphRoles& roles) {
  std::vector<bool> needed(g.tensors.size(), false);
  for (const Node& n : g.nodes)
    for (int t : n.inputs) needed[static_cast<size_t>(t)] = true;
  for (int t : g.outputs) needed[static_cast<size_t>(t)] = true;
  std::vector<int> inputs;
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (needed[i] && roles.is_graph_input(static_cast<int>(i))) inputs.push_back(static_cast<int>(i));
  return inputs;
}

StatusOr<std::map<int, std::vector<double>>> load_inputs(const Graph& g, const std::map<int, HostTensor>& inputs) {
  const GraphRoles roles(g);
  std::map<int, std::vector<double>> values;
  for (int t : loaded_inputs(g, roles)) {
    const TensorDesc& desc = g.tensors[static_cast<size_t>(t)];
    const auto dims = tensor_dims(g, t);
    const DataType dt = roles.dtype_of(t);
    auto it = inputs.find(t);
    std::vector<double> v;
    if (it != inputs.end()) {
      if (it->second.dims != dims) {
        return invalid_argument("input '" + desc.name + "': given dims do not match the graph's (" +
                                it->second.describe() + " given)");
      }
      if (it->second.strides.size() != it->second.dims.size() ||
          static_cast<int64_t>(it->second.storage.size()) < it->second.storage_span())
        return invalid_argument("input '" + desc.name + "': storage does not cover its strides");
      v = it->second.values();
    } else if (desc.by_value) {
      v.assign(static_cast<size_t>(product(dims)), desc.value);
    } else {
      return invalid_argument("input '" + desc.name + "' (tensor " + std::to_string(t) + ") has no value");
    }
    for (double& x : v) x = round_to_dtype(x, dt);
    values[t] = std::move(v);
  }
  return values;
}

StatusOr<std::vector<HostTensor>> make_outputs(const Graph& g, const std::map<int, std::vector<double>>& values) {
  std::vector<HostTensor> out;
  for (int t : g.outputs) {
    auto it = values.find(t);
    if (it == values.end())
      return internal_error("output '" + g.tensors[static_cast<size_t>(t)].name + "' was not computed");
    HostTensor h = HostTensor::zeros(g.dtype_of(t), tensor_dims(g, t), tensor_strides(g, t));
    h.set_values(it->second);
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<std::vector<HostTensor>> make_magnitude_outputs(const Graph& g,
                                                         const std::map<int, std::vector<double>>& magnitudes) {
  std::vector<HostTensor> out;
  for (int t : g.outputs) {
    auto it = magnitudes.find(t);
    if (it == magnitudes.end())
      return internal_error("the magnitude of output '" + g.tensors[static_cast<size_t>(t)].name +
                            "' was not computed");
    HostTensor h = HostTensor::zeros(DataType::kFloat32, tensor_dims(g, t), tensor_strides(g, t));
    h.set_values(it->second);
    out.push_back(std::move(h));
  }
  return out;
}

double pointwise_apply(PointwiseMode mode, double a, double b) { return pointwise_value(mode, a, b); }

bool input_range_is_exact(double lo, double hi) {
  const double width = hi - lo;
  if (!(width > 0) || !std::isfinite(width)) return false;
  int e = 0;
  if (std::frexp(width, &e) != 0.5) return false;  // a power of two
  const double steps = lo / (width * 0x1p-23);
  return steps == std::floor(steps) && std::fabs(lo) <= width;
}

double input_nonzero_fallback(double lo, double hi) { return lo <= 1.0 && 1.0 <= hi ? 1.0 : hi; }

namespace {

bool is_integer(DataType t) { return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64; }

// A padding mask's lengths (integers, both ends included): queries 1..Sq; keys 1..Skv, or with a window or a
// bottom-right diagonal at least min(Sq, Skv), so that every valid query has a key to attend to (a row with none is written as zeros by the
// references, and what cuDNN writes there is not asserted); page tables 0..blocks-1.
// Tensor t's range narrowed to [lo, hi]: integer roles (lengths, tables) draw what every role they hold, in every
// node, allows (an untouched tensor's range starts below 0).
void narrow(std::vector<std::pair<double, double>>* range, size_t t, double lo, double hi) {
  auto& r = (*range)[t];
  r = r.first < 0 ? std::make_pair(lo, hi) : std::make_pair(std::max(r.first, lo), std::min(r.second, hi));
}

void sdpa_length_ranges(const Graph& g, const Node& n, std::vector<std::pair<double, double>>* range) {
  const SdpaInputs r = sdpa_inputs(n);
  if (r.seq_len_q < 0) return;
  const auto extent = [&](size_t input, size_t axis) {
    const TensorDesc& t = g.tensors[static_cast<size_t>(n.inputs[input])];
    return t.dims.size() > axis ? static_cast<double>(t.dims[axis].value) : 1.0;
  };
  const double sq = extent(0, 2), skv = static_cast<double>(sdpa_keys_extent(g, n));
  // Top-left without a window, key 0 is every valid query's; a window or a bottom-right diagonal needs an entry's
  // keys to reach its queries (at least min(Sq, Skv) of them).
  const bool reach = n.sdpa.left_bound.has_value() || n.sdpa.alignment == DiagonalAlignment::kBottomRight;
  const size_t lq = static_cast<size_t>(n.inputs[static_cast<size_t>(r.seq_len_q)]);
  const size_t lkv = static_cast<size_t>(n.inputs[static_cast<size_t>(r.seq_len_kv)]);
  narrow(range, lq, 1.0, sq);
  narrow(range, lkv, reach ? std::min(sq, skv) : 1.0, skv);
  // Page tables: any block of the cache, repeats and unused blocks included.
  for (int t : {r.page_table_k, r.page_table_v})
    if (t >= 0) narrow(range, static_cast<size_t>(n.inputs[static_cast<size_t>(t)]), 0.0, extent(1, 0) - 1.0);
}

}  // namespace

namespace {

// "2^-8" for a power of two below 1, else the shortest text of the number.
std::string range_end(double x) {
  int e = 0;
  if (x < 1.0 && std::frexp(x, &e) == 0.5) return "2^" + std::to_string(e - 1);
  return shortest_number(x);
}

// An FP8 attention scale role (input `at` of `n`, named `role`) draws in `r`; the roles each tensor serves are kept
// for the message that refuses a tensor whose roles draw apart.
void draw_scale(const Node& n, size_t at, const char* role, std::pair<double, double> r,
                std::vector<std::pair<double, double>>* range, std::map<size_t, std::vector<std::string>>* roles) {
  const size_t t = static_cast<size_t>(n.inputs[at]);
  narrow(range, t, r.first, r.second);
  (*roles)[t].push_back("node '" + n.name + "' (" + op_kind_name(n.op) + ") " + role + " in [" + range_end(r.first) +
                        ", " + range_end(r.second) + ")");
}

}  // namespace

StatusOr<std::vector<InputDraw>> input_draws(const Graph& g) {
  KILN_RETURN_IF_ERROR(topological_order(g).status());
  const GraphRoles roles(g);
  // The range a tensor needs, from the first consumer that cares.
  std::vector<std::pair<double, double>> range(g.tensors.size(), {-1.0, 1.0});
  std::vector<bool> used(g.tensors.size(), false);
  // Per tensor, the FP8 attention scale roles it serves, each with its range ("node 'attn' scale_s in [128, 256)").
  std::map<size_t, std::vector<std::string>> scale_roles;
  for (const Node& n : g.nodes) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const size_t t = static_cast<size_t>(n.inputs[i]);
      used[t] = true;
      if ((n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm) && i == 1) range[t] = {0.5, 1.5};
      if (n.op == OpKind::kLayerNorm && i == 2) range[t] = {-0.5, 0.5};
      if (n.op == OpKind::kPointwise && i == 1 && n.pointwise.mode == PointwiseMode::kBiasAdd) range[t] = {-0.5, 0.5};
      if (n.op == OpKind::kPointwise && i == 1 && n.pointwise.mode == PointwiseMode::kDiv) range[t] = {0.5, 1.5};
    }
    if (is_attention(n.op)) sdpa_length_ranges(g, n, &range);
    // Ragged offsets follow from the lengths (ragged_offsets): drawn as 0, then written over.
    if (is_ragged_attention(n))
      for (int i : {sdpa_inputs(n).ragged_q, sdpa_inputs(n).ragged_k, sdpa_inputs(n).ragged_v, sdpa_inputs(n).ragged_o})
        if (i >= 0) range[static_cast<size_t>(n.inputs[static_cast<size_t>(i)])] = {0.0, 0.0};
    // FP8 attention's scales as delayed scaling sets them: the descales near 1; P (at most 1) scaled into e4m3's
    // range [128, 256) and read back at [2^-8, 2^-7) (so P's code rounds, and their product need not be 1); o
    // scaled by [1, 2), which keeps it far below e4m3's largest value (448). The backward pass's likewise: P (with
    // its statistics below, at most about 1) as the forward's, so that one training step's forward and backward may
    // share scale_s and descale_s; dS at a power of two by attn_scale (below); the gradients at [1, 2), which
    // keeps them in e4m3's normal range and far below 448.
    // One tensor in several of these roles draws what every role allows (none for scale_s and a descale: refused
    // below, naming the roles).
    if (n.op == OpKind::kSdpaFp8 && n.inputs.size() >= 9) {
      static const char* const kRoles[6] = {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"};
      const std::pair<double, double> ranges[6] = {{0.5, 1.0},       {0.5, 1.0},     {0.5, 1.0},
                                                   {0x1p-8, 0x1p-7}, {128.0, 256.0}, {1.0, 2.0}};
      for (size_t i = 0; i < 6; ++i) draw_scale(n, kFp8DescaleQ + i, kRoles[i], ranges[i], &range, &scale_roles);
    }
    if (n.op == OpKind::kSdpaFp8Backward && n.inputs.size() >= 18) {
      static const char* const kRoles[12] = {"descale_q",  "descale_k", "descale_v",  "descale_o",
                                             "descale_do", "descale_s", "descale_dp", "scale_s",
                                             "scale_dq",   "scale_dk",  "scale_dv",   "scale_dp"};
      // cuDNN's dS carries attn_scale before it is rounded (|dS| at most about 12 attn_scale for these inputs):
      // scale_dp in [2^e, 2^(e+1)) with 2^e at most 12 / attn_scale keeps it below e4m3's 448 and in its range.
      const auto& qd = g.tensors[static_cast<size_t>(n.inputs[0])].dims;
      const double attn = std::fabs(
          n.sdpa.attn_scale.value_or(qd.size() == 4 ? 1.0 / std::sqrt(static_cast<double>(qd[3].value)) : 1.0));
      const double dp = std::exp2(std::floor(std::log2(12.0 / std::max(attn, 1e-30))));
      const std::pair<double, double> ranges[12] = {{0.5, 1.0}, {0.5, 1.0},       {0.5, 1.0},           {0.5, 1.0},
                                                    {0.5, 1.0}, {0x1p-8, 0x1p-7}, {0.5 / dp, 1.0 / dp}, {128.0, 256.0},
                                                    {1.0, 2.0}, {1.0, 2.0},       {1.0, 2.0},           {dp, 2.0 * dp}};
      for (size_t i = 0; i < 12; ++i) draw_scale(n, kFp8bDescaleQ + i, kRoles[i], ranges[i], &range, &scale_roles);
    }
    // Dropout's seed and offset: non-negative, as a training loop's are (any value draws some mask).
    if (n.sdpa.dropout > 0) {
      const SdpaInputs x = sdpa_inputs(n);
      for (int i : {x.seed, x.offset})
        if (i >= 0) narrow(&range, static_cast<size_t>(n.inputs[static_cast<size_t>(i)]), 0.0, 1048576.0);
    }
    // A backward pass's statistics near a full row's log-sum-exp (ln Skv for scores near 0), so that P = exp(S - L)
    // is a softmax's size, as the forward would have written it: [2^e, 2^(e+1)) around ln Skv, a range the
    // generator draws exactly.
    if (n.op == OpKind::kSdpaBackward && n.inputs.size() > 5) {
      const double ln_keys = std::log(std::max(2.0, static_cast<double>(sdpa_keys_extent(g, n))));
      const double lo = std::exp2(std::floor(std::log2(std::max(1.0, ln_keys))));
      range[static_cast<size_t>(n.inputs[5])] = {lo, 2.0 * lo};
    }
    // FP8's backward pass rounds P and dS to fp8 at one scale each for the whole tensor: statistics spread over
    // [2^e, 2^(e+1)) would spread P over orders of magnitude, below e4m3's range for some rows and past it for
    // others. In [1, 2) every P is within a factor of e of e^(score - 1.5), whatever Skv.
    if (n.op == OpKind::kSdpaFp8Backward && n.inputs.size() > 5) range[static_cast<size_t>(n.inputs[5])] = {1.0, 2.0};
  }
  for (int t : g.outputs) used[static_cast<size_t>(t)] = true;
  std::vector<InputDraw> draws;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    if (roles.producer(static_cast<int>(i)) >= 0 || !used[i]) continue;
    InputDraw d;
    d.tensor = static_cast<int>(i);
    d.dtype = roles.dtype_of(d.tensor);
    d.lo = range[i].first;
    d.hi = range[i].second;
    d.by_value = g.tensors[i].by_value;
    d.value = g.tensors[i].value;
    if (!d.by_value && is_integer(d.dtype) && std::ceil(d.lo) > std::floor(d.hi))
      return invalid_argument("input '" + g.tensors[i].name + "': its roles allow no value in common (" +
                              std::to_string(d.lo) + " to " + std::to_string(d.hi) + ")");
    if (!d.by_value && scale_roles.count(i) && !(d.lo < d.hi)) {
      std::string served;
      for (const std::string& r : scale_roles[i]) served += (served.empty() ? "" : "; ") + r;
      return invalid_argument("input '" + g.tensors[i].name +
                              "': it serves FP8 attention scale roles whose checks draw apart (" + served +
                              "): give each such role its own tensor");
    }
    if (!d.by_value && !is_integer(d.dtype) && !input_range_is_exact(d.lo, d.hi))
      return invalid_argument("input '" + g.tensors[i].name + "': the generator cannot draw [" + std::to_string(d.lo) +
                              ", " + std::to_string(d.hi) + ") exactly");
    draws.push_back(d);
  }
  return draws;
}

StatusOr<std::map<int, std::vector<double>>> ragged_offsets(const Graph& g, uint64_t seed) {
  std::map<int, std::vector<double>> out;
  bool any = false;
  for (const Node& n : g.nodes) any = any || is_ragged_attention(n);
  if (!any) return out;
  KILN_ASSIGN_OR_RETURN(std::vector<InputDraw> draws, input_draws(g));
  // A length tensor's values as drawn (the very ones make_random_inputs and generate_inputs_on_device produce).
  const auto lengths = [&](int t) {
    for (const InputDraw& d : draws)
      if (d.tensor == t) {
        HostTensor h = HostTensor::zeros(d.dtype, tensor_dims(g, t), tensor_strides(g, t));
        fill_input(h, seed, static_cast<uint32_t>(t), d.lo, d.hi);
        return h.values();
      }
    return std::vector<double>{};
  };
  for (const Node& n : g.nodes) {
    const SdpaInputs r = sdpa_inputs(n);
    if (!is_ragged_attention(n) || r.ragged_o < 0 || r.seq_len_q < 0) continue;
    const auto dims = [&](size_t input) { return tensor_dims(g, n.inputs[input]); };
    const auto q = dims(0), k = dims(1), v = dims(2);
    const std::vector<double> lq = lengths(n.inputs[static_cast<size_t>(r.seq_len_q)]),
                              lkv = lengths(n.inputs[static_cast<size_t>(r.seq_len_kv)]);
    struct Role {
      int input;
      const std::vector<double>* len;
      int64_t rows, width;
    };
    for (const Role& role : {Role{r.ragged_q, &lq, q[2], q[1] * q[3]}, Role{r.ragged_k, &lkv, k[2], k[1] * k[3]},
                             Role{r.ragged_v, &lkv, k[2], v[1] * v[3]}, Role{r.ragged_o, &lq, q[2], q[1] * v[3]}}) {
      if (role.input < 0) continue;  // k's and v's over paged caches
      std::vector<double> off(static_cast<size_t>(q[0] + 1), 0.0);
      for (int64_t b = 0; b < q[0] && static_cast<size_t>(b) < role.len->size(); ++b) {
        const int64_t len =
            std::clamp<int64_t>(static_cast<int64_t>((*role.len)[static_cast<size_t>(b)]), 0, role.rows);
        off[static_cast<size_t>(b + 1)] =
            off[static_cast<size_t>(b)] + static_cast<double>((len + (role.rows - len) / 2) * role.width);
      }
      out[n.inputs[static_cast<size_t>(role.input)]] =
          std::move(off);  // a shared tensor: validate made its roles agree
    }
  }
  return out;
}

void fill_input(HostTensor& h, uint64_t seed, uint32_t tensor, double lo, double hi) {
  const bool integer = h.dtype == DataType::kInt8 || h.dtype == DataType::kInt32 || h.dtype == DataType::kInt64;
  const int64_t ilo = static_cast<int64_t>(std::ceil(lo));
  const uint32_t icount = static_cast<uint32_t>(std::max<int64_t>(1, static_cast<int64_t>(std::floor(hi)) - ilo + 1));
  const int64_t n = h.element_count();
  const size_t r = h.dims.size();
  // Row-major position -> storage offset, chunk by chunk on every core (the values do not depend on it).
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c = next++; c < chunks; c = next++) {
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      std::vector<int64_t> idx(r, 0);
      int64_t rem = begin, off = 0;
      for (size_t k = r; k-- > 0;) {
        idx[k] = rem % h.dims[k];
        rem /= h.dims[k];
        off += idx[k] * h.strides[k];
      }
      for (int64_t pos = begin; pos < end; ++pos) {
        const uint32_t bits = input_bits(seed, tensor, static_cast<uint64_t>(pos));
        double v = round_to_dtype(
            input_value(bits, static_cast<float>(lo), static_cast<float>(hi - lo), integer, ilo, icount), h.dtype);
        if (pos == 0 && v == 0.0) v = round_to_dtype(input_nonzero_fallback(lo, hi), h.dtype);
        h.storage[static_cast<size_t>(off)] = v;
        for (size_t k = r; k-- > 0;) {
          if (++idx[k] < h.dims[k]) {
            off += h.strides[k];
            break;
          }
          off -= (h.dims[k] - 1) * h.strides[k];
          idx[k] = 0;
        }
      }
    }
  };
  const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    worker();
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

}  // namespace kiln::validate_internal

namespace kiln {

const char* reference_kind_name(ReferenceKind k) { return enum_name(kReferenceKindNames, k); }
StatusOr<ReferenceKind> parse_reference_kind(const std::string& name) {
  return parse_enum(kReferenceKindNames, name, "reference kind");
}

StatusOr<double> estimate_macs(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(auto p, validate_internal::prepare_graph(graph, false));
  return p.macs;
}

namespace {
StatusOr<std::map<int, HostTensor>> make_random_inputs_unchecked(const Graph& g, uint64_t seed);
}  // namespace

StatusOr<std::map<int, HostTensor>> make_random_inputs(const Graph& g, uint64_t seed) {
  // One host buffer per input, sized by the graph: a graph too large for this host is a Status.
  return catch_exceptions("graph '" + g.name + "': making random inputs",
                          [&] { return make_random_inputs_unchecked(g, seed); });
}

namespace {
StatusOr<std::map<int, HostTensor>> make_random_inputs_unchecked(const Graph& g, uint64_t seed) {
  using namespace validate_internal;
  KILN_ASSIGN_OR_RETURN(std::vector<InputDraw> draws, input_draws(g));
  std::map<int, HostTensor> out;
  for (const InputDraw& d : draws) {
    HostTensor h = HostTensor::zeros(d.dtype, tensor_dims(g, d.tensor), tensor_strides(g, d.tensor));
    if (d.by_value) {
      h.set_values(std::vector<double>(static_cast<size_t>(h.element_count()), d.value));
    } else {
      fill_input(h, seed, static_cast<uint32_t>(d.tensor), d.lo, d.hi);
    }
    out.emplace(d.tensor, std::move(h));
  }
  KILN_ASSIGN_OR_RETURN(auto offsets, ragged_offsets(g, seed));
  for (auto& [t, values] : offsets)
    if (auto it = out.find(t); it != out.end()) it->second.set_values(values);
  return out;
}
}  // namespace

}  // namespace kiln
