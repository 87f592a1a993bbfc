// KernelPlan: Kiln's own kernels as engine configurations (src/lower/kernel_plan.h).
#include "lower/kernel_plan.h"

#include <algorithm>
#include <cstring>

namespace kiln::lower_detail {
namespace {

constexpr char kMagic[] = "KILNKRN1\n";  // serialize()'s first bytes
constexpr int64_t kWholeAmax = 1;        // kernel 1: the AMAX of a whole tensor

// Row-major with no gaps: the last stride 1, each other the product of the extents after it.
bool dense(const TensorDesc& t) {
  if (t.strides.size() != t.dims.size()) return false;
  int64_t expect = 1;
  for (size_t i = t.dims.size(); i-- > 0;) {
    if (t.dims[i].value != 1 && t.strides[i] != expect) return false;
    expect *= t.dims[i].value;
  }
  return true;
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
  for (size_t ax = 0; ax < x.dims.size(); ++ax)
    if (x.dims[ax].value > 1 &&
        std::find(r.reduction.axes.begin(), r.reduction.axes.end(), static_cast<int>(ax)) == r.reduction.axes.end()) {
      *why_not = "node '" + r.name + "' keeps axis " + std::to_string(ax) + " (Kiln's kernel reduces every axis)";
      return std::nullopt;
    }
  if (!dense(x)) {
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

StatusOr<std::vector<EngineConfig>> KernelPlan::candidates(const AmaxProblem&) {
  std::vector<EngineConfig> out;
  for (int64_t threads : {256, 512})
    for (int64_t blocks : {2, 4, 8})
      out.push_back(EngineConfig{kKilnKernelEngineBase + kWholeAmax, {{"blocks", blocks}, {"threads", threads}}});
  return out;
}

StatusOr<KernelPlan> KernelPlan::build(const AmaxProblem& p, const EngineConfig& config) {
  auto knob = [&](const char* name) -> int64_t {
    auto it = config.knobs.find(name);
    return it == config.knobs.end() ? -1 : it->second;
  };
  const int64_t per_sm = knob("blocks"), threads = knob("threads");
  if (config.engine_id != kKilnKernelEngineBase + kWholeAmax || config.knobs.size() != 2 || per_sm < 1 || per_sm > 32 ||
      threads < 32 || threads > 1024 || threads % 32 != 0)
    return not_supported(config.identity() + " is not a kernel Kiln has (knl1_blocks=B_threads=T: B 1-32 per SM, T a "
                                             "multiple of 32 up to 1024)");
  KILN_ASSIGN_OR_RETURN(int sms, sm_count());
  KernelPlan plan;
  plan.problem_ = p;
  plan.config_ = config;
  // No more blocks than 16-byte vectors need (a small tensor gets one block).
  const int64_t vectors = std::max<int64_t>(1, p.count * static_cast<int64_t>(dtype_size(p.dtype)) / 16);
  plan.blocks_ = static_cast<int>(std::clamp<int64_t>((vectors + threads - 1) / threads, 1, per_sm * sms));
  plan.threads_ = static_cast<int>(threads);
  return plan;
}

bool KernelPlan::is_blob(const std::vector<uint8_t>& bytes) { return has_magic(bytes, kMagic); }

std::vector<uint8_t> KernelPlan::serialize() const {
  const std::string text = kMagic + config_.identity();
  return std::vector<uint8_t>(text.begin(), text.end());
}

StatusOr<KernelPlan> KernelPlan::deserialize(const AmaxProblem& p, const std::vector<uint8_t>& bytes) {
  if (!is_blob(bytes)) return corruption("the plan bytes are not a Kiln kernel's");
  const std::string id(bytes.begin() + static_cast<long>(sizeof(kMagic) - 1), bytes.end());
  auto config = EngineConfig::parse(id);
  if (!config.is_ok() || !is_kiln_kernel_engine(config->engine_id))
    return corruption("a Kiln kernel plan's bytes do not name a Kiln kernel");
  return build(p, *config);
}

Status KernelPlan::execute(cudaStream_t stream, const std::map<int, void*>& ptrs, void*) const {
  auto in = ptrs.find(problem_.input), out = ptrs.find(problem_.output);
  if (in == ptrs.end() || !in->second || out == ptrs.end() || !out->second)
    return invalid_argument("execute: a buffer of " + config_.identity() + " is missing");
  return launch_whole_amax(in->second, problem_.dtype, problem_.count, static_cast<float*>(out->second), blocks_,
                           threads_, stream);
}

}  // namespace kiln::lower_detail
