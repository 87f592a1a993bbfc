// kiln/lower/lower.h: the bridge from Kiln's IR to cuDNN Frontend. This header exposes no frontend type; the
// frontend lives behind src/lower/ (its header costs minutes per translation unit).
//
// A LoweredGraph is one Kiln graph turned into a cuDNN Frontend graph for one target: the live device
// (a cuDNN handle) or a recorded device profile (deviceless, ahead-of-time compilation). It then holds at
// most one built execution plan, chosen by heuristics or pinned by engine configuration.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// A recorded GPU: what cuDNN needs to build plans for it without it (cuDNN 9.8+ device properties JSON)
// plus the SM version and count the frontend also needs. Stored as JSON (profiles/h200.json).
struct DeviceProfile {
  std::string gpu_name;
  int sm_version = 0;
  int sm_count = 0;
  int64_t recorded_cudnn_version = 0;
  std::string recorded_at;              // ISO date
  std::string cudnn_device_properties;  // cuDNN's own JSON representation, kept verbatim
};
StatusOr<DeviceProfile> record_device_profile(int ordinal = 0);  // needs a GPU
StatusOr<DeviceProfile> load_device_profile(const std::string& path);
// The same from the file's text; `path` names it in errors.
StatusOr<DeviceProfile> parse_device_profile(const std::string& text, const std::string& path);
// profiles/h200.json as it was when Kiln was built (compiled in): for deviceless work that needs some
// device but not this one (kiln/runtime/cudnn_primer.h).
StatusOr<DeviceProfile> builtin_h200_profile();
Status save_device_profile(const DeviceProfile& profile, const std::string& path);

// A plan's identity (EngineConfig: engine + knobs): kiln/core/engine_config.h.

// The configuration to pin for `graph`: `override_pin` (from --pin) when set, else the spec's "pin"
// (Graph::pin), else none. InvalidArgument naming the graph for a spec pin that does not parse.
// True when a convolution or matmul of `graph` reads fp32 data: cuDNN's heuristics then rank tensor-core
// engines first, which compute in TF32 (10-bit mantissas, errors near 1e-3), not the fp32 the graph asks for
// (build_heuristic passes over them first; the Planner names TF32 when every configuration offered fails).
bool wants_fp32_gemm_math(const Graph& graph);

StatusOr<std::optional<EngineConfig>> resolve_pin(const Graph& graph, const std::optional<EngineConfig>& override_pin);

// One engine configuration cuDNN offers for a graph.
struct CandidateInfo {
  EngineConfig config;
  int heuristic_rank = -1;                  // position in heuristic mode A's list, -1 if A did not offer it
  std::vector<std::string> modes;           // which heuristic modes offered it: "A", "B", "FALLBACK"
  std::vector<std::string> behavior_notes;  // e.g. "runtime_compilation"
};

// Where candidates come from: cuDNN's heuristic modes; kCublasLt, cuBLASLt's heuristic for a graph that is one
// matmul (optionally with a bias and a ReLU; src/lower/cublaslt_plan.h): "blt<N>_..." (kCublasLtEngineBase); kKiln,
// Kiln's own kernels (the AMAX of a whole tensor, a layer or RMS norm; src/lower/kernel_plan.h): "knl<N>_..."
// (kKilnKernelEngineBase).
// The last two on the live device only, and never chosen by build_heuristic.
enum class HeuristicMode { kA, kB, kFallback, kCublasLt, kKiln };
// cuDNN's names for its modes, then "CUBLASLT" and "KILN" (CandidateInfo::modes, the tuner's worker requests).
inline constexpr EnumName<HeuristicMode> kHeuristicModeNames[] = {{HeuristicMode::kA, "A"},
                                                                  {HeuristicMode::kB, "B"},
                                                                  {HeuristicMode::kFallback, "FALLBACK"},
                                                                  {HeuristicMode::kCublasLt, "CUBLASLT"},
                                                                  {HeuristicMode::kKiln, "KILN"}};
inline const char* heuristic_mode_name(HeuristicMode m) { return enum_name(kHeuristicModeNames, m); }
inline StatusOr<HeuristicMode> parse_heuristic_mode(const std::string& name) {
  return parse_enum(kHeuristicModeNames, name, "heuristic mode");
}

// cuDNN's kernel cache for dynamic-shape builds: one per graph structure, shared by every shape of it, so
// that a runtime-compiled kernel is compiled once per structure, not once per shape (cuDNN >= 9.4). The
// first build that uses it finalizes it for that structure; a graph of another structure must not use it.
// Thread-safe (builds that share it serialize on cuDNN's lock while it is finalized).
class DynamicKernelCache {
 public:
  DynamicKernelCache();
  ~DynamicKernelCache();
  DynamicKernelCache(const DynamicKernelCache&) = delete;
  DynamicKernelCache& operator=(const DynamicKernelCache&) = delete;
  // Entries held (kernels compiled into it); 0 before the first build or where cuDNN cannot say (cuDNN
  // before 9.27 cannot).
  int64_t entries() const;
  // Whether a build has used (and so finalized) it: only then has it anything to serialize.
  bool finalized() const;
  // cuDNN's JSON representation of the compiled kernels (cuDNN >= 9.10), to keep in the plan store
  // (kiln/store/kernel_cache_record.h) so that a new process does not compile them again.
  // FailedPrecondition before the first build; Unavailable where cuDNN cannot serialize it.
  StatusOr<std::string> to_json() const;
  // A cache holding what to_json() wrote, for the same structure, in the same environment (the caller
  // checks both: cuDNN does not). InvalidArgument where cuDNN refuses the text.
  static StatusOr<std::shared_ptr<DynamicKernelCache>> from_json(const std::string& json);

 private:
  friend class LoweredGraph;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LowerTarget {
  // Null: the live device, through `handle`. Otherwise: build for this recorded device, no GPU needed.
  const DeviceProfile* profile = nullptr;
  cudnnHandle_t handle = nullptr;
  // Set: the graph is built in cuDNN's dynamic-shape mode with this kernel cache (live device only).
  // Such plans are a stopgap: their kernels are generic over the shape and run slower than static ones.
  std::shared_ptr<DynamicKernelCache> kernel_cache;
  // false: lower the graph as written, without canonicalization (src/lower/canonicalize.h) and even where a
  // known cuDNN defect makes that wrong (only to check a new cuDNN against the tables in src/lower/canonicalize.h
  // and src/lower/known_defects.h; never for plans that are kept or run).
  bool work_around_known_defects = true;
};

class LoweredGraph {
 public:
  LoweredGraph();
  ~LoweredGraph();
  LoweredGraph(LoweredGraph&&) noexcept;
  LoweredGraph& operator=(LoweredGraph&&) noexcept;

  // Lowers a validated graph and builds cuDNN's operation graph for the target. Errors name the node.
  // cuDNN's fixed limits are checked first (check_cudnn_limits, kiln/lower/cudnn_limits.h: NotSupported naming
  // the limit; a graph past the operation limit runs as segments, cudnn_segment_groups), and a graph with a
  // known cuDNN defect is lowered as its equivalent rewrite (or refused, NotSupported, with the reason).
  static StatusOr<LoweredGraph> create(const Graph& graph, const LowerTarget& target);
  // A plan of cuBLASLt's or one of Kiln's own kernels (`config`'s engine at or past kCublasLtEngineBase) for `graph`,
  // built without cuDNN's operation graph, which such a plan never uses (create builds one, a cuDNN call of its own
  // per candidate in a tune). NotSupported where the configuration is none of theirs for this graph.
  static StatusOr<LoweredGraph> create_alt(const Graph& graph, const LowerTarget& target, const EngineConfig& config);
  // Rebuilds a graph from bytes made by serialize(); needs a live handle. The Kiln graph gives tensor
  // identities (uids are tensor index + 1). The bytes do not name their engine configuration: `known` is what
  // config() says (the caller's record; empty when not given). `frontend_warmup`: the Frontend's warmup, a
  // throwaway stream capture of one execute with a 1 MiB cudaMalloc and cudaFree around it (so a capture of the
  // plan's first execution works); false for a load beside others (kiln/cuda/capture_gate.h LoadingWork), whose
  // caller runs the plan once itself before serving it (cuDNN Frontend 1.32 and later; earlier ones always warm).
  static StatusOr<LoweredGraph> deserialize(const Graph& graph, cudnnHandle_t handle, const std::vector<uint8_t>& bytes,
                                            const EngineConfig& known = {}, bool frontend_warmup = true);
  // Whether deserialize() can skip the Frontend's warmup (this build's cuDNN Frontend is 1.32 or later).
  static bool can_skip_frontend_warmup();
  // The same without a handle or a GPU: the plan is finalized against a recorded device (cuDNN >= 9.8).
  // Proves that bytes load for that device (e.g. a deviceless compile's output); execute() still needs
  // a handle of a live device. Bytes of another frontend's serialized form are refused (NotSupported).
  static StatusOr<LoweredGraph> deserialize(const Graph& graph, const DeviceProfile& profile,
                                            const std::vector<uint8_t>& bytes);

  // Every engine configuration the given heuristic modes offer, de-duplicated by identity, in the order
  // A's ranking, then B's, then FALLBACK's.
  StatusOr<std::vector<CandidateInfo>> list_candidates(const std::vector<HeuristicMode>& modes);

  // Builds the heuristics' first working plan (modes tried in order). Where cuDNN offers nothing for a graph
  // the engine coverage registry knows (src/lower/engine_coverage.h), NotSupported naming the gap.
  Status build_heuristic(const std::vector<HeuristicMode>& modes = {HeuristicMode::kA, HeuristicMode::kFallback});
  // Builds exactly this engine configuration (the frontend's custom-plan path), or says why it cannot.
  Status build_config(const EngineConfig& config);

  bool has_plan() const;
  // The canonical rules and known cuDNN defects create() applied to this graph ("pointwise_rank_below_3:
  // tensor 'x' [256,4096] (rank 2), lowered at rank 3", "pointwise_vector_broadcast: node 'add' ..."): the
  // frontend graph is an equivalent rewrite of the Kiln graph over the same buffers.
  const std::vector<std::string>& workarounds() const;
  const EngineConfig& config() const;  // of the built plan
  int64_t workspace_size() const;      // of the built plan
  std::vector<std::string> behavior_notes() const;
  StatusOr<std::vector<uint8_t>> serialize() const;

  // Runs the built plan. `tensor_ptrs` maps tensor index -> device pointer for every non-virtual,
  // non-by-value tensor; `workspace` holds at least workspace_size() bytes.
  Status execute(cudnnHandle_t handle, const std::map<int, void*>& tensor_ptrs, void* workspace) const;

 private:
  Status build_heuristic_plan(const std::vector<HeuristicMode>& modes);
  Status build_heuristic_on(const std::vector<HeuristicMode>& modes, bool without_tensor_cores);
  static StatusOr<LoweredGraph> deserialize_for(const Graph& graph, cudnnHandle_t handle, const DeviceProfile* profile,
                                                const std::vector<uint8_t>& bytes, bool frontend_warmup = true);
  static StatusOr<LoweredGraph> deserialize_alt(const Graph& graph, cudnnHandle_t handle, const DeviceProfile* profile,
                                                const std::vector<uint8_t>& bytes);
  // A graph with no plan yet and no cuDNN operation graph, for a plan of cuBLASLt's or Kiln's own (create_alt and
  // deserialize_alt fill it).
  static StatusOr<LoweredGraph> alt_shell(const Graph& graph, cudnnHandle_t handle, const DeviceProfile* profile);
  Status build_alt(const EngineConfig& config);
  Status append_alt_candidates(const std::vector<HeuristicMode>& modes, std::vector<CandidateInfo>* out,
                               std::map<std::string, size_t>* seen, std::string* none) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
