// The executors of the stopgaps that need no build (kiln/runtime/padding.h): a padded plan runs a larger shape's
// plan on scratch copies, a split plan runs smaller shapes' plans on their rows of the caller's buffers. Private
// to the runtime layer: the padded and split sources make them.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/plan_backend.h"
#include "kiln/runtime/padding.h"
#include "runtime/bound_tensors.h"

namespace kiln::runtime_detail {

// Runs the plan of a larger shape (kiln/runtime/padding.h): the varying inputs copied into scratch at the front
// of the workspace, the larger plan on that scratch (its own workspace after it), the outputs' first
// rows copied back. Everything is enqueued on the caller's stream, so it captures into a CUDA graph.
class PaddedExecutor : public PlanExecutor {
 public:
  PaddedExecutor(std::shared_ptr<const ExecutablePlan> larger, PaddingLayout layout, PlanBackend::DeviceCopy copy)
      : larger_(std::move(larger)), layout_(std::move(layout)), copy_(copy) {}

  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    char* ws = static_cast<char*>(workspace);
    if (!ws) return internal_error("padded plan: no workspace for its scratch");
    // The caller's pointers (checked against this shape by ExecutablePlan::execute) by tensor index, which the
    // larger graph shares, the padded ones replaced by their scratch: the larger plan runs without a second
    // binding by name (its checks would only see what this layout made).
    std::map<int, void*> ptrs = pointers;
    for (const PaddedTensor& p : layout_.tensors) {
      void*& bound = ptrs[p.tensor];
      if (!bound) return internal_error("padded plan: no pointer for tensor '" + p.name + "'");
      if (!p.output) KILN_RETURN_IF_ERROR(copy_(ws + p.scratch_offset, bound, p.real_bytes, stream));
      bound = ws + p.scratch_offset;
    }
    KILN_RETURN_IF_ERROR(
        larger_->run_unchecked(stream, ptrs, larger_->workspace_bytes() > 0 ? ws + layout_.scratch_bytes : nullptr));
    for (const PaddedTensor& p : layout_.tensors)
      if (p.output) KILN_RETURN_IF_ERROR(copy_(pointers.at(p.tensor), ws + p.scratch_offset, p.real_bytes, stream));
    return Status::ok();
  }

 private:
  std::shared_ptr<const ExecutablePlan> larger_;
  PaddingLayout layout_;
  PlanBackend::DeviceCopy copy_;
};

// Runs plans of smaller shapes one after another, each on its own rows of the caller's buffers (kiln/runtime/padding.h
// "Split stopgaps"): a part's pointers are the caller's, those of the tensors that carry the dim moved past the rows
// before it. In stream order on the caller's stream, sharing one workspace.
// A cover (padding.h cover_extents) runs its last part over rows the part before it computed: it refuses a call
// where an output shares memory with an input, whose rows the earlier part would have overwritten.
class SplitExecutor : public PlanExecutor {
 public:
  struct Part {
    std::shared_ptr<const ExecutablePlan> plan;
    std::vector<std::pair<int, size_t>> offsets;  // tensor index, bytes from the caller's pointer
  };
  // The inputs and outputs of the whole shape, for a cover's check.
  using Span = BoundTensor;
  SplitExecutor(std::vector<Part> parts, std::string graph, std::vector<Span> cover_spans)
      : parts_(std::move(parts)), graph_(std::move(graph)), cover_spans_(std::move(cover_spans)) {}

  Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const override {
    KILN_RETURN_IF_ERROR(check_no_alias(pointers));
    std::map<int, void*> ptrs = pointers;
    const Part* previous = nullptr;
    for (const Part& part : parts_) {
      if (previous)  // the previous part's moved pointers back to the caller's
        for (const auto& [t, off] : previous->offsets) ptrs[t] = pointers.at(t);
      previous = &part;
      for (const auto& [t, off] : part.offsets) {
        auto it = pointers.find(t);
        if (it == pointers.end() || !it->second)
          return internal_error("split plan: no pointer for tensor " + std::to_string(t));
        ptrs[t] = static_cast<char*>(it->second) + off;
      }
      KILN_RETURN_IF_ERROR(
          part.plan->run_unchecked(stream, ptrs, part.plan->workspace_bytes() > 0 ? workspace : nullptr));
    }
    return Status::ok();
  }

 private:
  Status check_no_alias(const std::map<int, void*>& pointers) const {
    for (const Span& out : cover_spans_) {
      if (!out.output) continue;
      auto o = pointers.find(out.tensor);
      if (o == pointers.end() || !o->second) continue;  // the parts' own checks name it
      const uintptr_t o0 = reinterpret_cast<uintptr_t>(o->second);
      for (const Span& in : cover_spans_) {
        if (in.output) continue;
        auto i = pointers.find(in.tensor);
        if (i == pointers.end() || !i->second) continue;
        const uintptr_t i0 = reinterpret_cast<uintptr_t>(i->second);
        if (o0 < i0 + in.bytes && i0 < o0 + out.bytes)
          return invalid_argument("graph '" + graph_ + "': output '" + out.name + "' shares memory with input '" +
                                  in.name +
                                  "', and this split stopgap runs its last part over rows the part before it "
                                  "wrote: give the output a buffer of its own (or PlannerOptions::split_overlap = "
                                  "false)");
      }
    }
    return Status::ok();
  }

  std::vector<Part> parts_;
  std::string graph_;
  std::vector<Span> cover_spans_;  // empty unless the parts overlap
};

}  // namespace kiln::runtime_detail
