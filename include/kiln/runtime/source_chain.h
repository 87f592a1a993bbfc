// The order in which a Planner asks its plan sources for a key, as data: written once here, walked by the
// Planner (src/runtime/source_chain.cc builds one source object per step, in this order), printed by
// `kiln doctor --json` ("source_chain") and `kiln replay`'s report, and described in docs/architecture.md.
//
// Each source answers one question: can it serve this key, and at what cost? The first that can, serves. The
// asked-for sources are not in the order: a caller or a policy asks for them (obtain_pinned; the store's
// mismatch policy kRetune and PromoteBy::kTune; a graph cuDNN cannot fuse whole).
#pragma once

#include <string>

#include "kiln/core/enum_names.h"
#include "kiln/runtime/plan_types.h"

namespace kiln {

// A step of the chain. kStoreAfterStopgaps: the store, asked after the stopgaps that need no build where the
// structure's tuned shapes (read once) do not list this shape (the store's miss was most of a padded obtain's
// cost): the promotion asks it first. The store step before them serves every other key.
enum class SourceStep {
  kMemory,
  kSegments,
  kStore,
  kSplit,
  kPadded,
  kStoreAfterStopgaps,
  kDynamic,
  kBucket,
  kHeuristics
};

struct SourceChainEntry {
  SourceStep step;
  PlanSource source;  // what a plan it serves says it came from (kStoreAfterStopgaps: kStore)
  const char* name;
  const char* when;  // which keys it is asked for
  const char* cost;  // what answering costs
};

inline constexpr SourceChainEntry kSourceChain[] = {
    {SourceStep::kMemory, PlanSource::kMemory, "memory", "every key", "a lookup under a shared lock"},
    {SourceStep::kSegments, PlanSource::kSegments, "segments",
     "a graph cuDNN cannot fuse whole (asked once per structure)",
     "each segment obtained through this chain (static sources only)"},
    {SourceStep::kStore, PlanSource::kStore, "store", "the key, unless it is asked after the stopgaps",
     "a store read and a plan deserialized (milliseconds)"},
    {SourceStep::kSplit, PlanSource::kSplit, "split",
     "a new shape of a graph with dynamic dims (NewShapes::kStopgap, PlannerOptions::split)",
     "none built: tuned plans of smaller shapes on the caller's rows"},
    {SourceStep::kPadded, PlanSource::kPadded, "padded", "a new shape (NewShapes::kStopgap, PlannerOptions::padded)",
     "none built: a larger tuned shape's plan on scratch copies"},
    {SourceStep::kStoreAfterStopgaps, PlanSource::kStore, "store (after the stopgaps)",
     "instead of the store step above: a new shape the structure's tuned shapes do not list, when split and padded "
     "may serve and promotions are on",
     "a store read and a plan deserialized"},
    {SourceStep::kDynamic, PlanSource::kDynamic, "dynamic",
     "a new shape (NewShapes::kStopgap), unless static builds of the structure are cheap",
     "a dynamic-shape build with the structure's kernel cache"},
    {SourceStep::kBucket, PlanSource::kBucket, "bucket", "a graph with dynamic dims",
     "a static build of the nearest tuned shape's configuration"},
    {SourceStep::kHeuristics, PlanSource::kHeuristics, "heuristics", "every key no earlier source served",
     "a static build of cuDNN's heuristic choice"},
};
constexpr int kSourceStepCount = 9;
static_assert(sizeof(kSourceChain) / sizeof(kSourceChain[0]) == kSourceStepCount);

// The sources a caller or policy asks for, outside the order.
struct AskedSource {
  PlanSource source;
  const char* asked_by;
};
inline constexpr AskedSource kAskedSources[] = {
    {PlanSource::kTuned, "the store's mismatch policy kRetune (on the calling thread) and PromoteBy::kTune"},
    {PlanSource::kPinned, "Planner::obtain_pinned (kiln run --pin, a spec's \"pin\")"},
};

// "memory > segments > store > split > padded > store (after the stopgaps) > dynamic > bucket > heuristics".
std::string source_chain_text();
// {"order": [{"name":..., "source":..., "when":..., "cost":...}, ...], "asked_for": [{"source":..., "asked_by":...}]}
std::string source_chain_json();

}  // namespace kiln
