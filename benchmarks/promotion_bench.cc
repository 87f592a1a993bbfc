// Issue 12's goal "after promotion, within 3% of a fully tuned plan for that shape", measured in one
// process: the plan a Planner promoted for each new size and the plan fully tuned for that size, run in
// turn on the same buffers and timed with CUDA events. (Across processes the same configuration measured
// up to 7% apart on the H200, 2026-12-02: more than the goal's margin.)
//
//   promotion_bench --spec F --symbol S --sizes 3,6,12 --buckets P --reps REP.db --exact EXACT.db
//                   [--promote-by build|tune] [--runs N] [--json]
//
// 1. A Planner over REP.db (the bucket representatives' tuned plans; padded stopgaps, promotions by
//    --promote-by) preloads, asks each size once (a stopgap), waits for its promotions and takes each
//    size's promoted plan from memory.
// 2. A second Planner over EXACT.db (every size tuned exactly, kiln tune) takes each size from the store.
// 3. Per size: inputs from Kiln's seeded generator on buffers shared by both plans; each plan runs 20
//    times to warm, then N rounds (default 200) each run both, in an order that alternates, each execution
//    between two CUDA events on one stream. The figure is median(promoted) / median(tuned), hot caches.
// Needs a GPU. Exit 0 when every size was measured; 1 (naming the size) when a size's tuned plan is not
// from EXACT.db or its promoted plan is still a stopgap (a promotion failed); 2 for usage errors.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_check.h"

using namespace kiln;

namespace {

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "promotion_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Buffers {
  std::vector<DeviceBuffer> owned;
  TensorBindings bindings;
  DeviceBuffer workspace;
};

// Buffers for both plans (one graph at one shape: the same spans), the workspace of the larger need.
Status make_buffers(const ExecutablePlan& a, const ExecutablePlan& b, Buffers* out) {
  std::map<int, void*> by_index;
  const Graph& g = a.graph();
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    auto bytes = a.tensor_bytes(g.tensors[i].name);
    if (!bytes.is_ok()) continue;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(*bytes));
    out->bindings[g.tensors[i].name] = TensorBinding{buf.data(), *bytes};
    by_index[static_cast<int>(i)] = buf.data();
    out->owned.push_back(std::move(buf));
  }
  KILN_RETURN_IF_ERROR(generate_inputs_on_device(g, 7, by_index));
  const int64_t ws = std::max<int64_t>({a.workspace_bytes(), b.workspace_bytes(), 16});
  KILN_ASSIGN_OR_RETURN(out->workspace, DeviceBuffer::allocate(static_cast<size_t>(ws)));
  return Status::ok();
}

StatusOr<double> time_once(const ExecutablePlan& p, const Buffers& b, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
  KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, s));
  KILN_RETURN_IF_ERROR(p.execute(s, b.bindings, b.workspace.data()));
  KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, s));
  KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e1));
  float ms = 0;
  KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0, e1));
  return static_cast<double>(ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec, symbol, sizes_text, buckets, reps, exact, promote_by = "tune";
  int runs = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string n;
    bool ok = true;
    if (a == "--spec") ok = next(&spec);
    else if (a == "--symbol") ok = next(&symbol);
    else if (a == "--sizes") ok = next(&sizes_text);
    else if (a == "--buckets") ok = next(&buckets);
    else if (a == "--reps") ok = next(&reps);
    else if (a == "--exact") ok = next(&exact);
    else if (a == "--promote-by") ok = next(&promote_by);
    else if (a == "--runs" && (ok = next(&n))) runs = std::atoi(n.c_str());
    else if (a == "--json") json = true;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "usage: promotion_bench --spec F --symbol S --sizes 3,6 --buckets P --reps REP.db "
                           "--exact EXACT.db [--promote-by build|tune] [--runs N] [--json]\n");
      return 2;
    }
  }
  std::vector<int64_t> sizes;
  std::stringstream ss(sizes_text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) {
      std::fprintf(stderr, "promotion_bench: --sizes: '%s' is not a size >= 1\n", item.c_str());
      return 2;
    }
    sizes.push_back(v);
  }
  if (spec.empty() || symbol.empty() || sizes.empty() || reps.empty() || exact.empty() || runs < 1 ||
      (promote_by != "build" && promote_by != "tune")) {
    std::fprintf(stderr, "promotion_bench: --spec, --symbol, --sizes, --reps and --exact are needed; --runs >= 1; "
                         "--promote-by build or tune\n");
    return 2;
  }
  auto graph = parse_spec_file(spec);
  if (!graph.is_ok()) return fail("spec", graph.status());
  auto policy = BucketPolicy::parse(buckets);
  if (!policy.is_ok()) return fail("--buckets", policy.status());

  PlannerOptions po;
  po.store_path = reps;
  po.buckets = *policy;
  po.promote_by = promote_by == "tune" ? PromoteBy::kTune : PromoteBy::kBuild;
  auto promoter = Planner::create(po);
  if (!promoter.is_ok()) return fail("Planner over --reps", promoter.status());
  auto pg = (*promoter)->prepare(*graph);
  if (!pg.is_ok()) return fail("prepare", pg.status());
  auto pre = (*promoter)->preload(*pg, /*warm=*/true);
  if (!pre.is_ok()) return fail("preload", pre.status());
  for (int64_t s : sizes) {
    auto got = (*promoter)->obtain(*pg, {{symbol, s}});
    if (!got.is_ok()) return fail("obtain " + std::to_string(s), got.status());
  }
  (*promoter)->wait_for_promotions();

  PlannerOptions eo;
  eo.store_path = exact;
  eo.new_shapes = NewShapes::kBuildNow;
  auto tuned_planner = Planner::create(eo);
  if (!tuned_planner.is_ok()) return fail("Planner over --exact", tuned_planner.status());
  auto epg = (*tuned_planner)->prepare(*graph);
  if (!epg.is_ok()) return fail("prepare", epg.status());

  auto stream = make_stream();
  auto e0 = make_event(), e1 = make_event();
  for (const Status& st : {stream.status(), e0.status(), e1.status()})
    if (!st.is_ok()) return fail("stream and events", st);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t s : sizes) {
    const std::string key = symbol + "=" + std::to_string(s);
    auto promoted = (*promoter)->obtain(*pg, {{symbol, s}});
    auto tuned = (*tuned_planner)->obtain(*epg, {{symbol, s}});
    if (!promoted.is_ok()) return fail("promoted " + key, promoted.status());
    if (!tuned.is_ok()) return fail("tuned " + key, tuned.status());
    const char* from = plan_source_name(promoted->plan->built_from());
    // A ratio means something only between a promoted (or stored) plan and the size's own tuned plan.
    if (tuned->source != PlanSource::kStore)
      return fail("tuned " + key, not_found(std::string("the fully tuned plan came from ") +
                                            plan_source_name(tuned->source) + ", not --exact: " + tuned->why));
    if (plan_source_is_stopgap(promoted->plan->built_from()))
      return fail("promoted " + key,
                  failed_precondition(std::string("still a ") + from + " stopgap: " + (*promoter)->stats().text()));
    Buffers b;
    Status st = make_buffers(*promoted->plan, *tuned->plan, &b);
    if (!st.is_ok()) return fail("buffers " + key, st);
    std::vector<double> ta, tb;
    for (int r = 0; r < 20 + runs; ++r) {
      const bool a_first = r % 2 == 0;
      for (int k = 0; k < 2; ++k) {
        const bool a = (k == 0) == a_first;
        auto t = time_once(a ? *promoted->plan : *tuned->plan, b, stream->get(), e0->get(), e1->get());
        if (!t.is_ok()) return fail("run " + key, t.status());
        if (r >= 20) (a ? ta : tb).push_back(*t);
      }
    }
    const double ma = median(ta), mb = median(tb);
    rows.push_back({{"shape", key},
                    {"promoted_from", from},
                    {"promoted", promoted->plan->identity()},
                    {"tuned", tuned->plan->identity()},
                    {"tuned_from", plan_source_name(tuned->source)},
                    {"promoted_ms", ma},
                    {"tuned_ms", mb},
                    {"ratio", ma / mb}});
    if (!json)
      std::printf("%-12s promoted (%s) %-40s %.4f ms   tuned %-40s %.4f ms   ratio %.3f\n", key.c_str(), from,
                  promoted->plan->identity().c_str(), ma, tuned->plan->identity().c_str(), mb, ma / mb);
  }
  if (json) {
    nlohmann::ordered_json j;
    j["method"] = "one process; per size the promoted and the fully tuned plan alternate on shared buffers, 20 "
                  "warm-up runs each, then " +
                  std::to_string(runs) + " runs each between CUDA events, hot caches; ratio = median / median";
    j["promote_by"] = promote_by;
    j["stats"] = (*promoter)->stats().text();
    j["sizes"] = rows;
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;  // every size measured (any failure returned above)
}
