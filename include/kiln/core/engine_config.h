// kiln/core/engine_config.h: a plan's identity, the one type and text every layer uses for it. An engine
// configuration is cuDNN's engine global index plus its knob choices; with the cuDNN version that built it
// (kept by the store beside it) it names a plan. Never an index into a heuristics list.
//
// Knobs are named "k<N>", N being cuDNN's backend knob type (cudnnBackendKnobType_t), as in cuDNN's own
// engine tags ("eng41_k2=4_k13=0"); lower maps them onto the frontend's vocabulary when it builds. The store
// keeps knobs by name and treats names as opaque, so a record may carry other names; lower refuses to build
// a configuration with one.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/core/status.h"

namespace kiln {

// Knob values by knob name.
using Knobs = std::map<std::string, int64_t>;

// Engine ids from here up name cuBLASLt's matmul algorithms, not cuDNN engines (src/lower/cublaslt_plan.h): id
// kCublasLtEngineBase + N is cuBLASLt's algorithm N, its identity "blt<N>" then its configuration as named knobs
// ("blt66_cluster=2_custom=0_inner=0_reduction=0_splitk=1_stages=35_swizzle=0_tile=18"). cuDNN's engine ids are far
// below it (cuDNN 9.19's highest: 300s).
inline constexpr int64_t kCublasLtEngineBase = int64_t{1} << 20;
// Engine ids from here up name Kiln's own kernels (src/lower/kernel_plan.h): id kKilnKernelEngineBase + N is
// kernel N ("knl1_blocks=4_threads=256": the AMAX of a whole tensor), its knobs its launch configuration.
inline constexpr int64_t kKilnKernelEngineBase = int64_t{2} << 20;
inline bool is_cublaslt_engine(int64_t engine_id) {
  return engine_id >= kCublasLtEngineBase && engine_id < kKilnKernelEngineBase;
}
inline bool is_kiln_kernel_engine(int64_t engine_id) { return engine_id >= kKilnKernelEngineBase; }

// The store's column text: "name=value;name=value" in name order ("" when none).
std::string knobs_to_text(const Knobs& knobs);
// Inverse of knobs_to_text; InvalidArgument for text that is not canonical knob text.
StatusOr<Knobs> knobs_from_text(const std::string& text);

// The canonical identity text: "eng<id>" then "_<name>=<value>" per knob, knobs named kN in ascending N and
// any other name after them by name: "eng12_k2=1_k13=0", "eng7". The same text as cuDNN's engine tags, so
// what a report prints can be passed to --pin. Stable: never depends on list positions. A cuBLASLt algorithm's
// is "blt<algorithm>" and its knobs by name, a Kiln kernel's "knl<kernel>" and its knobs by name.
std::string plan_identity(int64_t engine_id, const Knobs& knobs);

// N for a knob named "k<N>" (N >= 0, decimal, no sign); InvalidArgument naming the knob otherwise.
StatusOr<int> knob_type_of(const std::string& name);

struct EngineConfig {
  int64_t engine_id = -1;
  Knobs knobs;

  std::string identity() const { return plan_identity(engine_id, knobs); }
  // Inverse of identity() for kN knobs: "eng12_k2=1_k3=0" (knob types normalized, "k02" is "k2"), and for
  // cuBLASLt's algorithms and Kiln's kernels: "blt66_splitk=1_tile=18", "knl1_threads=256" (knob names of lowercase
  // letters, each once).
  // InvalidArgument naming the text and what is wrong with it.
  static StatusOr<EngineConfig> parse(const std::string& identity);
  bool operator==(const EngineConfig& o) const { return engine_id == o.engine_id && knobs == o.knobs; }
  bool operator!=(const EngineConfig& o) const { return !(*this == o); }
  bool operator<(const EngineConfig& o) const { return identity() < o.identity(); }
};

}  // namespace kiln
