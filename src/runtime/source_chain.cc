// The chain of plan sources (kiln/runtime/source_chain.h, runtime/plan_sources.h): the request a walk carries,
// the walk itself, and the chain's description.
#include "kiln/runtime/source_chain.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kiln/core/hash.h"
#include "runtime/plan_sources.h"
#include "runtime/shapes.h"

namespace kiln {

std::string source_chain_text() {
  std::string s;
  for (const SourceChainEntry& e : kSourceChain) s += (s.empty() ? "" : " > ") + std::string(e.name);
  return s;
}

std::string source_chain_json() {
  nlohmann::ordered_json j;
  j["order"] = nlohmann::ordered_json::array();
  for (const SourceChainEntry& e : kSourceChain)
    j["order"].push_back(
        {{"name", e.name}, {"source", plan_source_name(e.source)}, {"when", e.when}, {"cost", e.cost}});
  j["asked_for"] = nlohmann::ordered_json::array();
  for (const AskedSource& a : kAskedSources)
    j["asked_for"].push_back({{"source", plan_source_name(a.source)}, {"asked_by", a.asked_by}});
  return j.dump();
}

namespace runtime_detail {

StatusOr<PreparedGraph> prepare_graph(const Graph& graph) {
  auto g = std::make_shared<Graph>(graph);
  KILN_RETURN_IF_ERROR(validate_graph(*g));
  PreparedGraph pg;
  KILN_ASSIGN_OR_RETURN(pg.signature, compute_signature(*g));
  pg.shape = g->dynamic_dims;
  std::vector<std::pair<int, std::string>> by_id;  // by canonical id: declaration order does not matter
  for (size_t i = 0; i < g->tensors.size(); ++i) by_id.emplace_back(pg.signature.tensor_ids[i], g->tensors[i].name);
  std::sort(by_id.begin(), by_id.end());
  std::string names;
  for (const auto& [id, name] : by_id) names += std::to_string(id) + ":" + name + "\n";
  pg.names_key = std::to_string(stable_hash64(names));
  pg.graph = std::move(g);
  return pg;
}

SourceRequest::SourceRequest(PlannerState& state, const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                             bool allow_stopgap, bool store_asked)
    : pg(pg), shape(shape), allow_stopgap(allow_stopgap), store_asked(store_asked), state_(state) {}

Status SourceRequest::init() {
  KILN_RETURN_IF_ERROR(graph_at(pg, shape, &g, &sig));
  const PlannerOptions& o = state_.options();
  stopgap_ = allow_stopgap && o.new_shapes == NewShapes::kStopgap && !shape.empty();
  unbuilt_ = stopgap_ && (o.padded || o.split);
  // Where a stopgap that needs no build may serve and the structure's tuned shapes (read once) do not hold this
  // one, the store is asked after those stopgaps: its miss (a SQLite read, 0.04-0.2 ms) was most of a padded
  // obtain. A plan stored for exactly this key that is not tuned (kiln compile), or was stored since the tuned
  // shapes were read, is still found: the promotion asks the store first and swaps it in. Without promotions
  // nothing would ask it later, so it is asked first.
  if (unbuilt_ && o.promote) {
    const auto& t = tuned();
    store_after_stopgaps_ = t.is_ok() && std::none_of(t->begin(), t->end(), [&](const TunedShape& ts) {
                              return ts.shape_key == sig.shape_key;
                            });
  }
  return Status::ok();
}

const StatusOr<std::vector<TunedShape>>& SourceRequest::tuned() {
  if (!tuned_) tuned_.emplace(state_.tuned_shapes(sig));
  return *tuned_;
}

std::string SourceRequest::joined() const {
  std::string all;
  for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
  return all;
}

bool SourceRequest::serve(std::shared_ptr<const ExecutablePlan> plan, PlanSource source, Built* out) const {
  out->plan = std::move(plan);
  out->source = source;
  out->why = joined();
  return true;
}

bool SourceRequest::serve_unbuilt(std::shared_ptr<const ExecutablePlan> plan, PlanSource source,
                                  const std::string& found, Built* out) {
  if (!plan) {
    why.push_back(found);
    return false;
  }
  if (store_after_stopgaps_) why.push_back("store: asked by the promotion (no tuned record for this shape)");
  why.push_back(found);
  return serve(std::move(plan), source, out);
}

SourceChain::SourceChain(PlannerState& state) : state_(state), tuned_(state), pinned_(state) {
  for (const SourceChainEntry& e : kSourceChain) {
    switch (e.step) {
      case SourceStep::kMemory: break;  // the Planner looks in memory before it walks the chain
      case SourceStep::kSegments: steps_.push_back(std::make_unique<SegmentsSource>(state, *this)); break;
      case SourceStep::kStore:
        steps_.push_back(std::make_unique<StoreSource>(state, tuned_, /*after_stopgaps=*/false));
        break;
      case SourceStep::kSplit: steps_.push_back(std::make_unique<SplitSource>(state)); break;
      case SourceStep::kPadded: {
        auto padded = std::make_unique<PaddedSource>(state);
        padded_ = padded.get();
        steps_.push_back(std::move(padded));
        break;
      }
      case SourceStep::kStoreAfterStopgaps:
        steps_.push_back(std::make_unique<StoreSource>(state, tuned_, /*after_stopgaps=*/true));
        break;
      case SourceStep::kDynamic: steps_.push_back(std::make_unique<DynamicSource>(state)); break;
      case SourceStep::kBucket: steps_.push_back(std::make_unique<BucketSource>(state)); break;
      case SourceStep::kHeuristics: steps_.push_back(std::make_unique<HeuristicsSource>(state)); break;
    }
  }
}

StatusOr<Built> SourceChain::build(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape,
                                   bool allow_stopgap, bool store_asked) {
  SourceRequest r(state_, pg, shape, allow_stopgap, store_asked);
  KILN_RETURN_IF_ERROR(r.init());
  Built out;
  for (const std::unique_ptr<Source>& step : steps_) {
    KILN_ASSIGN_OR_RETURN(bool served, step->serve(r, &out));
    if (served) return out;
  }
  return internal_error("graph '" + r.g.name + "': no source served it (" + r.joined() + ")");
}

}  // namespace runtime_detail
}  // namespace kiln
