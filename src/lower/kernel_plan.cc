// KernelPlan: Kiln's own kernels as engine configurations (src/lower/kernel_plan.h).
#include "lower/kernel_plan.h"

#include "lower/cublaslt_plan.h"
#include "lower/dynamic_smem.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::lower_detail {
namespace {

constexpr char kMagic[] = "KILNKRN1\n";  // serialize()'s first bytes
constexpr int64_t kWholeAmax = 1;        // kernel 1: the AMAX of a whole tensor
constexpr int64_t kNorm = 2;             // kernel 2: a layer_norm or rms_norm
constexpr int64_t kSkinnyGemm = 3;       // kernel 3: a GEMM of at most 16 rows with its epilogue
constexpr int64_t kPagedDecode = 4;      // kernel 4: decode attention over paged caches, keys split over CTAs

// The first axis of `x` longer than 1 that `r` does not reduce; -1 when it reduces every such axis.
int kept_axis(const TensorDesc& x, const ReductionAttrs& r) {
  for (size_t ax = 0; ax < x.dims.size(); ++ax)
    if (x.dims[ax].value > 1 && std::find(r.axes.begin(), r.axes.end(), static_cast<int>(ax)) == r.axes.end())
      return static_cast<int>(ax);
  return -1;
}

StatusOr<int> sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0)
    return unavailable("Kiln's kernels: no current CUDA device");
  return sms;
}

}  // namespace

std::optional<AmaxProblem> match_whole_amax(const Graph& g, std::string* why_not) {
  std::string scratch;
  if (!why_not) why_not = &scratch;
  if (g.nodes.size() != 1 || g.nodes[0].op != OpKind::kReduction || g.nodes[0].reduction.mode != ReductionMode::kAmax ||
      g.nodes[0].inputs.size() != 1 || g.nodes[0].outputs.size() != 1) {
    *why_not = "the graph is not one reduce_amax";
    return std::nullopt;
  }
  const Node& r = g.nodes[0];
  AmaxProblem p;
  p.input = r.inputs[0];
  p.output = r.outputs[0];
  const TensorDesc& x = g.tensors[static_cast<size_t>(p.input)];
  if (!g.dynamic_dims.empty() || !g.is_graph_input(p.input) || x.by_value || !g.is_graph_output(p.output)) {
    *why_not = "the reduction's input is not a static graph input, or its output not a graph output";
    return std::nullopt;
  }
  if (int kept = kept_axis(x, r.reduction); kept >= 0) {
    *why_not = "node '" + r.name + "' keeps axis " + std::to_string(kept) + " (Kiln's kernel reduces every axis)";
    return std::nullopt;
  }
  if (!x.packed_row_major()) {
    *why_not = "input '" + x.name + "' is not densely packed";
    return std::nullopt;
  }
  p.dtype = g.dtype_of(p.input);
  if (p.dtype != DataType::kFloat32 && p.dtype != DataType::kFloat16 && p.dtype != DataType::kBFloat16) {
    *why_not = std::string("input '") + x.name + "' is " + dtype_name(p.dtype);
    return std::nullopt;
  }
  if (g.dtype_of(p.output) != DataType::kFloat32) {
    *why_not = "the AMAX is not fp32";
    return std::nullopt;
  }
  p.count = x.element_count();
  return p;
}

std::optional<NormProblem> match_norm(const Graph& g, std::string* why_not) {
  std::string scratch;
  if (!why_not) why_not = &scratch;
  if (g.nodes.size() != 1 || (g.nodes[0].op != OpKind::kLayerNorm && g.nodes[0].op != OpKind::kRmsNorm)) {
    *why_not = "the graph is not one layer_norm or rms_norm";
    return std::nullopt;
  }
  const Node& n = g.nodes[0];
  const bool layer = n.op == OpKind::kLayerNorm;
  if (n.inputs.size() != (layer ? 3u : 2u) || n.outputs.size() != 1) {
    *why_not = "node '" + n.name + "' has inputs or outputs Kiln's norm kernel does not take";
    return std::nullopt;
  }
  NormProblem p;
  p.x = n.inputs[0];
  p.scale = n.inputs[1];
  p.bias = layer ? n.inputs[2] : -1;
  p.y = n.outputs[0];
  if (!g.dynamic_dims.empty() || !g.is_graph_output(p.y)) {
    *why_not = "the norm's shapes are dynamic, or its output is not a graph output";
    return std::nullopt;
  }
  for (int t : {p.x, p.scale, p.bias, p.y}) {
    if (t < 0) continue;
    const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
    if (t != p.y && (!g.is_graph_input(t) || d.by_value)) {
      *why_not = "'" + d.name + "' is not a graph input held in memory";
      return std::nullopt;
    }
    if (!d.packed_row_major()) {
      *why_not = "'" + d.name + "' is not densely packed";
      return std::nullopt;
    }
  }
  p.x_dtype = g.dtype_of(p.x);
  p.y_dtype = g.dtype_of(p.y);
  p.param_dtype = g.dtype_of(p.scale);
  const auto x_or_fp32 = [&](DataType t) { return t == p.x_dtype || t == DataType::kFloat32; };
  if (p.x_dtype != DataType::kFloat32 && p.x_dtype != DataType::kFloat16 && p.x_dtype != DataType::kBFloat16) {
    *why_not = std::string("x is ") + dtype_name(p.x_dtype);
    return std::nullopt;
  }
  if (!x_or_fp32(p.y_dtype) || !x_or_fp32(p.param_dtype) || (layer && g.dtype_of(p.bias) != p.param_dtype)) {
    *why_not = std::string("y, scale and bias are ") + dtype_name(p.y_dtype) + ", " + dtype_name(p.param_dtype) +
               (layer ? std::string(", ") + dtype_name(g.dtype_of(p.bias)) : std::string()) +
               " (Kiln's norm kernel takes x's dtype or fp32 for y, and one of them for scale and bias)";
    return std::nullopt;
  }
  const TensorDesc& x = g.tensors[static_cast<size_t>(p.x)];
  p.rows = x.dims.empty() ? 0 : x.dims[0].value;
  p.hidden = p.rows > 0 ? x.element_count() / p.rows : 0;
  if (p.rows < 1 || p.hidden < 1 || p.hidden > (int64_t{1} << 30) || p.rows > (int64_t{1} << 31) - 1) {
    *why_not =
        "rows " + std::to_string(p.rows) + " of " + std::to_string(p.hidden) + " elements is past the kernel's range";
    return std::nullopt;
  }
  p.epsilon = static_cast<float>(n.norm.epsilon);
  return p;
}

namespace {

// The graph's one reduce_amax over every axis of a graph output into an fp32 graph output, taken out of `rest` (its
// node and its output): the node's index in `g`; -1 where there is none (`rest` unchanged); -2 where one is there but
// not of that form.
int take_whole_amax(const Graph& g, Graph* rest, std::string* why_not) {
  int found = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != OpKind::kReduction || n.reduction.mode != ReductionMode::kAmax) continue;
    if (found != -1 || n.inputs.size() != 1 || n.outputs.size() != 1 || !g.is_graph_output(n.inputs[0]) ||
        !g.is_graph_output(n.outputs[0]) || g.dtype_of(n.outputs[0]) != DataType::kFloat32) {
      *why_not = "node '" + n.name + "' is not the one AMAX of a graph output into an fp32 graph output";
      return -2;
    }
    if (int kept = kept_axis(g.tensors[static_cast<size_t>(n.inputs[0])], n.reduction); kept >= 0) {
      *why_not = "node '" + n.name + "' keeps axis " + std::to_string(kept) + " (Kiln's GEMM takes the whole AMAX)";
      return -2;
    }
    found = static_cast<int>(i);
  }
  if (found < 0) return -1;
  const int out = g.nodes[static_cast<size_t>(found)].outputs[0];
  rest->nodes.erase(rest->nodes.begin() + found);
  rest->outputs.erase(std::remove(rest->outputs.begin(), rest->outputs.end(), out), rest->outputs.end());
  return found;
}

}  // namespace

std::optional<SkinnyGemmProblem> match_skinny_gemm(const Graph& g, std::string* why_not) {
  std::string scratch;
  if (!why_not) why_not = &scratch;
  Graph rest = g;
  const int amax_node = take_whole_amax(g, &rest, why_not);
  if (amax_node == -2) return std::nullopt;
  std::optional<BltProblem> c = match_gemm_chain(rest, why_not);
  if (!c) return std::nullopt;
  // cuBLASLt's terms (cublaslt_plan.h): its A is b^T, untransposed with ld n when b is row-major and dense; its B is
  // a^T, untransposed with ld k when a is; its D is y^T, ld n when y is.
  const auto name = [&](int t) { return "'" + g.tensors[static_cast<size_t>(t)].name + "'"; };
  if (c->batch != 1 || c->a.batch_stride != 0 || c->b.batch_stride != 0) {
    *why_not = "a batched matmul (Kiln's skinny GEMM runs one)";
    return std::nullopt;
  }
  if (c->n > 16) {
    *why_not = name(c->b.tensor) + " has " + std::to_string(c->n) + " rows (Kiln's skinny GEMM takes at most 16)";
    return std::nullopt;
  }
  // b column-major (b^T [n, k] row-major): cuBLASLt's A transposed, ld k.
  const bool b_rows = !c->a.transposed && c->a.ld == c->m, b_cols = c->a.transposed && c->a.ld == c->k;
  if (c->b.transposed || c->b.ld != c->k || c->d.ld != c->m || (!b_rows && !b_cols)) {
    *why_not = "a and y are not both row-major and dense, or b is neither row-major nor column-major and dense";
    return std::nullopt;
  }
  const DataType t = c->a.dtype;
  if ((t != DataType::kBFloat16 && t != DataType::kFloat16 && t != DataType::kFp8E4M3) || t != c->b.dtype) {
    *why_not = std::string("the inputs are ") + dtype_name(c->b.dtype) + " and " + dtype_name(t) +
               " (Kiln's skinny GEMM takes fp16, bf16 or fp8_e4m3 pairs)";
    return std::nullopt;
  }
  if (t == DataType::kFp8E4M3 && !b_cols) {
    *why_not = name(c->a.tensor) + " is row-major fp8 (Kiln's skinny GEMM reads fp8 b column-major, [k, n] with "
                                   "strides [.., 1, k], the FP8 tensor cores' layout)";
    return std::nullopt;
  }
  SkinnyGemmProblem p;
  p.a = c->b.tensor;
  p.b = c->a.tensor;
  p.bias = c->bias_tensor;
  p.y = c->d.tensor;
  if (amax_node >= 0) {
    const Node& r = g.nodes[static_cast<size_t>(amax_node)];
    if (r.inputs[0] != p.y) {
      *why_not = "the AMAX does not read the GEMM's result";
      return std::nullopt;
    }
    p.amax = r.outputs[0];
  }
  p.dtype = t;
  p.b_cols = b_cols;
  p.bias_dtype = c->bias_dtype;
  p.y_dtype = c->d.dtype;
  p.m = c->n;
  p.n = c->m;
  p.k = c->k;
  switch (c->activation) {
    case BltProblem::Activation::kNone: p.act = SkinnyGemmProblem::Act::kNone; break;
    case BltProblem::Activation::kRelu: p.act = SkinnyGemmProblem::Act::kRelu; break;
    case BltProblem::Activation::kGeluErf: p.act = SkinnyGemmProblem::Act::kGeluErf; break;
    case BltProblem::Activation::kGeluTanh: p.act = SkinnyGemmProblem::Act::kGeluTanh; break;
  }
  if (p.n / 64 > 65535) {  // the grid's y extent counts the tiles of n
    *why_not = "n=" + std::to_string(p.n) + " is past Kiln's skinny GEMM's grid (at most 65535 tiles of 64)";
    return std::nullopt;
  }
  if (p.n % 64 != 0 || p.k % skinny_k_step(p) != 0) {
    *why_not = "n=" + std::to_string(p.n) + " is not a multiple of 64 or k=" + std::to_string(p.k) + " of " +
               std::to_string(skinny_k_step(p)) + " (Kiln's skinny GEMM's tiles)";
    return std::nullopt;
  }
  return p;
}

namespace {

// The paged decode's node: an sdpa over paged caches with a padding mask, one query a head, o alone, no bias, no
// ragged tensors, no band but causal bottom-right; "" where it is one, else why not.
std::string decode_node_why_not(const Graph& g) {
  if (g.nodes.size() != 1 || g.nodes[0].op != OpKind::kSdpa) return "the graph is not one sdpa";
  const Node& n = g.nodes[0];
  const SdpaAttrs& a = n.sdpa;
  if (!a.paged || !a.padding || a.ragged) return "the sdpa is not over paged caches (or is ragged)";
  if (n.outputs.size() != 1 || sdpa_inputs(n).bias >= 0) return "the sdpa has a bias or writes its statistics";
  const bool every_key = !a.masked() || (a.causal && !a.left_bound && a.alignment == DiagonalAlignment::kBottomRight);
  if (!every_key || a.dropout > 0) return "the sdpa has a band other than causal bottom-right (or dropout)";
  if (!g.dynamic_dims.empty()) return "the graph has dynamic dims";
  return "";
}

}  // namespace

std::optional<PagedDecodeProblem> match_paged_decode(const Graph& g, std::string* why_not) {
  std::string scratch;
  if (!why_not) why_not = &scratch;
  if ((*why_not = decode_node_why_not(g)) != "") return std::nullopt;
  const Node& n = g.nodes[0];
  const SdpaInputs r = sdpa_inputs(n);
  PagedDecodeProblem p;
  p.q = n.inputs[0];
  p.k = n.inputs[1];
  p.v = n.inputs[2];
  p.seq_len_q = n.inputs[static_cast<size_t>(r.seq_len_q)];
  p.seq_len_kv = n.inputs[static_cast<size_t>(r.seq_len_kv)];
  p.table_k = n.inputs[static_cast<size_t>(r.page_table_k)];
  p.table_v = n.inputs[static_cast<size_t>(r.page_table_v)];
  p.o = n.outputs[0];
  const auto& t = [&](int i) -> const TensorDesc& { return g.tensors[static_cast<size_t>(i)]; };
  for (int i : {p.q, p.k, p.v, p.o, p.seq_len_q, p.seq_len_kv, p.table_k, p.table_v})
    if (!t(i).packed_row_major() || t(i).by_value || t(i).dims.size() != 4) {
      *why_not = "tensor '" + t(i).name + "' is not dense row-major";
      return std::nullopt;
    }
  p.dtype = g.dtype_of(p.q);
  for (int i : {p.k, p.v, p.o})
    if (g.dtype_of(i) != p.dtype || (p.dtype != DataType::kFloat16 && p.dtype != DataType::kBFloat16)) {
      *why_not = "q, k, v and o are not all fp16 or all bf16";
      return std::nullopt;
    }
  const auto dim = [&](int i, size_t a) { return t(i).dims[a].value; };
  p.b = dim(p.q, 0);
  p.h = dim(p.q, 1);
  p.d = dim(p.q, 3);
  p.blocks = dim(p.k, 0);
  p.hk = dim(p.k, 1);
  p.block_size = dim(p.k, 2);
  p.pages = dim(p.table_k, 2);
  const int64_t group = p.hk > 0 ? p.h / p.hk : 0;
  if (dim(p.q, 2) != 1 || dim(p.v, 3) != p.d || (p.d != 64 && p.d != 128) ||
      (group != 1 && group != 2 && group != 4 && group != 8)) {
    *why_not = "not one query a head, head dims 64 or 128 (q's and v's alike) and 1, 2, 4 or 8 query heads a key head";
    return std::nullopt;
  }
  const double d = static_cast<double>(p.d);
  p.scale = static_cast<float>(n.sdpa.attn_scale.value_or(1.0 / std::sqrt(d)));
  return p;
}

std::optional<KernelProblem> match_kiln_kernel(const Graph& g, std::string* why_not) {
  std::string amax_why, norm_why, gemm_why, decode_why;
  if (auto a = match_whole_amax(g, &amax_why)) return KernelProblem(*a);
  if (auto n = match_norm(g, &norm_why)) return KernelProblem(*n);
  if (auto s = match_skinny_gemm(g, &gemm_why)) return KernelProblem(*s);
  if (auto d = match_paged_decode(g, &decode_why)) return KernelProblem(*d);
  if (why_not) *why_not = amax_why + "; " + norm_why + "; " + gemm_why + "; " + decode_why;
  return std::nullopt;
}

namespace {

// The norm's launch for a group of `group` threads a row: chunks a thread holds (a power of two up to 8), 0 where
// the row does not fit or would leave over half the group idle.
int norm_per_thread(const NormProblem& p, int64_t group) {
  const int64_t chunks = p.hidden / norm_chunk_elements(p.x_dtype);
  if (group > 32 && group / 2 >= chunks) return 0;
  for (int per = 1; per <= 8; per *= 2)
    if (per * group >= chunks) return per;
  return 0;
}

bool norm_vectorized(const NormProblem& p) { return p.hidden % norm_chunk_elements(p.x_dtype) == 0; }

}  // namespace

StatusOr<std::vector<EngineConfig>> KernelPlan::candidates(const KernelProblem& problem) {
  std::vector<EngineConfig> out;
  if (std::holds_alternative<AmaxProblem>(problem)) {
    for (int64_t threads : {256, 512})
      for (int64_t blocks : {2, 4, 8})
        out.push_back(EngineConfig{kKilnKernelEngineBase + kWholeAmax, {{"blocks", blocks}, {"threads", threads}}});
    return out;
  }
  if (const auto* d = std::get_if<PagedDecodeProblem>(&problem)) {
    const int64_t optin = device_smem_optin();
    for (int64_t chunk = 64; chunk <= 4096; chunk *= 2) {
      out.push_back(EngineConfig{kKilnKernelEngineBase + kPagedDecode, {{"chunk", chunk}}});
      for (int64_t stages : {2, 3})
        if (optin < 0 || paged_decode_staged_smem(d->d, stages) <= optin)  // 3 stages of head dim 128 pass 99 KiB
          out.push_back(EngineConfig{kKilnKernelEngineBase + kPagedDecode, {{"chunk", chunk}, {"stages", stages}}});
      if (chunk >= d->keys()) break;  // one split holds every key: a longer chunk is the same launch
    }
    return out;
  }
  if (const auto* g = std::get_if<SkinnyGemmProblem>(&problem)) {
    auto offer = [&](int64_t split, int64_t stages, int64_t tile, int64_t kbytes) {
      SkinnyForm f{static_cast<int>(split), static_cast<int>(tile), static_cast<int>(stages), static_cast<int>(kbytes)};
      if (!skinny_form_fits(*g, f)) return;
      EngineConfig c{kKilnKernelEngineBase + kSkinnyGemm, {{"split", split}, {"stages", stages}, {"tile", tile}}};
      if (kbytes != 128) c.knobs["kbytes"] = kbytes;
      out.push_back(std::move(c));
    };
    for (int64_t tile : {64, 128})
      for (int64_t split : {1, 2, 4, 8})
        for (int64_t stages : {4, 8}) offer(split, stages, tile, 128);
    // Column-major b: rows of b^T read 512 bytes at a time. (A row-major form reading 1 KiB of each row of b, tile
    // 512, was slower than tile 128 at every split on an H100 and was removed: bench/results/h100/kernels-c3.)
    for (int64_t split : {1, 2, 4, 8}) offer(split, 4, 64, 512);
    return out;
  }
  const NormProblem& p = std::get<NormProblem>(problem);
  const auto norm = [](int64_t group, int64_t threads, int64_t persist) {
    return EngineConfig{kKilnKernelEngineBase + kNorm, {{"group", group}, {"persist", persist}, {"threads", threads}}};
  };
  if (norm_vectorized(p))
    for (int64_t group = 32; group <= 512; group *= 2)
      for (int64_t threads : {128, 256, 512})
        for (int64_t persist : {0, 1})
          if (group <= threads && norm_per_thread(p, group) > 0) out.push_back(norm(group, threads, persist));
  // A hidden size that is no whole number of chunks, or rows past 512 threads of 8 chunks, run the plain loop, whose
  // one form is a CTA a row.
  if (out.empty()) out.push_back(norm(256, 256, 0));
  return out;
}

StatusOr<KernelPlan> KernelPlan::build(const KernelProblem& problem, const EngineConfig& config) {
  KernelPlan plan;
  plan.problem_ = problem;
  plan.config_ = config;
  if (const auto* a = std::get_if<AmaxProblem>(&problem)) KILN_RETURN_IF_ERROR(plan.build_amax(*a));
  else if (const auto* n = std::get_if<NormProblem>(&problem)) KILN_RETURN_IF_ERROR(plan.build_norm(*n));
  else if (const auto* d = std::get_if<PagedDecodeProblem>(&problem)) KILN_RETURN_IF_ERROR(plan.build_decode(*d));
  else KILN_RETURN_IF_ERROR(plan.build_skinny(std::get<SkinnyGemmProblem>(problem)));
  return plan;
}

namespace {
int64_t knob_of(const EngineConfig& config, const char* name) {
  auto it = config.knobs.find(name);
  return it == config.knobs.end() ? -1 : it->second;
}
}  // namespace

Status KernelPlan::build_amax(const AmaxProblem& p) {
  const int64_t per_sm = knob_of(config_, "blocks"), threads = knob_of(config_, "threads");
  if (config_.engine_id != kKilnKernelEngineBase + kWholeAmax || config_.knobs.size() != 2 || per_sm < 1 ||
      per_sm > 32 || threads < 32 || threads > 1024 || threads % 32 != 0)
    return not_supported(config_.identity() + " is not a kernel Kiln has for a whole-tensor AMAX (knl1_blocks=B_"
                                              "threads=T: B 1-32 per SM, T a multiple of 32 up to 1024)");
  KILN_ASSIGN_OR_RETURN(int sms, sm_count());
  // No more blocks than 16-byte vectors need (a small tensor gets one block).
  const int64_t vectors = std::max<int64_t>(1, p.count * static_cast<int64_t>(dtype_size(p.dtype)) / 16);
  blocks_ = static_cast<int>(std::clamp<int64_t>((vectors + threads - 1) / threads, 1, per_sm * sms));
  threads_ = static_cast<int>(threads);
  return Status::ok();
}

Status KernelPlan::build_norm(const NormProblem& p) {
  const int64_t group = knob_of(config_, "group"), threads = knob_of(config_, "threads");
  const int64_t persist = knob_of(config_, "persist");
  const bool pow2 = group >= 32 && (group & (group - 1)) == 0;
  if (config_.engine_id != kKilnKernelEngineBase + kNorm || config_.knobs.size() != 3 || !pow2 ||
      (threads != 128 && threads != 256 && threads != 512) || group > threads || (persist != 0 && persist != 1))
    return not_supported(config_.identity() + " is not a kernel Kiln has for a norm (knl2_group=G_persist=P_threads=T"
                                              ": T 128, 256 or 512, G a power of two from 32 to T, P 0 or 1)");
  norm_.threads = static_cast<int>(threads);
  norm_.group = static_cast<int>(group);
  norm_.vectorized = norm_vectorized(p);
  norm_.persist = persist == 1;
  norm_.per_thread = norm_.vectorized ? norm_per_thread(p, group) : 1;
  if (norm_.per_thread == 0 && group == threads && persist == 0) {  // the plain loop's form: rows too wide to hold
    norm_.vectorized = false;
    norm_.per_thread = 1;
  }
  if (norm_.per_thread == 0)
    return not_supported(config_.identity() + ": rows of " + std::to_string(p.hidden) + " " + dtype_name(p.x_dtype) +
                         " elements do not fit groups of " + std::to_string(group) +
                         " threads (1-8 chunks of 16 bytes each, at least half the group busy)");
  if (!norm_.vectorized) norm_.group = norm_.threads;  // the plain loop: a CTA a row
  return Status::ok();
}

Status KernelPlan::build_skinny(const SkinnyGemmProblem& p) {
  const int64_t split = knob_of(config_, "split"), tile = knob_of(config_, "tile");
  const bool has_kbytes = config_.knobs.count("kbytes") > 0;
  const int64_t stages = knob_of(config_, "stages"), kbytes = has_kbytes ? knob_of(config_, "kbytes") : 128;
  const size_t knobs = has_kbytes ? 4u : 3u;
  if (config_.engine_id != kKilnKernelEngineBase + kSkinnyGemm || config_.knobs.size() != knobs ||
      (split != 1 && split != 2 && split != 4 && split != 8) || (tile != 64 && tile != 128) ||
      (stages != 4 && stages != 8) || (knobs == 4 && kbytes != 512))
    return not_supported(config_.identity() +
                         " is not a kernel Kiln has for a skinny GEMM (knl3[_kbytes=512]_split=S_stages=P_tile=T"
                         ": S 1, 2, 4 or 8, P 4 or 8, T 64 or 128; 128 bytes of K a stage without the kbytes knob)");
  SkinnyForm f;
  f.split = static_cast<int>(split);
  f.tile = static_cast<int>(tile);
  f.stages = static_cast<int>(stages);
  f.kbytes = static_cast<int>(kbytes);
  const int64_t step = skinny_stage_k(p, f);
  if (step == 0)
    return not_supported(config_.identity() + " is no form of the skinny GEMM for a " + (p.b_cols ? "column" : "row") +
                         "-major b (kbytes 512: column-major b, tile 64, 4 stages)");
  if (!skinny_form_fits(p, f))
    return not_supported(config_.identity() + ": n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                         " do not divide into its tiles (n a multiple of the tile, k of " + std::to_string(step) +
                         " x the split)");
  skinny_ = f;
  return Status::ok();
}

Status KernelPlan::build_decode(const PagedDecodeProblem& p) {
  const int64_t chunk = knob_of(config_, "chunk"), stages = knob_of(config_, "stages");
  const size_t knobs = stages < 0 ? 1 : 2;
  if (config_.engine_id != kKilnKernelEngineBase + kPagedDecode || config_.knobs.size() != knobs || chunk < 64 ||
      chunk > 4096 || (chunk & (chunk - 1)) != 0 || (stages >= 0 && stages != 2 && stages != 3))
    return not_supported(config_.identity() +
                         " is not a kernel Kiln has for paged decode (knl4_chunk=C or knl4_chunk=C_stages=S: C a power "
                         "of two from 64 to 4096, S 2 or 3)");
  chunk_ = chunk;
  stages_ = stages < 0 ? 0 : static_cast<int>(stages);
  const int64_t optin = device_smem_optin();
  if (stages_ > 0 && optin >= 0 && paged_decode_staged_smem(p.d, stages_) > optin)
    return not_supported(config_.identity() + " needs " + std::to_string(paged_decode_staged_smem(p.d, stages_)) +
                         " bytes of shared memory a block; this device allows " + std::to_string(optin));
  workspace_ = paged_decode_workspace(p, chunk, stages_);
  return Status::ok();
}

bool KernelPlan::is_blob(const std::vector<uint8_t>& bytes) { return has_magic(bytes, kMagic); }

std::vector<uint8_t> KernelPlan::serialize() const {
  const std::string text = kMagic + config_.identity();
  return std::vector<uint8_t>(text.begin(), text.end());
}

StatusOr<KernelPlan> KernelPlan::deserialize(const KernelProblem& p, const std::vector<uint8_t>& bytes) {
  if (!is_blob(bytes)) return corruption("the plan bytes are not a Kiln kernel's");
  const std::string id(bytes.begin() + static_cast<long>(sizeof(kMagic) - 1), bytes.end());
  auto config = EngineConfig::parse(id);
  if (!config.is_ok() || !is_kiln_kernel_engine(config->engine_id))
    return corruption("a Kiln kernel plan's bytes do not name a Kiln kernel");
  return build(p, *config);
}

Status KernelPlan::execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void* workspace) const {
  auto buffer = [&](int tensor) -> void* {
    auto it = ptrs.find(tensor);
    return it == ptrs.end() ? nullptr : it->second;
  };
  const std::string missing = "execute: a buffer of " + config_.identity() + " is missing";
  if (const auto* a = std::get_if<AmaxProblem>(&problem_)) {
    void *in = buffer(a->input), *out = buffer(a->output);
    if (!in || !out) return invalid_argument(missing);
    return launch_whole_amax(in, a->dtype, a->count, static_cast<float*>(out), blocks_, threads_, stream);
  }
  if (const auto* g = std::get_if<SkinnyGemmProblem>(&problem_)) {
    void *a = buffer(g->a), *b = buffer(g->b), *y = buffer(g->y), *bias = g->bias >= 0 ? buffer(g->bias) : nullptr;
    if (!a || !b || !y || (g->bias >= 0 && !bias)) return invalid_argument(missing);
    float* amax = nullptr;
    if (g->amax >= 0 && !(amax = static_cast<float*>(buffer(g->amax)))) return invalid_argument(missing);
    return launch_skinny_gemm(*g, skinny_, a, b, bias, y, amax, stream);
  }
  if (const auto* d = std::get_if<PagedDecodeProblem>(&problem_)) {
    const PagedDecodeBuffers x{buffer(d->q),          buffer(d->k),       buffer(d->v),       buffer(d->seq_len_q),
                               buffer(d->seq_len_kv), buffer(d->table_k), buffer(d->table_v), buffer(d->o)};
    if (!x.q || !x.k || !x.v || !x.seq_len_q || !x.seq_len_kv || !x.table_k || !x.table_v || !x.o)
      return invalid_argument(missing);
    if (workspace_ > 0 && !workspace) return invalid_argument("execute: " + config_.identity() + " needs a workspace");
    return launch_paged_decode(*d, chunk_, stages_, x, workspace, stream);
  }
  const NormProblem& n = std::get<NormProblem>(problem_);
  void *x = buffer(n.x), *scale = buffer(n.scale), *y = buffer(n.y), *bias = n.layer() ? buffer(n.bias) : nullptr;
  if (!x || !scale || !y || (n.layer() && !bias)) return invalid_argument(missing);
  return launch_norm(n, norm_, x, scale, bias, y, stream);
}

}  // namespace kiln::lower_detail
