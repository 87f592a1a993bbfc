// LoweredGraph: operation graph, candidates, plan build (heuristic or pinned), serialize, execute.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>

#include "kiln/graph/limits.h"
#include "kiln/lower/cudnn_limits.h"
#include "kiln/lower/lower.h"
#include "lower/fe_status.h"
#include "lower/canonicalize.h"
#include "lower/cublaslt_plan.h"
#include "lower/graph_lowering.h"
#include "lower/kernel_plan.h"
#include "lower/engine_coverage.h"
#include "lower/known_defects.h"

namespace kiln {

using lower_detail::fe_status;

// kiln/graph/limits.h keeps cuDNN's limits for checks made before the frontend is called (the operation limit is
// read from the frontend's own MAX_OPGRAPH_OPS, cudnn_max_operations); the rank must agree with cuDNN's.
static_assert(limits::kCudnnDimMax == static_cast<size_t>(CUDNN_DIM_MAX),
              "kiln/graph/limits.h disagrees with cudnn_graph.h's CUDNN_DIM_MAX");

struct DynamicKernelCache::Impl {
  std::shared_ptr<fe::KernelCache> cache = std::make_shared<fe::KernelCache>();
};

namespace {

// cuDNN refused the graph (no engine configuration, or an operation it does not support in this form) and
// the engine coverage registry knows why: the refusal says so, NotSupported, after cuDNN's own words
// ("... [engine coverage gap reduction_not_innermost: node 'r' ...]"; plan_failure_in_words keeps the bracket).
Status with_coverage_gap(Status s, const Graph& graph) {
  if (s.is_ok()) return s;
  const std::string& m = s.message();
  const bool refused = m.find("No valid engine configs") != std::string::npos ||
                       m.find("no engine configuration") != std::string::npos ||
                       m.find("CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos;
  if (!refused) return s;
  const std::string gap = lower_detail::name_engine_coverage_gap(graph);
  if (gap.empty()) return s;
  Status out(StatusCode::kNotSupported, m + " [engine coverage gap " + gap + "]");
  if (!s.trace().empty()) out.add_trace(s.trace());
  return out;
}

}  // namespace

struct LoweredGraph::Impl {
  Graph graph;    // a copy: tensor identities for execution
  Graph lowered;  // what is handed to the frontend: `graph`, or its known-defect rewrite (same memory)
  std::vector<std::string> workarounds;  // canonical rules and known defects applied (lower/canonicalize.h)
  std::vector<int64_t> uids;             // cuDNN uid of each tensor (lower_detail::tensor_uids of `graph`)
  std::shared_ptr<fe::graph::Graph> fg;
  DeviceProfile profile;
  bool has_profile = false;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<DynamicKernelCache> kernel_cache;  // set: dynamic-shape mode
  bool built = false;
  EngineConfig config;
  int64_t workspace = 0;
  // Set: the built plan is cuBLASLt's (cublaslt_plan.h) or one of Kiln's kernels (kernel_plan.h), not the frontend's.
  std::shared_ptr<const lower_detail::AltPlan> alt;

  // Why a plan of another library cannot be built here (""): they are built on the live device, statically.
  std::string alt_refusal() const {
    if (has_profile)
      return "graph '" + graph.name + "': cuBLASLt's and Kiln's own plans are built on the live device only";
    if (kernel_cache) return "graph '" + graph.name + "': cuBLASLt's and Kiln's own plans are not dynamic-shape builds";
    return "";
  }
  // The graph as the problem `match` finds (match_cublaslt, match_kiln_kernel); NotSupported with the reason where
  // it is not one `who` ("cuBLASLt runs"), or not here.
  template <typename Problem>
  StatusOr<Problem> alt_problem(std::optional<Problem> (*match)(const Graph&, std::string*), const char* who) const {
    if (std::string no = alt_refusal(); !no.empty()) return not_supported(no);
    std::string why;
    std::optional<Problem> p = match(graph, &why);
    if (!p) return not_supported("graph '" + graph.name + "' is not one " + who + ": " + why);
    return *p;
  }
  StatusOr<lower_detail::BltProblem> blt_problem() const {
    return alt_problem(lower_detail::match_cublaslt, "cuBLASLt runs");
  }
  StatusOr<lower_detail::KernelProblem> kernel_problem() const {
    return alt_problem(lower_detail::match_kiln_kernel, "Kiln's kernels run");
  }
  // `config` (a cuBLASLt algorithm's or a Kiln kernel's) built for this graph.
  StatusOr<std::shared_ptr<const lower_detail::AltPlan>> build_alt(const EngineConfig& config) const {
    if (is_kiln_kernel_engine(config.engine_id)) {
      KILN_ASSIGN_OR_RETURN(lower_detail::KernelProblem p, kernel_problem());
      return shared_alt(lower_detail::KernelPlan::build(p, config));
    }
    KILN_ASSIGN_OR_RETURN(lower_detail::BltProblem p, blt_problem());
    return shared_alt(lower_detail::BltPlan::build(p, config));
  }
  // Bytes of a cuBLASLt plan or a Kiln kernel's (their is_blob()) loaded for this graph.
  StatusOr<std::shared_ptr<const lower_detail::AltPlan>> load_alt(const std::vector<uint8_t>& bytes) const {
    if (lower_detail::KernelPlan::is_blob(bytes)) {
      KILN_ASSIGN_OR_RETURN(lower_detail::KernelProblem p, kernel_problem());
      return shared_alt(lower_detail::KernelPlan::deserialize(p, bytes));
    }
    KILN_ASSIGN_OR_RETURN(lower_detail::BltProblem p, blt_problem());
    return shared_alt(lower_detail::BltPlan::deserialize(p, bytes));
  }
  template <typename Plan>
  static StatusOr<std::shared_ptr<const lower_detail::AltPlan>> shared_alt(StatusOr<Plan> plan) {
    if (!plan.is_ok()) return plan.status();
    return std::shared_ptr<const lower_detail::AltPlan>(std::make_shared<Plan>(std::move(plan).value()));
  }

  // A fresh frontend graph with its operation graph built for the target.
  StatusOr<std::shared_ptr<fe::graph::Graph>> fresh_graph() const {
    KILN_ASSIGN_OR_RETURN(auto fg, lower_detail::lower_graph(lowered, uids));
    if (kernel_cache) fg->set_dynamic_shape_enabled(true).set_kernel_cache(kernel_cache->impl_->cache);
    if (has_profile) {
      KILN_RETURN_IF_ERROR(lower_detail::apply_profile(*fg, profile));
      KILN_FE_RETURN_IF_ERROR(fg->build_operation_graph(),
                              "building the operation graph (deviceless, " + profile.gpu_name + ")");
    } else {
      KILN_FE_RETURN_IF_ERROR(fg->build_operation_graph(handle), "building the operation graph");
    }
    return fg;
  }
};

namespace {

// cuDNN's own heuristic modes (A, B, FALLBACK), not cuBLASLt's or Kiln's candidates.
bool is_frontend_mode(HeuristicMode m) { return m != HeuristicMode::kCublasLt && m != HeuristicMode::kKiln; }

fe::HeurMode_t to_fe(HeuristicMode m) {
  switch (m) {
    case HeuristicMode::kA: return fe::HeurMode_t::A;
    case HeuristicMode::kB: return fe::HeurMode_t::B;
    case HeuristicMode::kFallback: return fe::HeurMode_t::FALLBACK;
    case HeuristicMode::kCublasLt:
    case HeuristicMode::kKiln: break;  // not the frontend's: callers pass them over
  }
  return fe::HeurMode_t::A;
}

// Kiln's identity numbers knobs as cuDNN's backend does (cudnnBackendKnobType_t, as in the engine tags
// "eng41_k2=4"); the frontend's KnobType_t is its own, append-only numbering. These convert between them.
StatusOr<fe::KnobType_t> knob_from_backend(int backend_type) {
  fe::KnobType_t k = fe::convert_from_backend_knob_type(static_cast<cudnnBackendKnobType_t>(backend_type));
  cudnnBackendKnobType_t back;
  if (k == fe::KnobType_t::NOT_SET || fe::convert_to_backend_knob_type(k, back) != CUDNN_STATUS_SUCCESS ||
      static_cast<int>(back) != backend_type)
    return not_supported("knob type " + std::to_string(backend_type) + " is unknown to cuDNN Frontend " +
                         std::to_string(CUDNN_FRONTEND_VERSION));
  return k;
}

constexpr EnumName<fe::BehaviorNote_t> kBehaviorNoteNames[] = {
    {fe::BehaviorNote_t::RUNTIME_COMPILATION, "runtime_compilation"},
    {fe::BehaviorNote_t::REQUIRES_FILTER_INT8x32_REORDER, "requires_filter_int8x32_reorder"},
    {fe::BehaviorNote_t::REQUIRES_BIAS_INT8x32_REORDER, "requires_bias_int8x32_reorder"},
    {fe::BehaviorNote_t::SUPPORTS_CUDA_GRAPH_NATIVE_API, "supports_cuda_graph_native_api"}};

// A note this Kiln has no name for (a newer frontend's) is "note_<number>".
std::string behavior_note_name(fe::BehaviorNote_t n) {
  const char* name = enum_name(kBehaviorNoteNames, n, nullptr);
  return name ? name : "note_" + std::to_string(static_cast<int>(n));
}

}  // namespace

StatusOr<std::optional<EngineConfig>> resolve_pin(const Graph& graph, const std::optional<EngineConfig>& override_pin) {
  if (override_pin) return override_pin;
  if (graph.pin.empty()) return std::optional<EngineConfig>();
  auto c = EngineConfig::parse(graph.pin);
  if (!c.is_ok()) return c.status().with_context("graph '" + graph.name + "': spec key 'pin'");
  return std::optional<EngineConfig>(std::move(c).value());
}

DynamicKernelCache::DynamicKernelCache() : impl_(std::make_unique<Impl>()) {}
DynamicKernelCache::~DynamicKernelCache() = default;
// Older frontends (before 1.32; a build for an upgrade's "before", docs/rollout.md "Upgrade report") differ in three
// calls: no entry count of a kernel cache, serialization always with the structure, deserialization without the
// precompiled check (and deviceless deserialization not at all).
#define KILN_FE_HAS_PLAN_ONLY_BLOBS (CUDNN_FRONTEND_VERSION >= 13200)

int64_t DynamicKernelCache::entries() const {
  int64_t n = 0;
#if KILN_FE_HAS_PLAN_ONLY_BLOBS
  if (!impl_->cache->is_finalized() || !impl_->cache->size(n).is_good()) return 0;
#endif
  return n;
}

bool DynamicKernelCache::finalized() const { return impl_->cache->is_finalized(); }

StatusOr<std::string> DynamicKernelCache::to_json() const {
  if (!impl_->cache->is_finalized())
    return failed_precondition("the kernel cache has not been used by a build yet: nothing to serialize");
  std::string json;
  auto st = impl_->cache->to_json(json);
  if (!st.is_good()) return unavailable("cuDNN could not serialize the kernel cache: " + st.get_message());
  return json;
}

StatusOr<std::shared_ptr<DynamicKernelCache>> DynamicKernelCache::from_json(const std::string& json) {
  if (json.empty()) return invalid_argument("an empty kernel cache text");
  auto c = std::make_shared<DynamicKernelCache>();
  auto st = c->impl_->cache->from_json(json);
  if (!st.is_good()) return invalid_argument("cuDNN refused the kernel cache text: " + st.get_message());
  return c;
}

LoweredGraph::LoweredGraph() : impl_(std::make_unique<Impl>()) {}
LoweredGraph::~LoweredGraph() = default;
LoweredGraph::LoweredGraph(LoweredGraph&&) noexcept = default;
LoweredGraph& LoweredGraph::operator=(LoweredGraph&&) noexcept = default;

StatusOr<LoweredGraph> LoweredGraph::create(const Graph& graph, const LowerTarget& target) {
  if (!target.profile && !target.handle)
    return invalid_argument("lowering needs a cuDNN handle (live device) or a device profile (deviceless)");
  // cuDNN's fixed limits first: past one, the frontend overflows an array instead of failing.
  KILN_RETURN_IF_ERROR(check_cudnn_limits(graph));
  LoweredGraph lg;
  lg.impl_->graph = graph;
  KILN_ASSIGN_OR_RETURN(lg.impl_->uids, lower_detail::tensor_uids(graph));
  if (target.work_around_known_defects) {
    KILN_ASSIGN_OR_RETURN(lower_detail::DefectWorkaround w, lower_detail::rewrite_for_cudnn(graph));
    lg.impl_->lowered = std::move(w.graph);
    lg.impl_->workarounds = std::move(w.applied);
  } else {
    lg.impl_->lowered = graph;
  }
  lg.impl_->handle = target.handle;
  if (target.kernel_cache) {
    if (target.profile)
      return invalid_argument("graph '" + graph.name + "': dynamic-shape builds (a kernel cache) need the live device");
    lg.impl_->kernel_cache = target.kernel_cache;
  }
  if (target.profile) {
    lg.impl_->profile = *target.profile;
    lg.impl_->has_profile = true;
  }
  auto fg = lg.impl_->fresh_graph();
  if (!fg.is_ok()) return with_coverage_gap(fg.status(), graph);
  lg.impl_->fg = std::move(fg).value();
  return lg;
}

StatusOr<LoweredGraph> LoweredGraph::create_alt(const Graph& graph, const LowerTarget& target,
                                                const EngineConfig& config) {
  if (config.engine_id < kCublasLtEngineBase)
    return invalid_argument(config.identity() + " is cuDNN's engine: build it with create() and build_config()");
  if (!target.profile && !target.handle)
    return invalid_argument("lowering needs a cuDNN handle (live device) or a device profile (deviceless)");
  if (target.kernel_cache)
    return not_supported(config.identity() + " for graph '" + graph.name +
                         "': cuBLASLt's and Kiln's own plans are static-shape (no kernel cache)");
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, alt_shell(graph, target.handle, target.profile));
  KILN_RETURN_IF_ERROR(lg.build_alt(config));
  return lg;
}

StatusOr<std::vector<CandidateInfo>> LoweredGraph::list_candidates(const std::vector<HeuristicMode>& modes) {
  std::vector<CandidateInfo> out;
  std::map<std::string, size_t> seen;
  for (HeuristicMode m : modes) {
    if (!is_frontend_mode(m)) continue;  // cuBLASLt's and Kiln's: after cuDNN's lists, whatever the order asked
    // Each mode on its own graph, so the lists do not mix and ranks stay per mode.
    KILN_ASSIGN_OR_RETURN(auto fg, impl_->fresh_graph());
    fe::error_t e = fg->create_execution_plans({to_fe(m)});
    if (!e.is_good()) continue;  // a mode that offers nothing is not an error; none at all is, below
    int64_t n = fg->get_execution_plan_count();
    for (int64_t i = 0; i < n; ++i) {
      // From the engine tag, not get_engine_and_knobs_at_index(): the frontend's structured query maps
      // cuDNN's deprecated knob types (e.g. 6, LDGA, which engines still report) to NOT_SET and so loses
      // them (1.32: conv_dgrad lost 8 of its 44 configurations that way).
      std::string tag;
      if (!fg->get_plan_name_at_index(i, tag).is_good()) continue;
      auto cfg = EngineConfig::parse(tag);
      if (!cfg.is_ok()) continue;
      std::string id = cfg->identity();
      auto it = seen.find(id);
      if (it == seen.end()) {
        CandidateInfo ci;
        ci.config = *cfg;
        if (m == HeuristicMode::kA) ci.heuristic_rank = static_cast<int>(i);
        std::vector<fe::BehaviorNote_t> notes;
        if (fg->get_behavior_notes_for_plan_at_index(i, notes).is_good())
          for (auto note : notes) ci.behavior_notes.push_back(behavior_note_name(note));
        seen[id] = out.size();
        out.push_back(ci);
        it = seen.find(id);
      }
      out[it->second].modes.push_back(heuristic_mode_name(m));
    }
  }
  std::string alt_none;  // why cuBLASLt or Kiln's kernels offered nothing, when asked
  KILN_RETURN_IF_ERROR(append_alt_candidates(modes, &out, &seen, &alt_none));
  const bool only_alt = std::none_of(modes.begin(), modes.end(), is_frontend_mode);
  if (out.empty() && only_alt) return not_supported(alt_none);
  if (out.empty())
    return with_coverage_gap(
        not_supported("cuDNN's heuristics offer no engine configuration for graph '" + impl_->graph.name + "'"),
        impl_->graph);
  return out;
}

Status LoweredGraph::append_alt_candidates(const std::vector<HeuristicMode>& modes, std::vector<CandidateInfo>* out,
                                           std::map<std::string, size_t>* seen, std::string* none) const {
  auto asked = [&](HeuristicMode m) { return std::find(modes.begin(), modes.end(), m) != modes.end(); };
  auto add = [&](const std::vector<EngineConfig>& configs, HeuristicMode m) {
    for (const EngineConfig& c : configs)
      if (seen->emplace(c.identity(), out->size()).second)
        out->push_back(CandidateInfo{c, -1, {heuristic_mode_name(m)}, {}});
  };
  if (asked(HeuristicMode::kCublasLt)) {
    // Up to 16 of cuBLASLt's heuristic list, each needing at most 256 MiB of workspace (the tuner skips any past
    // its own limit). A cuBLASLt that cannot answer offers none: the other candidates stand alone.
    auto problem = impl_->blt_problem();
    auto configs = problem.is_ok() ? lower_detail::BltPlan::candidates(*problem, 16, int64_t{256} << 20)
                                   : StatusOr<std::vector<EngineConfig>>(problem.status());
    if (!configs.is_ok()) *none = configs.status().message();
    else if (configs->empty()) *none = "cuBLASLt's heuristic offers no algorithm for " + problem->describe();
    else add(*configs, HeuristicMode::kCublasLt);
  }
  if (asked(HeuristicMode::kKiln)) {
    auto problem = impl_->kernel_problem();
    auto configs = problem.is_ok() ? lower_detail::KernelPlan::candidates(*problem)
                                   : StatusOr<std::vector<EngineConfig>>(problem.status());
    if (!configs.is_ok()) *none += (none->empty() ? "" : "; ") + configs.status().message();
    else add(*configs, HeuristicMode::kKiln);
  }
  return Status::ok();
}

Status LoweredGraph::build_heuristic(const std::vector<HeuristicMode>& modes) {
  return with_coverage_gap(build_heuristic_plan(modes), impl_->graph);
}

bool wants_fp32_gemm_math(const Graph& g) {
  for (const Node& n : g.nodes) {
    const bool gemm = n.op == OpKind::kMatmul || n.op == OpKind::kConvFprop || n.op == OpKind::kConvDgrad ||
                      n.op == OpKind::kConvWgrad;
    if (gemm && g.dtype_of(n.inputs[0]) == DataType::kFloat32) return true;
  }
  return false;
}

Status LoweredGraph::build_heuristic_plan(const std::vector<HeuristicMode>& modes) {
  // fp32 graphs: the heuristics' choice among engines that do not use tensor cores (TF32), measured on the
  // H200 (issue 31's sweep: fp32 matmuls and convs from heuristics were wrong by 1e-3, eng7 and eng51, every
  // one caught by first-use verification); cuDNN's own choice where it offers none of those.
  if (wants_fp32_gemm_math(impl_->graph)) {
    Status st = build_heuristic_on(modes, /*without_tensor_cores=*/true);
    if (st.is_ok()) return st;
    KILN_ASSIGN_OR_RETURN(impl_->fg, impl_->fresh_graph());
  }
  return build_heuristic_on(modes, /*without_tensor_cores=*/false);
}

Status LoweredGraph::build_heuristic_on(const std::vector<HeuristicMode>& modes, bool without_tensor_cores) {
  std::vector<fe::HeurMode_t> fm;
  for (auto m : modes)
    if (is_frontend_mode(m)) fm.push_back(to_fe(m));  // cuBLASLt's and Kiln's are tuned, never defaults
  if (fm.empty()) return invalid_argument("building from heuristics needs one of cuDNN's modes (A, B, FALLBACK)");
  if (!impl_->fg) {  // loaded from another library's bytes: no frontend graph yet
    KILN_ASSIGN_OR_RETURN(impl_->fg, impl_->fresh_graph());
  }
  auto& fg = *impl_->fg;
  KILN_FE_RETURN_IF_ERROR(fg.create_execution_plans(fm),
                          "querying cuDNN heuristics for graph '" + impl_->graph.name + "'");
  if (without_tensor_cores) fg.deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE});
  if (impl_->has_profile) {
    KILN_FE_RETURN_IF_ERROR(fg.check_support(), "checking support for graph '" + impl_->graph.name + "'");
  } else {
    KILN_FE_RETURN_IF_ERROR(fg.check_support(impl_->handle), "checking support for graph '" + impl_->graph.name + "'");
  }
  KILN_FE_RETURN_IF_ERROR(fg.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
                          "building a plan for graph '" + impl_->graph.name + "'");
  std::string tag;
  KILN_FE_RETURN_IF_ERROR(fg.get_plan_name(tag), "reading the built plan's engine");
  KILN_ASSIGN_OR_RETURN(impl_->config, EngineConfig::parse(tag));
  KILN_FE_RETURN_IF_ERROR(fg.get_workspace_size(impl_->workspace), "reading the plan's workspace size");
  impl_->alt.reset();
  impl_->built = true;
  return Status::ok();
}

namespace {

// A configuration with a knob type the frontend cannot name (cuDNN's deprecated ones) cannot be made with
// create_execution_plan(); cuDNN's heuristic lists still offer it. A fresh graph whose list, for the mode
// that offers it, has every other configuration deselected by name.
template <typename FreshGraph>
StatusOr<std::shared_ptr<fe::graph::Graph>> graph_offering(const EngineConfig& config, const std::string& what,
                                                           const FreshGraph& fresh_graph) {
  for (HeuristicMode m : {HeuristicMode::kA, HeuristicMode::kB, HeuristicMode::kFallback}) {
    KILN_ASSIGN_OR_RETURN(auto probe, fresh_graph());
    if (!probe->create_execution_plans({to_fe(m)}).is_good()) continue;
    std::vector<std::string> others;
    std::string target;
    for (int64_t i = 0; i < probe->get_execution_plan_count(); ++i) {
      std::string tag;
      if (!probe->get_plan_name_at_index(i, tag).is_good()) continue;
      auto c = EngineConfig::parse(tag);
      if (c.is_ok() && *c == config) target = tag;
      else others.push_back(tag);
    }
    if (target.empty()) continue;
    for (const std::string& o : others)  // the frontend deselects by substring
      if (target.find(o) != std::string::npos)
        return not_supported(what + ": cannot be singled out from cuDNN's list (its name contains " + o + ")");
    KILN_ASSIGN_OR_RETURN(auto fg, fresh_graph());
    fg->deselect_engines(others);
    KILN_FE_RETURN_IF_ERROR(fg->create_execution_plans({to_fe(m)}), "querying cuDNN heuristics for " + what);
    return fg;
  }
  return not_supported(what + ": it has a knob type cuDNN Frontend " + std::to_string(CUDNN_FRONTEND_VERSION) +
                       " cannot set, and cuDNN's heuristics (modes A, B, FALLBACK) do not offer it for this graph");
}

}  // namespace

bool LoweredGraph::has_plan() const { return impl_->built; }
const std::vector<std::string>& LoweredGraph::workarounds() const {
  static const std::vector<std::string> none;  // cuDNN's rewrites are not applied to another library's plan
  return impl_->alt ? none : impl_->workarounds;
}
const EngineConfig& LoweredGraph::config() const { return impl_->config; }
int64_t LoweredGraph::workspace_size() const { return impl_->workspace; }

std::vector<std::string> LoweredGraph::behavior_notes() const {
  std::vector<std::string> out;
  std::vector<fe::BehaviorNote_t> notes;
  if (impl_->built && !impl_->alt && impl_->fg->get_behavior_notes(notes).is_good())
    for (auto n : notes) out.push_back(behavior_note_name(n));
  return out;
}

StatusOr<std::vector<uint8_t>> LoweredGraph::serialize() const {
  if (!impl_->built) return failed_precondition("no plan built to serialize");
  if (impl_->alt) return impl_->alt->serialize();
  std::vector<uint8_t> bytes;
  // Plan only (no graph structure): Kiln rebuilds tensor identities from its own graph, and the plan-only
  // form is smaller and loads faster.
#if KILN_FE_HAS_PLAN_ONLY_BLOBS
  KILN_FE_RETURN_IF_ERROR(impl_->fg->serialize(bytes, /*serialize_structure=*/false),
                          "serializing plan " + impl_->config.identity());
#else
  KILN_FE_RETURN_IF_ERROR(impl_->fg->serialize(bytes), "serializing plan " + impl_->config.identity());
#endif
  return bytes;
}

namespace {

// Parses plan bytes once (the handle path hands the parsed JSON on). Throws nothing: the bytes may be anything.
StatusOr<nlohmann::json> parse_plan_blob(const std::vector<uint8_t>& bytes, const std::string& graph_name) {
  if (bytes.empty()) return corruption("empty plan bytes for graph '" + graph_name + "'");
  nlohmann::json j = nlohmann::json::from_ubjson(bytes, /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return corruption("plan bytes for graph '" + graph_name + "' are not a cuDNN Frontend serialized graph");
  return j;
}

// The serialized form a blob declares ("json_version"; 1.23 wrote "1.0", 1.32 writes and reads only "2.0").
std::string blob_form(const nlohmann::json& j) {
  return j.contains("json_version") && j["json_version"].is_string() ? j["json_version"].get<std::string>() : "none";
}

}  // namespace

StatusOr<LoweredGraph> LoweredGraph::deserialize_for(const Graph& graph, cudnnHandle_t handle,
                                                     const DeviceProfile* profile, const std::vector<uint8_t>& bytes,
                                                     bool frontend_warmup) {
  KILN_RETURN_IF_ERROR(check_cudnn_limits(graph));
  if (lower_detail::BltPlan::is_blob(bytes) || lower_detail::KernelPlan::is_blob(bytes))
    return deserialize_alt(graph, handle, profile, bytes);
  KILN_ASSIGN_OR_RETURN(nlohmann::json j, parse_plan_blob(bytes, graph.name));
  LoweredGraph lg;
  lg.impl_->graph = graph;
  KILN_ASSIGN_OR_RETURN(lg.impl_->uids, lower_detail::tensor_uids(graph));
  // A graph whose known defect cannot be worked around is refused here too (its plan would be wrong).
  KILN_ASSIGN_OR_RETURN(lower_detail::DefectWorkaround w, lower_detail::rewrite_for_cudnn(graph));
  lg.impl_->lowered = std::move(w.graph);
  lg.impl_->workarounds = std::move(w.applied);
  lg.impl_->handle = handle;
  lg.impl_->fg = std::make_shared<fe::graph::Graph>();
  fe::error_t e;
  try {  // the frontend reads fields of the JSON without checking their types
    if (profile) {
      KILN_RETURN_IF_ERROR(lower_detail::apply_profile(*lg.impl_->fg, *profile));
      lg.impl_->profile = *profile;
      lg.impl_->has_profile = true;
#if KILN_FE_HAS_PLAN_ONLY_BLOBS
      e = lg.impl_->fg->deserialize(bytes, /*enforce_precompiled=*/true);
#else
      return not_supported("deviceless plans need cuDNN Frontend 1.32 or later (this build's is " +
                           std::to_string(CUDNN_FRONTEND_VERSION) + ")");
#endif
    } else {
#if KILN_FE_HAS_PLAN_ONLY_BLOBS
      e = lg.impl_->fg->deserialize(handle, j, /*enforce_precompiled=*/true, frontend_warmup);
#else
      (void)frontend_warmup;  // this frontend always warms
      e = lg.impl_->fg->deserialize(handle, bytes);
#endif
    }
  } catch (const std::exception& ex) {
    return corruption("plan bytes for graph '" + graph.name + "' are not a cuDNN Frontend graph: " + ex.what());
  }
  if (e.code == fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT)
    return not_supported("plan bytes for graph '" + graph.name + "' are in cuDNN Frontend serialized form '" +
                         blob_form(j) + "', which frontend " + std::to_string(CUDNN_FRONTEND_VERSION) +
                         " does not read (" + e.err_msg + "): re-tune or re-compile the plan");
  if (!e.is_good())
    return fe_status(e, "deserializing a plan for graph '" + graph.name + "'").with_context("stored plan refused");
  KILN_FE_RETURN_IF_ERROR(lg.impl_->fg->get_workspace_size(lg.impl_->workspace), "reading the workspace size");
  lg.impl_->built = true;
  // Identity is not read back from the frontend (a deserialized graph has no engine list to name it from):
  // callers keep it in their own records.
  return lg;
}

StatusOr<LoweredGraph> LoweredGraph::alt_shell(const Graph& graph, cudnnHandle_t handle, const DeviceProfile* profile) {
  LoweredGraph lg;
  lg.impl_->graph = graph;
  // For a later build of cuDNN's own (a graph cuDNN cannot run right is refused by that build, not here).
  auto w = lower_detail::rewrite_for_cudnn(graph);
  lg.impl_->lowered = w.is_ok() ? std::move(w->graph) : graph;
  lg.impl_->handle = handle;
  KILN_ASSIGN_OR_RETURN(lg.impl_->uids, lower_detail::tensor_uids(graph));
  if (profile) {
    lg.impl_->profile = *profile;
    lg.impl_->has_profile = true;
  }
  return lg;
}

StatusOr<LoweredGraph> LoweredGraph::deserialize_alt(const Graph& graph, cudnnHandle_t handle,
                                                     const DeviceProfile* profile, const std::vector<uint8_t>& bytes) {
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, alt_shell(graph, handle, profile));
  auto plan = lg.impl_->load_alt(bytes);
  if (!plan.is_ok()) return plan.status().with_context("stored plan for graph '" + graph.name + "' refused");
  lg.impl_->alt = std::move(plan).value();
  lg.impl_->config = lg.impl_->alt->config();
  lg.impl_->workspace = lg.impl_->alt->workspace_size();
  lg.impl_->built = true;
  return lg;
}

bool LoweredGraph::can_skip_frontend_warmup() { return KILN_FE_HAS_PLAN_ONLY_BLOBS; }

StatusOr<LoweredGraph> LoweredGraph::deserialize(const Graph& graph, cudnnHandle_t handle,
                                                 const std::vector<uint8_t>& bytes, const EngineConfig& known,
                                                 bool frontend_warmup) {
  if (!handle) return invalid_argument("deserializing a plan needs a cuDNN handle (or a device profile)");
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, deserialize_for(graph, handle, nullptr, bytes, frontend_warmup));
  if (lg.impl_->alt) {  // its bytes name their configuration: a record naming another is not this plan's
    if (known.engine_id >= 0 && known != lg.impl_->config)
      return corruption("stored plan for graph '" + graph.name + "': the record names " + known.identity() +
                        " but its bytes hold " + lg.impl_->config.identity());
    return lg;
  }
  lg.impl_->config = known;
  return lg;
}

StatusOr<LoweredGraph> LoweredGraph::deserialize(const Graph& graph, const DeviceProfile& profile,
                                                 const std::vector<uint8_t>& bytes) {
  return deserialize_for(graph, nullptr, &profile, bytes);
}

Status LoweredGraph::execute(cudnnHandle_t handle, const std::map<int, void*>& tensor_ptrs, void* workspace) const {
  if (!impl_->built) return failed_precondition("no plan built to execute");
  if (impl_->alt) {
    cudaStream_t stream = nullptr;
    if (cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS)
      return invalid_argument("execute: cannot read the cuDNN handle's stream");
    return impl_->alt->execute(stream, tensor_ptrs, workspace).with_context("graph '" + impl_->graph.name + "'");
  }
  std::unordered_map<int64_t, void*> pack;
  for (size_t i = 0; i < impl_->graph.tensors.size(); ++i) {
    int idx = static_cast<int>(i);
    const TensorDesc& d = impl_->graph.tensors[i];
    if (d.by_value || impl_->graph.is_virtual(idx)) continue;
    auto it = tensor_ptrs.find(idx);
    if (it == tensor_ptrs.end() || !it->second)
      return invalid_argument("execute: no device buffer for tensor '" + d.name + "'");
    pack[impl_->uids[i]] = it->second;
  }
  KILN_FE_RETURN_IF_ERROR(impl_->fg->execute(handle, pack, workspace),
                          "executing plan " + impl_->config.identity() + " of graph '" + impl_->graph.name + "'");
  return Status::ok();
}

Status LoweredGraph::build_alt(const EngineConfig& config) {
  auto plan = impl_->build_alt(config);
  if (!plan.is_ok())
    return plan.status().with_context("engine configuration " + config.identity() + " for graph '" + impl_->graph.name +
                                      "'");
  impl_->alt = std::move(plan).value();
  impl_->workspace = impl_->alt->workspace_size();
  impl_->config = config;
  impl_->built = true;
  return Status::ok();
}

Status LoweredGraph::build_config(const EngineConfig& config) {
  if (config.engine_id >= kCublasLtEngineBase) return build_alt(config);  // cuBLASLt's, or Kiln's own
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  bool expressible = true;  // every knob type has a word in the frontend's vocabulary
  for (auto& [k, v] : config.knobs) {
    StatusOr<int> type = knob_type_of(k);
    if (!type.is_ok()) return type.status().with_context("engine configuration " + config.identity());
    auto ft = knob_from_backend(*type);
    if (!ft.is_ok()) {
      expressible = false;
      break;
    }
    knobs[*ft] = v;
  }
  std::string what = "engine configuration " + config.identity() + " for graph '" + impl_->graph.name + "'";
  // A fresh operation graph so that a failed attempt leaves nothing behind.
  KILN_ASSIGN_OR_RETURN(auto fg, impl_->fresh_graph());
  if (expressible) {
    KILN_FE_RETURN_IF_ERROR(fg->create_execution_plan(config.engine_id, knobs), "creating " + what);
  } else {
    KILN_ASSIGN_OR_RETURN(fg, graph_offering(config, what, [this] { return impl_->fresh_graph(); }));
  }
  if (impl_->has_profile) {
    KILN_FE_RETURN_IF_ERROR(fg->check_support(), "checking support of " + what);
  } else {
    KILN_FE_RETURN_IF_ERROR(fg->check_support(impl_->handle), "checking support of " + what);
  }
  KILN_FE_RETURN_IF_ERROR(fg->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building " + what);
  if (!expressible) {  // the one configuration left must be the one asked for
    std::string tag;
    KILN_FE_RETURN_IF_ERROR(fg->get_plan_name(tag), "reading the built plan's engine");
    KILN_ASSIGN_OR_RETURN(EngineConfig built, EngineConfig::parse(tag));
    if (!(built == config)) return internal_error("built " + built.identity() + " instead of " + what);
  }
  KILN_FE_RETURN_IF_ERROR(fg->get_workspace_size(impl_->workspace), "reading the workspace size of " + what);
  impl_->fg = fg;
  impl_->alt.reset();
  impl_->config = config;
  impl_->built = true;
  return Status::ok();
}

}  // namespace kiln
