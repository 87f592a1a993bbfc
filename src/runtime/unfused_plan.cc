// The unfused chain as one ExecutablePlan (kiln/runtime/unfused_plan.h).
#include "kiln/runtime/unfused_plan.h"

#include <algorithm>

namespace kiln {

namespace {

int64_t align_up(int64_t v) {
  const auto a = static_cast<int64_t>(kBindingAlignment);
  return (v + a - 1) / a * a;
}

// Where one part's bound tensor comes from: the caller's buffer for a fused-graph tensor, or the workspace.
struct Wire {
  int part_tensor = 0;
  int graph_tensor = 0;  // the caller's pointer for it, when !in_workspace
  bool in_workspace = false;
  int64_t offset = 0;  // in the workspace, when in_workspace
};

struct Step {
  std::shared_ptr<const ExecutablePlan> plan;
  std::vector<Wire> wires;
  bool needs_workspace = false;
};

// The bound tensors of a part's plan (by part tensor index): what its execute() would bind.
std::vector<int> bound_tensors(const ExecutablePlan& plan) {
  std::vector<int> out;
  const Graph& g = plan.graph();
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (plan.tensor_bytes(g.tensors[i].name).is_ok()) out.push_back(static_cast<int>(i));
  return out;
}

bool bound_in(const Graph& graph, const GraphRoles& roles, int t) {
  return !graph.tensors[static_cast<size_t>(t)].by_value && !roles.is_virtual(t);
}

class UnfusedExecutor : public PlanExecutor {
 public:
  UnfusedExecutor(std::vector<Step> steps, int64_t parts_workspace_offset, bool needs_workspace)
      : steps_(std::move(steps)), parts_ws_(parts_workspace_offset), needs_workspace_(needs_workspace) {}

  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    char* ws = static_cast<char*>(workspace);
    if (!ws && needs_workspace_) return internal_error("unfused chain: no workspace for the tensors between its parts");
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      std::map<int, void*> ptrs;
      for (const Wire& w : s.wires) {
        if (w.in_workspace) {
          ptrs[w.part_tensor] = ws + w.offset;
          continue;
        }
        auto it = pointers.find(w.graph_tensor);
        if (it == pointers.end())
          return internal_error("unfused chain: part " + std::to_string(i) + " ('" + s.plan->graph().name +
                                "') reads a graph tensor the call did not bind");
        ptrs[w.part_tensor] = it->second;
      }
      Status st = s.plan->run_unchecked(stream, ptrs, s.needs_workspace ? ws + parts_ws_ : nullptr);
      if (!st.is_ok()) return st.with_context("unfused chain, part '" + s.plan->graph().name + "'");
    }
    return Status::ok();
  }

 private:
  std::vector<Step> steps_;
  int64_t parts_ws_ = 0;
  bool needs_workspace_ = false;  // the chain's workspace_bytes() > 0
};

}  // namespace

StatusOr<UnfusedLayout> unfused_layout(const Graph& graph, const std::vector<GraphPart>& parts,
                                       const std::vector<std::shared_ptr<const ExecutablePlan>>& plans) {
  const std::string where = "unfused chain of graph '" + graph.name + "'";
  if (parts.size() != plans.size())
    return invalid_argument(where + ": " + std::to_string(parts.size()) + " parts but " + std::to_string(plans.size()) +
                            " plans");
  if (parts.size() < 2) return invalid_argument(where + ": a chain needs at least two parts");
  const GraphRoles roles(graph);
  UnfusedLayout out;
  int64_t parts_ws = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const GraphPart& part = parts[i];
    const std::string pw = where + ", part " + std::to_string(i) + " ('" + part.graph.name + "')";
    if (!plans[i]) return invalid_argument(pw + ": no plan");
    const Graph& pg = plans[i]->graph();
    if (pg.tensors.size() != part.graph.tensors.size() || part.tensor_map.size() != part.graph.tensors.size())
      return invalid_argument(pw + ": its plan is for a graph of " + std::to_string(pg.tensors.size()) +
                              " tensors, the part has " + std::to_string(part.graph.tensors.size()));
    for (int pt : bound_tensors(*plans[i])) {
      const int t = part.tensor_map[static_cast<size_t>(pt)];
      if (t < 0 || static_cast<size_t>(t) >= graph.tensors.size())
        return invalid_argument(pw + ": tensor '" + pg.tensors[static_cast<size_t>(pt)].name +
                                "' maps outside the graph");
      if (bound_in(graph, roles, t)) continue;
      const int64_t span = static_cast<int64_t>(*plans[i]->tensor_bytes(pg.tensors[static_cast<size_t>(pt)].name));
      auto [it, fresh] = out.bytes.emplace(t, span);
      if (!fresh && it->second != span)
        return invalid_argument(pw + ": tensor '" + graph.tensors[static_cast<size_t>(t)].name + "' spans " +
                                std::to_string(span) + " bytes here, " + std::to_string(it->second) +
                                " bytes in an earlier part");
    }
    parts_ws = std::max(parts_ws, plans[i]->workspace_bytes());
  }
  int64_t at = 0;
  for (const auto& [t, bytes] : out.bytes) {
    out.offsets[t] = at;
    at += align_up(std::max<int64_t>(bytes, 1));
  }
  out.parts_workspace_offset = at;
  out.workspace_bytes = at + align_up(parts_ws);
  return out;
}

StatusOr<std::shared_ptr<const ExecutablePlan>> make_unfused_plan(
    const Graph& graph, const GraphSignature& signature, const std::vector<GraphPart>& parts,
    std::vector<std::shared_ptr<const ExecutablePlan>> plans, PlanSource built_from) {
  KILN_ASSIGN_OR_RETURN(UnfusedLayout layout, unfused_layout(graph, parts, plans));
  const GraphRoles roles(graph);
  std::vector<Step> steps;
  for (size_t i = 0; i < parts.size(); ++i) {
    Step s;
    s.plan = plans[i];
    s.needs_workspace = plans[i]->workspace_bytes() > 0;
    for (int pt : bound_tensors(*plans[i])) {
      Wire w;
      w.part_tensor = pt;
      w.graph_tensor = parts[i].tensor_map[static_cast<size_t>(pt)];
      w.in_workspace = !bound_in(graph, roles, w.graph_tensor);
      if (w.in_workspace) w.offset = layout.offsets.at(w.graph_tensor);
      s.wires.push_back(w);
    }
    steps.push_back(std::move(s));
  }
  auto plan = std::make_shared<ExecutablePlan>(
      graph, signature, EngineConfig{}, layout.workspace_bytes, built_from,
      std::make_unique<UnfusedExecutor>(std::move(steps), layout.parts_workspace_offset, layout.workspace_bytes > 0));
  plan->set_parts(std::move(plans));
  return std::shared_ptr<const ExecutablePlan>(std::move(plan));
}

}  // namespace kiln
