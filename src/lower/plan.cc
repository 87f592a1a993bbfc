// LoweredGraph: operation graph, candidates, plan build (heuristic or pinned), serialize, execute.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "kiln/lower.h"
#include "lower/fe_status.h"
#include "lower/graph_lowering.h"

namespace kiln {

using lower_detail::fe_status;

struct LoweredGraph::Impl {
  Graph graph;  // a copy: tensor identities for execution
  std::vector<int64_t> uids;  // cuDNN uid of each tensor (lower_detail::tensor_uids)
  std::shared_ptr<fe::graph::Graph> fg;
  DeviceProfile profile;
  bool has_profile = false;
  cudnnHandle_t handle = nullptr;
  bool built = false;
  EngineConfig config;
  int64_t workspace = 0;

  // A fresh frontend graph with its operation graph built for the target.
  StatusOr<std::shared_ptr<fe::graph::Graph>> fresh_graph() const {
    KILN_ASSIGN_OR_RETURN(auto fg, lower_detail::lower_graph(graph));
    if (has_profile) {
      KILN_RETURN_IF_ERROR(lower_detail::apply_profile(*fg, profile));
      KILN_FE_RETURN_IF_ERROR(fg->build_operation_graph(), "building the operation graph (deviceless, " + profile.gpu_name + ")");
    } else {
      KILN_FE_RETURN_IF_ERROR(fg->build_operation_graph(handle), "building the operation graph");
    }
    return fg;
  }
};

namespace {

const char* mode_name(HeuristicMode m) {
  switch (m) {
    case HeuristicMode::kA: return "A";
    case HeuristicMode::kB: return "B";
    case HeuristicMode::kFallback: return "FALLBACK";
  }
  return "?";
}

fe::HeurMode_t to_fe(HeuristicMode m) {
  switch (m) {
    case HeuristicMode::kA: return fe::HeurMode_t::A;
    case HeuristicMode::kB: return fe::HeurMode_t::B;
    case HeuristicMode::kFallback: return fe::HeurMode_t::FALLBACK;
  }
  return fe::HeurMode_t::A;
}

// Backend knob type (as in cuDNN's engine tags) -> frontend KnobType_t.
StatusOr<fe::KnobType_t> knob_from_backend(int backend_type) {
  for (int k = static_cast<int>(fe::KnobType_t::SWIZZLE); k <= static_cast<int>(fe::KnobType_t::WARP_SPEC_CFG); ++k) {
    cudnnBackendKnobType_t b;
    auto e = fe::convert_to_backend_knob_type(static_cast<fe::KnobType_t>(k), b);
    if (e == CUDNN_STATUS_SUCCESS && static_cast<int>(b) == backend_type) return static_cast<fe::KnobType_t>(k);
  }
  return not_supported("knob type " + std::to_string(backend_type) + " is unknown to cuDNN Frontend " +
                       std::to_string(CUDNN_FRONTEND_VERSION));
}

std::string behavior_note_name(fe::BehaviorNote_t n) {
  switch (n) {
    case fe::BehaviorNote_t::RUNTIME_COMPILATION: return "runtime_compilation";
    case fe::BehaviorNote_t::REQUIRES_FILTER_INT8x32_REORDER: return "requires_filter_int8x32_reorder";
    case fe::BehaviorNote_t::REQUIRES_BIAS_INT8x32_REORDER: return "requires_bias_int8x32_reorder";
    case fe::BehaviorNote_t::SUPPORTS_CUDA_GRAPH_NATIVE_API: return "supports_cuda_graph_native_api";
    default: return "note_" + std::to_string(static_cast<int>(n));
  }
}

}  // namespace

std::string EngineConfig::identity() const {
  std::ostringstream os;
  os << "eng" << engine_id;
  for (auto& [k, v] : knobs) os << "_k" << k << "=" << v;
  return os.str();
}

StatusOr<std::optional<EngineConfig>> resolve_pin(const Graph& graph, const std::optional<EngineConfig>& override_pin) {
  if (override_pin) return override_pin;
  if (graph.pin.empty()) return std::optional<EngineConfig>();
  auto c = EngineConfig::parse(graph.pin);
  if (!c.is_ok()) return c.status().with_context("graph '" + graph.name + "': spec key 'pin'");
  return std::optional<EngineConfig>(std::move(c).value());
}

StatusOr<EngineConfig> EngineConfig::parse(const std::string& id) {
  EngineConfig c;
  auto bad = [&](const std::string& why) {
    return invalid_argument("engine configuration '" + id + "': " + why + " (expected e.g. eng12_k2=1_k3=0)");
  };
  if (id.rfind("eng", 0) != 0) return bad("must start with 'eng'");
  std::stringstream ss(id.substr(3));
  std::string part;
  bool first = true;
  while (std::getline(ss, part, '_')) {
    char* end = nullptr;
    if (first) {
      c.engine_id = std::strtoll(part.c_str(), &end, 10);
      if (part.empty() || *end || c.engine_id < 0) return bad("engine id '" + part + "' is not a number");
      first = false;
      continue;
    }
    auto eq = part.find('=');
    if (part.size() < 3 || part[0] != 'k' || eq == std::string::npos) return bad("knob '" + part + "' is not kTYPE=VALUE");
    long type = std::strtol(part.substr(1, eq - 1).c_str(), &end, 10);
    if (*end) return bad("knob type in '" + part + "' is not a number");
    long long value = std::strtoll(part.substr(eq + 1).c_str(), &end, 10);
    if (*end || eq + 1 == part.size()) return bad("knob value in '" + part + "' is not a number");
    c.knobs[static_cast<int>(type)] = value;
  }
  if (first) return bad("no engine id");
  return c;
}

LoweredGraph::LoweredGraph() : impl_(std::make_unique<Impl>()) {}
LoweredGraph::~LoweredGraph() = default;
LoweredGraph::LoweredGraph(LoweredGraph&&) noexcept = default;
LoweredGraph& LoweredGraph::operator=(LoweredGraph&&) noexcept = default;

StatusOr<LoweredGraph> LoweredGraph::create(const Graph& graph, const LowerTarget& target) {
  if (!target.profile && !target.handle)
    return invalid_argument("lowering needs a cuDNN handle (live device) or a device profile (deviceless)");
  LoweredGraph lg;
  lg.impl_->graph = graph;
  KILN_ASSIGN_OR_RETURN(lg.impl_->uids, lower_detail::tensor_uids(graph));
  lg.impl_->handle = target.handle;
  if (target.profile) {
    lg.impl_->profile = *target.profile;
    lg.impl_->has_profile = true;
  }
  KILN_ASSIGN_OR_RETURN(lg.impl_->fg, lg.impl_->fresh_graph());
  return lg;
}

StatusOr<std::vector<CandidateInfo>> LoweredGraph::list_candidates(const std::vector<HeuristicMode>& modes) {
  std::vector<CandidateInfo> out;
  std::map<std::string, size_t> seen;
  for (HeuristicMode m : modes) {
    // Each mode on its own graph, so the lists do not mix and ranks stay per mode.
    KILN_ASSIGN_OR_RETURN(auto fg, impl_->fresh_graph());
    fe::error_t e = fg->create_execution_plans({to_fe(m)});
    if (!e.is_good()) continue;  // a mode that offers nothing is not an error; none at all is, below
    int64_t n = fg->get_execution_plan_count();
    for (int64_t i = 0; i < n; ++i) {
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
      out[it->second].modes.push_back(mode_name(m));
    }
  }
  if (out.empty()) return not_supported("cuDNN's heuristics offer no engine configuration for graph '" + impl_->graph.name + "'");
  return out;
}

Status LoweredGraph::build_heuristic(const std::vector<HeuristicMode>& modes) {
  std::vector<fe::HeurMode_t> fm;
  for (auto m : modes) fm.push_back(to_fe(m));
  auto& fg = *impl_->fg;
  KILN_FE_RETURN_IF_ERROR(fg.create_execution_plans(fm), "querying cuDNN heuristics for graph '" + impl_->graph.name + "'");
  if (impl_->has_profile) {
    KILN_FE_RETURN_IF_ERROR(fg.check_support(), "checking support for graph '" + impl_->graph.name + "'");
  } else {
    KILN_FE_RETURN_IF_ERROR(fg.check_support(impl_->handle), "checking support for graph '" + impl_->graph.name + "'");
  }
  KILN_FE_RETURN_IF_ERROR(fg.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building a plan for graph '" + impl_->graph.name + "'");
  std::string tag;
  KILN_FE_RETURN_IF_ERROR(fg.get_plan_name(tag), "reading the built plan's engine");
  KILN_ASSIGN_OR_RETURN(impl_->config, EngineConfig::parse(tag));
  KILN_FE_RETURN_IF_ERROR(fg.get_workspace_size(impl_->workspace), "reading the plan's workspace size");
  impl_->built = true;
  return Status::ok();
}

Status LoweredGraph::build_config(const EngineConfig& config) {
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  for (auto& [k, v] : config.knobs) {
    KILN_ASSIGN_OR_RETURN(fe::KnobType_t ft, knob_from_backend(k));
    knobs[ft] = v;
  }
  // A fresh operation graph so that a failed attempt leaves nothing behind.
  KILN_ASSIGN_OR_RETURN(auto fg, impl_->fresh_graph());
  std::string what = "engine configuration " + config.identity() + " for graph '" + impl_->graph.name + "'";
  KILN_FE_RETURN_IF_ERROR(fg->create_execution_plan(config.engine_id, knobs), "creating " + what);
  if (impl_->has_profile) {
    KILN_FE_RETURN_IF_ERROR(fg->check_support(), "checking support of " + what);
  } else {
    KILN_FE_RETURN_IF_ERROR(fg->check_support(impl_->handle), "checking support of " + what);
  }
  KILN_FE_RETURN_IF_ERROR(fg->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building " + what);
  KILN_FE_RETURN_IF_ERROR(fg->get_workspace_size(impl_->workspace), "reading the workspace size of " + what);
  impl_->fg = fg;
  impl_->config = config;
  impl_->built = true;
  return Status::ok();
}

bool LoweredGraph::has_plan() const { return impl_->built; }
const EngineConfig& LoweredGraph::config() const { return impl_->config; }
int64_t LoweredGraph::workspace_size() const { return impl_->workspace; }

std::vector<std::string> LoweredGraph::behavior_notes() const {
  std::vector<std::string> out;
  std::vector<fe::BehaviorNote_t> notes;
  if (impl_->built && impl_->fg->get_behavior_notes(notes).is_good())
    for (auto n : notes) out.push_back(behavior_note_name(n));
  return out;
}

StatusOr<std::vector<uint8_t>> LoweredGraph::serialize() const {
  if (!impl_->built) return failed_precondition("no plan built to serialize");
  std::vector<uint8_t> bytes;
  KILN_FE_RETURN_IF_ERROR(impl_->fg->serialize(bytes), "serializing plan " + impl_->config.identity());
  return bytes;
}

StatusOr<LoweredGraph> LoweredGraph::deserialize(const Graph& graph, cudnnHandle_t handle, const std::vector<uint8_t>& bytes) {
  if (!handle) return invalid_argument("deserializing a plan needs a cuDNN handle");
  if (bytes.empty()) return corruption("empty plan bytes");
  LoweredGraph lg;
  lg.impl_->graph = graph;
  KILN_ASSIGN_OR_RETURN(lg.impl_->uids, lower_detail::tensor_uids(graph));
  lg.impl_->handle = handle;
  lg.impl_->fg = std::make_shared<fe::graph::Graph>();
  fe::error_t e;
  try {  // the frontend's JSON parsing may throw on malformed bytes
    e = lg.impl_->fg->deserialize(handle, bytes);
  } catch (const std::exception& ex) {
    return corruption(std::string("plan bytes are not a cuDNN Frontend graph: ") + ex.what());
  }
  if (!e.is_good()) return fe_status(e, "deserializing a plan for graph '" + graph.name + "'").with_context("stored plan refused");
  KILN_FE_RETURN_IF_ERROR(lg.impl_->fg->get_workspace_size(lg.impl_->workspace), "reading the workspace size");
  lg.impl_->built = true;
  // Identity is not read back from the frontend (get_plan_name on a deserialized graph is unsafe in 1.23):
  // callers keep it in their own records.
  return lg;
}

Status LoweredGraph::execute(cudnnHandle_t handle, const std::map<int, void*>& tensor_ptrs, void* workspace) const {
  if (!impl_->built) return failed_precondition("no plan built to execute");
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

}  // namespace kiln
