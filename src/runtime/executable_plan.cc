// ExecutablePlan (kiln/runtime/plan_types.h): a built plan, its bindings checked by tensor name, and the names
// of the plan sources.
#include <string>
#include <vector>

#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/plan_types.h"
#include "kiln/validate/host_tensor.h"
#include "runtime/bound_tensors.h"

namespace kiln {

const char* plan_source_name(PlanSource s) { return enum_name(kPlanSourceNames, s, "unknown"); }
StatusOr<PlanSource> parse_plan_source(const std::string& name) {
  return parse_enum(kPlanSourceNames, name, "plan source");
}

ExecutablePlan::ExecutablePlan(Graph graph, GraphSignature signature, EngineConfig config, int64_t workspace_bytes,
                               PlanSource built_from, std::unique_ptr<PlanExecutor> executor)
    : graph_(std::move(graph)),
      signature_(std::move(signature)),
      config_(std::move(config)),
      workspace_bytes_(workspace_bytes),
      built_from_(built_from),
      executor_(std::move(executor)) {
  for (const BoundTensor& b : bound_tensors(graph_)) {
    bound_[b.name] = b.tensor;
    spans_[b.name] = b.bytes;
  }
}

StatusOr<size_t> ExecutablePlan::tensor_bytes(const std::string& name) const {
  auto it = spans_.find(name);
  if (it == spans_.end()) return not_found("graph '" + graph_.name + "' binds no tensor '" + name + "'");
  return it->second;
}

Status ExecutablePlan::check_bindings(const TensorBindings& tensors) const {
  // Made only for a message: this runs on every call.
  auto where = [this] { return "graph '" + graph_.name + "'"; };
  for (const auto& [name, b] : tensors) {
    if (!bound_.count(name)) {
      std::string known;
      for (const auto& [n, t] : bound_) known += (known.empty() ? "" : ", ") + n;
      return invalid_argument(where() + ": no input or output tensor '" + name + "' to bind (its tensors: " + known +
                              ")");
    }
  }
  for (const auto& [name, t] : bound_) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return invalid_argument(where() + ": tensor '" + name + "' is not bound");
    const TensorBinding& b = it->second;
    if (b.ptr == nullptr) return invalid_argument(where() + ": tensor '" + name + "' is bound to a null pointer");
    if (reinterpret_cast<uintptr_t>(b.ptr) % kBindingAlignment != 0)
      return invalid_argument(where() + ": tensor '" + name + "': pointer " +
                              std::to_string(reinterpret_cast<uintptr_t>(b.ptr)) + " is not " +
                              std::to_string(kBindingAlignment) + "-byte aligned");
    const size_t need = spans_.at(name);
    if (b.bytes != 0 && b.bytes < need)
      return invalid_argument(where() + ": tensor '" + name + "': buffer of " + std::to_string(b.bytes) +
                              " bytes, the shape " + shape_key_text(graph_.dynamic_dims) + " needs " +
                              std::to_string(need));
  }
  return Status::ok();
}

Status ExecutablePlan::check_call(const TensorBindings& tensors, void* workspace) const {
  KILN_RETURN_IF_ERROR(check_bindings(tensors));
  if (workspace_bytes_ > 0 && workspace == nullptr)
    return invalid_argument("graph '" + graph_.name + "': the plan needs a workspace of " +
                            std::to_string(workspace_bytes_) + " bytes");
  if (workspace && reinterpret_cast<uintptr_t>(workspace) % kBindingAlignment != 0)
    return invalid_argument("graph '" + graph_.name + "': the workspace is not " + std::to_string(kBindingAlignment) +
                            "-byte aligned");
  return Status::ok();
}

Status ExecutablePlan::execute(cudaStream_t stream, const TensorBindings& tensors, void* workspace) const {
  KILN_RETURN_IF_ERROR(check_call(tensors, workspace));
  std::map<int, void*> ptrs;
  for (const auto& [name, t] : bound_) ptrs[t] = tensors.at(name).ptr;
  if (!executor_) return failed_precondition("graph '" + graph_.name + "': the plan has no executor");
  return executor_->run(stream, ptrs, workspace);
}

Status ExecutablePlan::run_unchecked(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const {
  if (!executor_) return failed_precondition("graph '" + graph_.name + "': the plan has no executor");
  return executor_->run(stream, pointers, workspace);
}

std::string ExecutablePlan::identity() const {
  if (parts_.empty()) return config_.identity();
  std::string out = built_from_ == PlanSource::kSegments ? "segments["
                    : built_from_ == PlanSource::kSplit  ? "split["
                                                         : "unfused[";
  for (size_t i = 0; i < parts_.size(); ++i) out += (i ? " + " : "") + parts_[i]->identity();
  return out + "]";
}

std::vector<BoundTensor> bound_tensors(const Graph& g) {
  const GraphRoles roles(g);
  std::vector<BoundTensor> out;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    if (d.by_value || roles.is_virtual(t)) continue;
    // Validated graphs have checked footprints: this cannot fail for them.
    auto bytes = HostTensor::checked_byte_size(roles.dtype_of(t), d.shape(), d.strides);
    out.push_back({t, d.name, bytes.is_ok() ? static_cast<size_t>(*bytes) : 0, roles.producer(t) >= 0});
  }
  return out;
}

}  // namespace kiln
