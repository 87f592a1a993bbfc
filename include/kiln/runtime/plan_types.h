// The plan types every part of the runtime shares (the Planner, its sources, its backends, the capture layer
// and the tools): where a plan came from (PlanSource), the plan itself (ExecutablePlan) and how a caller binds
// its buffers to it, a prepared graph, and what obtain() hands back. Nothing here decides where a plan comes
// from: that is the Planner's chain of sources (kiln/runtime/planner.h, docs/architecture.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// Where a plan came from. kDynamic: built in cuDNN's dynamic-shape mode with the structure's shared kernel
// cache (milliseconds once the structure's kernels are compiled; slower kernels: a stopgap, promoted).
// kPadded: the plan tuned for a larger shape (of the same bucket, or at most twice as large), run on scratch copies of the inputs and
// outputs that carry the dynamic dim (kiln/runtime/padding.h; no build at all; a stopgap, promoted).
// kTuned: tuned for exactly this shape, by the Planner's background promotion (PromoteBy::kTune) or, under
// MismatchPolicy::kRetune, by obtain() itself on the calling thread. kPinned: built with the configuration
// the caller named (obtain_pinned). kSegments: a graph cuDNN cannot fuse whole, run as its fused segments,
// each obtained like a graph of its own (parts() says from where).
// kSplit: plans of smaller tuned shapes whose rows sum to this shape's, each run on its own rows of the
// caller's buffers (kiln/runtime/padding.h "Split stopgaps"; no build, no copies; a stopgap, promoted).
enum class PlanSource { kMemory, kStore, kDynamic, kBucket, kHeuristics, kPadded, kTuned, kPinned, kSegments, kSplit };
constexpr int kPlanSourceCount = 10;
inline constexpr EnumName<PlanSource> kPlanSourceNames[] = {
    {PlanSource::kMemory, "memory"}, {PlanSource::kStore, "store"},           {PlanSource::kDynamic, "dynamic"},
    {PlanSource::kBucket, "bucket"}, {PlanSource::kHeuristics, "heuristics"}, {PlanSource::kPadded, "padded"},
    {PlanSource::kTuned, "tuned"},   {PlanSource::kPinned, "pinned"},         {PlanSource::kSegments, "segments"},
    {PlanSource::kSplit, "split"}};
static_assert(sizeof(kPlanSourceNames) / sizeof(kPlanSourceNames[0]) == kPlanSourceCount);
// "memory", "store", "dynamic", "bucket", "heuristics", "padded", "tuned", "pinned", "segments", "split"
const char* plan_source_name(PlanSource s);
// Inverse of plan_source_name; InvalidArgument naming the text and the choices otherwise.
StatusOr<PlanSource> parse_plan_source(const std::string& name);
// kDynamic, kPadded and kSplit: served until the Planner's background build replaces them.
inline bool plan_source_is_stopgap(PlanSource s) {
  return s == PlanSource::kDynamic || s == PlanSource::kPadded || s == PlanSource::kSplit;
}

// A device buffer the caller binds to a tensor: its pointer and, when known, its size in bytes (0: the
// size is not checked).
struct TensorBinding {
  void* ptr = nullptr;
  size_t bytes = 0;
};
using TensorBindings = std::map<std::string, TensorBinding>;

// Alignment cuDNN expects of every tensor and the workspace.
constexpr size_t kBindingAlignment = 16;

// What runs a built plan (a cuDNN plan on the GPU; a recording fake in host tests). `pointers` is keyed by
// the graph's tensor index.
class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  virtual Status run(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const = 0;
};

// A plan ready to execute: immutable, shared by every thread that obtained it.
class ExecutablePlan {
 public:
  ExecutablePlan(Graph graph, GraphSignature signature, EngineConfig config, int64_t workspace_bytes,
                 PlanSource built_from, std::unique_ptr<PlanExecutor> executor);

  const Graph& graph() const { return graph_; }
  const GraphSignature& signature() const { return signature_; }
  const EngineConfig& config() const { return config_; }
  // The workspace execute() needs, in bytes. Read it for every plan obtained: a padded stopgap's holds its
  // scratch too (kiln/runtime/padding.h), so it differs from, and needs more than, the plan that replaces it, and
  // it is never 0. execute() cannot check a workspace's size: a smaller one is written past.
  int64_t workspace_bytes() const { return workspace_bytes_; }
  PlanSource built_from() const { return built_from_; }  // store, bucket, heuristics, dynamic or padded
  // The bytes tensor `name` spans (its strides' footprint), or NotFound.
  StatusOr<size_t> tensor_bytes(const std::string& name) const;

  // Every graph input and output named exactly once, no other name; each pointer non-null and
  // kBindingAlignment-aligned; each given size at least the tensor's span. InvalidArgument naming the
  // tensor otherwise. Nothing is launched.
  Status check_bindings(const TensorBindings& tensors) const;
  // check_bindings, and the workspace: kBindingAlignment-aligned, and non-null when workspace_bytes() > 0.
  // What execute() checks before it launches (kiln/capture/capture.h checks it before a capture).
  Status check_call(const TensorBindings& tensors, void* workspace) const;
  // check_call, then the plan on `stream`. `workspace` (kBindingAlignment-aligned, at least
  // workspace_bytes()) may be null when workspace_bytes() is 0.
  Status execute(cudaStream_t stream, const TensorBindings& tensors, void* workspace = nullptr) const;
  // The plan on `stream` with pointers by tensor index, nothing checked: for plans made of plans (a padded
  // stopgap, an unfused chain), which check their own call first.
  Status run_unchecked(cudaStream_t stream, const std::map<int, void*>& pointers, void* workspace) const;

  // What runs it (for the runtime's plans made of plans, which look inside; never null).
  const PlanExecutor& executor() const { return *executor_; }
  // An unfused chain (kiln/runtime/unfused_plan.h): its parts' plans, in run order; empty for a single plan.
  const std::vector<std::shared_ptr<const ExecutablePlan>>& parts() const { return parts_; }
  void set_parts(std::vector<std::shared_ptr<const ExecutablePlan>> parts) { parts_ = std::move(parts); }
  // What its build noted for the reader: the known cuDNN defects worked around ("known cuDNN defect worked
  // around: ..."), in the order met.
  const std::vector<std::string>& notes() const { return notes_; }
  void set_notes(std::vector<std::string> notes) { notes_ = std::move(notes); }
  // What runs, in words: the configuration's identity ("eng12_k2=1"), or for an unfused chain
  // "unfused[eng1 + eng7_k3=0 + eng2]" ("segments[...]" for a graph run as its fused segments).
  std::string identity() const;

 private:
  Graph graph_;
  GraphSignature signature_;
  EngineConfig config_;
  int64_t workspace_bytes_ = 0;
  PlanSource built_from_ = PlanSource::kHeuristics;
  std::unique_ptr<PlanExecutor> executor_;
  std::map<std::string, int> bound_;     // name -> tensor index of every input and output
  std::map<std::string, size_t> spans_;  // name -> bytes
  std::vector<std::shared_ptr<const ExecutablePlan>> parts_;
  std::vector<std::string> notes_;
};

// A tuned configuration the store holds for a structure, at one shape.
struct TunedShape {
  std::string shape_key;
  std::map<std::string, int64_t> shape;
  EngineConfig config;
};

// A validated graph with its signature, computed once (obtain() on a PreparedGraph does no hashing).
struct PreparedGraph {
  std::shared_ptr<const Graph> graph;
  GraphSignature signature;
  std::map<std::string, int64_t> shape;  // the graph's own dynamic values
  // The names plans are bound by enter the cache key too: two graphs of one structure whose tensors are
  // named differently get plans of their own (each bound by its own names).
  std::string names_key;
};

struct Obtained {
  std::shared_ptr<const ExecutablePlan> plan;
  PlanSource source = PlanSource::kHeuristics;  // where this call got it (kMemory on a hit)
  std::string why;                              // the misses before it ("store: no record; bucket: ...")
  double obtain_ms = 0.0;
};

}  // namespace kiln
