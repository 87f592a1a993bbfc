// The split source (runtime/plan_sources.h SplitSource): plans of smaller tuned shapes on their rows of the
// caller's buffers (kiln/runtime/padding.h "Split stopgaps").
#include <numeric>
#include <optional>
#include <tuple>

#include "kiln/runtime/reshape_graph.h"
#include "runtime/plan_sources.h"
#include "runtime/shadow_trial.h"
#include "runtime/stopgap_executors.h"

namespace kiln::runtime_detail {

namespace {

// The tuned shapes equal to `shape` in every other dim and smaller in `sym`, by their extent there.
std::map<int64_t, const TunedShape*> smaller_in(const std::vector<TunedShape>& tuned,
                                                const std::map<std::string, int64_t>& shape, const std::string& sym) {
  std::map<int64_t, const TunedShape*> by_extent;
  const int64_t n = shape.at(sym);
  for (const TunedShape& t : tuned) {
    if (t.shape.size() != shape.size()) continue;
    bool same = true;
    int64_t e = 0;
    for (const auto& [s2, v] : shape) {
      auto it = t.shape.find(s2);
      if (it == t.shape.end()) {
        same = false;
      } else if (s2 == sym) {
        e = it->second;
      } else if (it->second != v) {
        same = false;
      }
    }
    if (same && e >= 1 && e < n) by_extent.emplace(e, &t);
  }
  return by_extent;
}

}  // namespace

StatusOr<bool> SplitSource::serve(SourceRequest& r, Built* out) {
  if (!r.unbuilt() || !state_.options().split) return false;
  const auto& tuned = r.tuned();
  if (!tuned.is_ok()) {
    r.why.push_back("tuned shapes: " + tuned.status().message());
    return false;
  }
  std::string why;
  std::shared_ptr<const ExecutablePlan> plan = split_plan(r, *tuned, &why);
  return r.serve_unbuilt(std::move(plan), PlanSource::kSplit, why, out);
}

std::shared_ptr<const ExecutablePlan> SplitSource::split_plan(SourceRequest& r, const std::vector<TunedShape>& tuned,
                                                              std::string* why) {
  std::string first_miss;
  auto miss = [&](const std::string& m) {
    if (first_miss.empty()) first_miss = "split: " + m;
  };
  // Exact sums in every dim first, then covers (pass 1): a cover computes rows twice and refuses in-place calls.
  std::vector<std::tuple<int, std::string, int64_t>> order;
  for (int pass = 0; pass < (state_.options().split_overlap ? 2 : 1); ++pass)
    for (const auto& [s, v] : r.shape) order.emplace_back(pass, s, v);
  for (const auto& [pass, sym, n] : order) {
    const std::map<int64_t, const TunedShape*> by_extent = smaller_in(tuned, r.shape, sym);
    if (by_extent.empty()) continue;
    std::vector<int64_t> available;
    for (const auto& [e, t] : by_extent) available.push_back(e);
    std::vector<int64_t> extents = split_extents(n, available, state_.options().split_max_parts);
    bool cover = false;
    if (pass == 1) {
      if (!extents.empty()) continue;  // an exact sum: tried in the first pass
      extents = cover_extents(n, available, state_.options().split_max_parts);
      cover = !extents.empty();
    } else if (extents.empty() && state_.options().split_overlap) {
      continue;  // no sum in this dim: its cover waits for the other dims' sums
    }
    if (extents.empty()) {
      miss(sym + " " + std::to_string(n) + " is no sum of at most " + std::to_string(state_.options().split_max_parts) +
           " tuned extents" +
           (state_.options().split_overlap ? ", nor covered by as many" : " (overlapping parts are off)"));
      continue;
    }
    // Each distinct part's plan (held, or loaded from the store and held) and the rows it moves.
    std::map<int64_t, std::pair<std::shared_ptr<const ExecutablePlan>, std::vector<SplitTensor>>> plans;
    bool ok = true;
    for (int64_t e : extents) {
      if (plans.count(e)) continue;
      const TunedShape* t = by_extent.at(e);
      const std::string key = PlanCache::key(r.pg, t->shape);
      std::shared_ptr<const ExecutablePlan> held = state_.cache().find(key);
      // A held plan carries its graph at that shape (read in place, not copied); else the graph reshaped.
      std::optional<StatusOr<Graph>> reshaped;
      if (!held) reshaped.emplace(reshape_graph(*r.pg.graph, t->shape));
      auto rows = held                ? split_rows(r.g, held->graph())
                  : reshaped->is_ok() ? split_rows(r.g, **reshaped)
                                      : StatusOr<std::vector<SplitTensor>>(reshaped->status());
      if (!rows.is_ok()) {  // rows that depend on each other along `sym`, or it is not outermost
        miss(t->shape_key + ": " + rows.status().message());
        ok = false;
        break;
      }
      if (!held) {
        std::string m;
        held = hold_stored(state_, key, **reshaped, &m);
        if (!held) {
          miss("the plan tuned for " + t->shape_key + " did not load: " + m);
          ok = false;
          break;
        }
      }
      held = without_shadow(std::move(held));  // a part of a split plan is never a shadow sample
      plans.emplace(e, std::make_pair(std::move(held), std::move(*rows)));
    }
    if (!ok) continue;
    std::vector<SplitExecutor::Part> parts;
    int64_t row = 0, workspace = 0;
    std::string sum;
    for (size_t k = 0; k < extents.size(); ++k) {
      const int64_t e = extents[k];
      if (cover && k + 1 == extents.size()) row = n - e;  // the last part ends at the last row
      const auto& [plan, rows] = plans.at(e);
      SplitExecutor::Part part;
      part.plan = plan;
      for (const SplitTensor& st : rows) {
        const size_t off = static_cast<size_t>(row) * st.row_bytes;
        if (off % kBindingAlignment != 0) {
          miss("tensor '" + st.name + "' row " + std::to_string(row) + " starts " + std::to_string(off) +
               " bytes in, not " + std::to_string(kBindingAlignment) + "-byte aligned");
          ok = false;
        }
        part.offsets.emplace_back(st.tensor, off);
      }
      workspace = std::max(workspace, plan->workspace_bytes());
      sum += (sum.empty() ? "" : " + ") + std::to_string(e);
      row += e;
      parts.push_back(std::move(part));
    }
    if (!ok) continue;
    std::vector<SplitExecutor::Span> cover_spans;
    if (cover) {
      const int64_t last = extents.back();
      const int64_t before_last = std::accumulate(extents.begin(), extents.end() - 1, int64_t{0});
      *why = "split: " + sym + " " + std::to_string(n) + " covered by " + sum + " (the last part on rows " +
             std::to_string(n - last) + ".." + std::to_string(n - 1) + ", " + std::to_string(before_last - (n - last)) +
             " of them computed twice), the tuned plans on their rows of the caller's buffers, " +
             state_.stopgap_fate();
      cover_spans = bound_tensors(r.g);
    } else {
      *why = "split: " + sym + " " + std::to_string(n) + " = " + sum +
             ", the tuned plans on their rows of the caller's buffers, " + state_.stopgap_fate();
    }
    EngineConfig config = parts.front().plan->config();
    std::vector<std::shared_ptr<const ExecutablePlan>> part_plans;
    for (const SplitExecutor::Part& part : parts) part_plans.push_back(part.plan);
    auto split = std::make_shared<ExecutablePlan>(
        r.g, r.sig, std::move(config), workspace, PlanSource::kSplit,
        std::make_unique<SplitExecutor>(std::move(parts), r.g.name, std::move(cover_spans)));
    split->set_parts(std::move(part_plans));  // identity(): "split[eng41 + eng41]", in run order
    return split;
  }
  *why = first_miss.empty() ? "split: no smaller tuned shape equal in the other dims" : first_miss;
  return nullptr;
}

}  // namespace kiln::runtime_detail
